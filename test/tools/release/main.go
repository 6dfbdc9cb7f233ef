// Command release does the two steps of `make release` / `make publish`
// (test/tools/release.sh) that no pinned tool does reproducibly:
//
//	release chart-epoch -epoch SECONDS CHART.tgz
//	    rewrites a chart `helm package` wrote with every file's time set to
//	    SECONDS (the commit's, SOURCE_DATE_EPOCH): Helm stamps the time of
//	    packaging, so two packagings of one commit would differ.
//	release push -layout DIR -repository REPO -tag TAG...
//	    pushes the image index of an OCI layout to REPO by its digest, then
//	    points each TAG at it, and prints REPO@DIGEST and REPO:TAG.
//
// push authenticates with $REGISTRY_USER and $REGISTRY_PASSWORD when set
// (the release workflow passes its GITHUB_TOKEN), anonymously otherwise; a
// registry on 127.0.0.1 or localhost is spoken to over plain HTTP.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "chart-epoch":
		err = chartEpoch(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release chart-epoch -epoch SECONDS CHART.tgz | release push -layout DIR -repository REPO -tag TAG...")
	os.Exit(2)
}

// tags is the repeated -tag flag.
type tags []string

func (t *tags) String() string     { return strings.Join(*t, ",") }
func (t *tags) Set(s string) error { *t = append(*t, s); return nil }

func chartEpoch(args []string) error {
	fs := flag.NewFlagSet("chart-epoch", flag.ExitOnError)
	epoch := fs.Int64("epoch", -1, "seconds since 1970 to stamp every file with (SOURCE_DATE_EPOCH)")
	_ = fs.Parse(args)
	if *epoch < 0 || fs.NArg() != 1 {
		return errors.New("chart-epoch: want -epoch SECONDS and one chart archive")
	}
	path := fs.Arg(0)
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := restamp(raw, time.Unix(*epoch, 0).UTC())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// restamp rewrites a gzipped tar with every entry's times set to when, and
// keeps the rest: entry order, names, modes, contents and the gzip header
// (Helm writes its own marker into it).
func restamp(tgz []byte, when time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Header = zr.Header
	zw.Header.ModTime = time.Time{}
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = when, time.Time{}, time.Time{}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	dir := fs.String("layout", "", "OCI image layout holding one image index (make release's dist/oci)")
	repository := fs.String("repository", "", "repository to push to, e.g. ghcr.io/cozystack/csi-clone-sidecar")
	var tagNames tags
	fs.Var(&tagNames, "tag", "tag to point at the pushed index (repeat)")
	_ = fs.Parse(args)
	if *dir == "" || *repository == "" || fs.NArg() != 0 {
		return errors.New("push: want -layout DIR -repository REPO [-tag TAG]...")
	}
	repo, err := name.NewRepository(*repository)
	if err != nil {
		return fmt.Errorf("-repository: %w", err)
	}
	outer, err := layout.ImageIndexFromPath(*dir)
	if err != nil {
		return err
	}
	om, err := outer.IndexManifest()
	if err != nil {
		return err
	}
	if len(om.Manifests) != 1 {
		return fmt.Errorf("%s holds %d manifests, want the one image index make release writes", *dir, len(om.Manifests))
	}
	index, err := outer.ImageIndex(om.Manifests[0].Digest)
	if err != nil {
		return err
	}
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	opts := []remote.Option{remote.WithAuth(authFromEnv())}
	byDigest := repo.Digest(digest.String())
	if err := remote.WriteIndex(byDigest, index, opts...); err != nil {
		return fmt.Errorf("push %s: %w", byDigest, err)
	}
	fmt.Println(byDigest.String())
	for _, t := range tagNames {
		tag := repo.Tag(t)
		if err := remote.Tag(tag, index, opts...); err != nil {
			return fmt.Errorf("tag %s: %w", tag, err)
		}
		fmt.Println(tag.String())
	}
	return nil
}

// authFromEnv is basic auth from $REGISTRY_USER and $REGISTRY_PASSWORD, or
// none. The password is never printed.
func authFromEnv() authn.Authenticator {
	user, password := os.Getenv("REGISTRY_USER"), os.Getenv("REGISTRY_PASSWORD")
	if user == "" && password == "" {
		return authn.Anonymous
	}
	return &authn.Basic{Username: user, Password: password}
}
