// Command image builds the sidecar's container image without a container
// engine: it puts the static binaries `make sidecar` built, one per
// platform, each alone in one layer on an empty base, and writes a
// multi-platform OCI image layout and one docker-archive tarball per
// platform. `make image` runs it; nothing in the sidecar imports it.
//
// The image holds one file, /csi-clone-sidecar: no shell, no CA bundle, no
// /etc/passwd, no /tmp. The sidecar writes nothing but its socket (in the
// mounted /csi volume) and, with --observations-log, a file the user mounts;
// it reaches the API server with the service account's CA; its user is
// numeric. The config (entrypoint, user, labels) is the one the Dockerfile's
// runtime stage declares: deploy/image_test.go holds the two to each other.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// binaryPath is where the binary lives in the image, and the entrypoint.
	binaryPath = "/csi-clone-sidecar"
	// user is root's uid and gid: the driver's socket (created by the driver
	// as root under the runtime's umask) is dialable by root only, as for
	// csi-provisioner, csi-resizer and csi-snapshotter in the same pod. The
	// pod's securityContext drops every capability.
	user = "0:0"
	// refNameAnnotation names an image in an OCI layout's index.json
	// (what `skopeo copy oci:DIR:TAG` or `podman pull oci:DIR:TAG` look up).
	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// options are the command's flags.
type options struct {
	out      string
	tag      string
	version  string
	revision string
	source   string
	created  string
	binaries platformBinaries
	// archives: also a docker-archive per platform (make image); make
	// release ships the layout alone, which publish pushes.
	archives bool
	// indexDigest: a file to write the image index's digest into, the one
	// value the release pins the chart to.
	indexDigest string
}

// platformBinaries is the repeated -binary os/arch=path flag, in order.
type platformBinaries []platformBinary

type platformBinary struct {
	platform v1.Platform
	path     string
}

func (p *platformBinaries) String() string { return fmt.Sprint(*p) }

func (p *platformBinaries) Set(s string) error {
	plat, path, ok := strings.Cut(s, "=")
	osName, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || osName == "" || arch == "" || path == "" {
		return fmt.Errorf("want os/arch=path, got %q", s)
	}
	*p = append(*p, platformBinary{platform: v1.Platform{OS: osName, Architecture: arch}, path: path})
	return nil
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "directory to write oci/ (the layout) and one <name>-<os>-<arch>.tar docker-archive per platform into")
	flag.StringVar(&o.tag, "tag", "", "image reference the docker-archives and the layout's index name, e.g. ghcr.io/cozystack/csi-clone-sidecar:v0.1.0")
	flag.StringVar(&o.version, "version", "", "org.opencontainers.image.version label")
	flag.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision label (the git commit)")
	flag.StringVar(&o.source, "source", "", "org.opencontainers.image.source label (the repository URL)")
	flag.StringVar(&o.created, "created", "", "the image's creation time, RFC 3339 (the commit's time keeps the image reproducible); empty: none")
	flag.BoolVar(&o.archives, "archives", true, "also write one docker-archive per platform")
	flag.StringVar(&o.indexDigest, "index-digest", "", "file to write the image index's digest (sha256:...) into")
	flag.Var(&o.binaries, "binary", "os/arch=path of a static binary for that platform (repeat per platform)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.out == "" || o.tag == "" || o.version == "" || o.revision == "" || o.source == "" || len(o.binaries) == 0 {
		return errors.New("-out, -tag, -version, -revision, -source and at least one -binary are required")
	}
	tag, err := name.NewTag(o.tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	var created time.Time
	if o.created != "" {
		if created, err = time.Parse(time.RFC3339, o.created); err != nil {
			return fmt.Errorf("-created: %w", err)
		}
	}
	labels := map[string]string{
		"org.opencontainers.image.source":   o.source,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.version":  o.version,
	}
	index := v1.ImageIndex(empty.Index)
	index = mutate.IndexMediaType(index, types.OCIImageIndex)
	for _, b := range o.binaries {
		img, err := platformImage(b, labels, created)
		if err != nil {
			return fmt.Errorf("%s: %w", platformString(b.platform), err)
		}
		if o.archives {
			archive := filepath.Join(o.out, archiveName(b.platform))
			if err := tarball.WriteToFile(archive, tag, img); err != nil {
				return fmt.Errorf("%s: %w", archive, err)
			}
		}
		plat := b.platform
		index = mutate.AppendManifests(index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	dir := filepath.Join(o.out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(index, layout.WithAnnotations(map[string]string{refNameAnnotation: tag.String()})); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if o.indexDigest != "" {
		digest, err := index.Digest()
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.indexDigest, []byte(digest.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	return report(o.out, index, o.archives)
}

// platformImage is one platform's image: the binary alone in one layer,
// and the config the Dockerfile's runtime stage declares.
func platformImage(b platformBinary, labels map[string]string, created time.Time) (v1.Image, error) {
	bin, err := os.ReadFile(b.path)
	if err != nil {
		return nil, err
	}
	layerTar, err := singleFileTar(strings.TrimPrefix(binaryPath, "/"), bin, 0o755)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: created},
		CreatedBy: "COPY csi-clone-sidecar " + binaryPath + " # make image (test/tools/image)",
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = b.platform.OS, b.platform.Architecture, b.platform.Variant
	cfg.Created = v1.Time{Time: created}
	cfg.Config.Entrypoint = []string{binaryPath}
	cfg.Config.User = user
	cfg.Config.Labels = labels
	return mutate.ConfigFile(img, cfg)
}

// singleFileTar is a layer with one root-owned file, its times zero so that
// the same binary always gives the same layer digest.
func singleFileTar(path string, content []byte, mode int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: path, Mode: mode, Size: int64(len(content)),
		ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// archiveName is the docker-archive of one platform, e.g.
// csi-clone-sidecar-linux-amd64.tar.
func archiveName(p v1.Platform) string {
	return "csi-clone-sidecar-" + strings.ReplaceAll(platformString(p), "/", "-") + ".tar"
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// report prints what was written: per platform the image's digest and its
// size (the compressed layer a registry stores and a node pulls).
func report(out string, index v1.ImageIndex, archives bool) error {
	im, err := index.IndexManifest()
	if err != nil {
		return err
	}
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image: %s (index %s)\n", filepath.Join(out, "oci"), digest)
	for _, desc := range im.Manifests {
		img, err := index.Image(desc.Digest)
		if err != nil {
			return err
		}
		size, err := pulledSize(img)
		if err != nil {
			return err
		}
		host := ""
		if desc.Platform.OS == runtime.GOOS && desc.Platform.Architecture == runtime.GOARCH {
			host = " (this machine's)"
		}
		archive := ""
		if archives {
			archive = "; docker-archive " + filepath.Join(out, archiveName(*desc.Platform))
		}
		fmt.Printf("image: %s %s: %.1f MiB compressed%s%s\n", platformString(*desc.Platform), desc.Digest,
			float64(size)/(1<<20), archive, host)
	}
	return nil
}

// pulledSize is what a pull of one platform's image moves: its manifest,
// config and compressed layers.
func pulledSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	total := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		total += l.Size
	}
	return total, nil
}
