package release_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

const (
	version      = "v0.0.0-test"
	chartVersion = "0.0.0-test" // Helm's SemVer: the version without its v
	// releaseRepository is where the chart of a release installs from.
	releaseRepository = "ghcr.io/cozystack/csi-clone-sidecar"
	podmanInstall     = "Debian: apt-get install -y podman runc (make tools installs them)"
)

// The release, built twice, published to a registry on 127.0.0.1, and
// installed from there as an operator would: the chart renders the
// pushed digest, and the image it names runs and relays CSI calls.
func TestReleasePublishAndRun(t *testing.T) {
	podman := lookPath(t, "podman", podmanInstall)
	lookPath(t, "runc", podmanInstall)
	helm, err := tools.Bin("helm")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	dist := filepath.Join(work, "dist")
	makeRelease(t, dist)
	sums := checkSums(t, dist)
	again := filepath.Join(work, "again")
	makeRelease(t, again)
	if other := checkSums(t, again); !slices.Equal(other, sums) {
		t.Fatalf("two builds of one commit differ:\n%s\nand\n%s", strings.Join(sums, "\n"), strings.Join(other, "\n"))
	}
	checkSBOM(t, filepath.Join(dist, "csi-clone-sidecar-linux-amd64.cdx.json"))

	reg := serveRegistry(t)
	pushed := makePublish(t, dist, reg)
	builtDigest := strings.TrimSpace(readFile(t, filepath.Join(dist, "csi-clone-sidecar.digest")))
	if pushed.imageDigest != builtDigest {
		t.Fatalf("pushed image %s, built %s", pushed.imageDigest, builtDigest)
	}
	checkRegistry(t, reg, pushed.imageDigest)

	image := chartImage(t, helm, reg, work, "")
	if want := releaseRepository + ":" + version + "@" + pushed.imageDigest; image != want {
		t.Fatalf("the published chart installs %s, want the pushed image %s", image, want)
	}
	// From the mirror, as NOTES.txt says: only the repository changes.
	mirrored := chartImage(t, helm, reg, work, reg+"/csi-clone-sidecar")
	if want := reg + "/csi-clone-sidecar:" + version + "@" + pushed.imageDigest; mirrored != want {
		t.Fatalf("the chart pointed at the mirror installs %s, want %s", mirrored, want)
	}
	runFromRegistry(t, podman, mirrored)
}

// makeRelease runs make release VERSION=version into dist.
func makeRelease(t *testing.T, dist string) {
	t.Helper()
	out, err := runIn(t, "../..", "make", "--no-print-directory", "release", "VERSION="+version, "DIST="+dist)
	t.Logf("make release DIST=%s:\n%s", dist, out)
	if err != nil {
		t.Fatalf("make release: %v", err)
	}
}

// checkSums verifies dist's SHA256SUMS against its files, checks it lists
// every file a release ships, and returns its lines.
func checkSums(t *testing.T, dist string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dist, "SHA256SUMS"))), "\n")
	var names []string
	for _, line := range lines {
		sum, file, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: %q is not sha256sum's format", line)
		}
		got := sha256.Sum256([]byte(readFile(t, filepath.Join(dist, file))))
		if hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: sha256 %x, SHA256SUMS says %s", file, got, sum)
		}
		names = append(names, file)
	}
	want := []string{
		"csi-clone-sidecar-" + chartVersion + ".tgz",
		"csi-clone-sidecar-linux-amd64", "csi-clone-sidecar-linux-amd64.cdx.json",
		"csi-clone-sidecar-linux-arm64", "csi-clone-sidecar-linux-arm64.cdx.json",
		"csi-clone-sidecar.digest",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("SHA256SUMS lists %q, want %q", names, want)
	}
	return lines
}

// checkSBOM: the SBOM describes the binary at version and names the
// modules it is built from, at the versions go.mod selects.
func checkSBOM(t *testing.T, path string) {
	t.Helper()
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct{ Name, Version string } `json:"component"`
		} `json:"metadata"`
		Components []struct{ Name, Version, Purl string } `json:"components"`
	}
	if err := json.Unmarshal([]byte(readFile(t, path)), &bom); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Version != version {
		t.Errorf("%s: format %q, component %+v; want CycloneDX of version %s", path, bom.BOMFormat, bom.Metadata.Component, version)
	}
	for _, mod := range []string{"google.golang.org/grpc", "k8s.io/client-go", "github.com/container-storage-interface/spec"} {
		out, err := runIn(t, "../..", "go", "list", "-m", "-f", "{{.Version}}", mod)
		if err != nil {
			t.Fatalf("go list -m %s: %v\n%s", mod, err, out)
		}
		want := strings.TrimSpace(out)
		if !slices.ContainsFunc(bom.Components, func(c struct{ Name, Version, Purl string }) bool {
			return c.Name == mod && c.Version == want
		}) {
			t.Errorf("%s does not name %s %s", path, mod, want)
		}
	}
}

// serveRegistry serves an OCI registry in memory on 127.0.0.1 for the
// test's length and returns its host:port.
func serveRegistry(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// published is what make publish printed.
type published struct {
	imageDigest string
	refs        []string
}

// makePublish runs make publish into reg and reads the references it prints.
func makePublish(t *testing.T, dist, reg string) published {
	t.Helper()
	out, err := runIn(t, "../..", "make", "--no-print-directory", "publish", "VERSION="+version, "DIST="+dist,
		"REGISTRY="+reg, "HELM_PUSH_FLAGS=--plain-http")
	t.Logf("make publish:\n%s", out)
	if err != nil {
		t.Fatalf("make publish: %v", err)
	}
	var p published
	refRE := regexp.MustCompile(`^(image|chart): (\S+)$`)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := refRE.FindStringSubmatch(sc.Text()); m != nil {
			p.refs = append(p.refs, m[2])
		}
	}
	repo := reg + "/csi-clone-sidecar"
	// A pre-release is tagged with its version only: v0.0 stays where the
	// last release put it.
	if len(p.refs) != 3 || !strings.HasPrefix(p.refs[0], repo+"@sha256:") || p.refs[1] != repo+":"+version ||
		!strings.HasPrefix(p.refs[2], "oci://"+reg+"/charts/csi-clone-sidecar:"+chartVersion+"@sha256:") {
		t.Fatalf("make publish printed %q; want the image by digest, by tag %s, and the chart", p.refs, version)
	}
	p.imageDigest = strings.TrimPrefix(p.refs[0], repo+"@")
	return p
}

// checkRegistry: the registry serves the version tag as the pushed index,
// one image per platform.
func checkRegistry(t *testing.T, reg, digest string) {
	t.Helper()
	tag, err := name.NewTag(reg + "/csi-clone-sidecar:" + version)
	if err != nil {
		t.Fatal(err)
	}
	index, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("%s: %v", tag, err)
	}
	got, err := index.Digest()
	if err != nil || got.String() != digest {
		t.Fatalf("%s is %v (%v), want %s", tag, got, err, digest)
	}
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range im.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("%s holds %q, want linux/amd64 and linux/arm64", tag, platforms)
	}
}

// chartImage pulls the published chart from reg into a wrapper chart that
// vendors it as Cozystack's linstor chart does, renders the sidecar
// container with helm template (from the mirror when repository is set)
// and returns its image. It also checks the chart's version and appVersion.
func chartImage(t *testing.T, helm, reg, work, repository string) string {
	t.Helper()
	ref := "oci://" + reg + "/charts/csi-clone-sidecar"
	meta, err := runIn(t, ".", helm, "show", "chart", ref, "--version", chartVersion, "--plain-http")
	if err != nil {
		t.Fatalf("helm show chart %s: %v\n%s", ref, err, meta)
	}
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal([]byte(meta), &chart); err != nil || chart.Version != chartVersion || chart.AppVersion != version {
		t.Fatalf("%s: version %q appVersion %q (%v), want %s and %s", ref, chart.Version, chart.AppVersion, err, chartVersion, version)
	}
	wrapper := filepath.Join(work, "wrapper")
	if err := os.RemoveAll(wrapper); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(wrapper, "charts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := runIn(t, ".", helm, "pull", ref, "--version", chartVersion, "--plain-http", "-d", filepath.Join(wrapper, "charts")); err != nil {
		t.Fatalf("helm pull %s: %v\n%s", ref, err, out)
	}
	writeFile(t, filepath.Join(wrapper, "Chart.yaml"), "apiVersion: v2\nname: wrapper\nversion: 0.0.0\ndependencies:\n"+
		"  - name: csi-clone-sidecar\n    version: "+chartVersion+"\n    repository: "+ref+"\n    alias: csiCloneSidecar\n")
	writeFile(t, filepath.Join(wrapper, "templates", "pod.yaml"),
		"containers:\n  {{- include \"csi-clone-sidecar.podTemplateContainers\" .Subcharts.csiCloneSidecar | nindent 2 }}\n")
	args := []string{"template", "wrapper", wrapper, "--show-only", "templates/pod.yaml"}
	if repository != "" {
		args = append(args, "--set", "csiCloneSidecar.sidecar.image.repository="+repository)
	}
	out, err := runIn(t, ".", helm, args...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	var pod struct {
		Containers []struct{ Name, Image string } `json:"containers"`
	}
	if err := yaml.Unmarshal([]byte(out), &pod); err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	for _, c := range pod.Containers {
		if c.Name == "csi-clone-sidecar" {
			return c.Image
		}
	}
	t.Fatalf("helm template rendered no csi-clone-sidecar container:\n%s", out)
	return ""
}

// runFromRegistry pulls image (repository:tag@digest, as the chart renders
// it) with podman from the loopback registry and runs it: --version prints
// the release's version; with a CSI driver's socket mounted, the container
// relays GetPluginInfo and Probe to it and answers /healthz.
func runFromRegistry(t *testing.T, podman, image string) {
	t.Helper()
	pod := podmanStore(t, podman)
	// podman 4.3 does not pull a reference with both a tag and a digest
	// (Kubernetes does, by the digest): the digest alone is the same image.
	repoTag, digest, _ := strings.Cut(image, "@")
	byDigest := repoTag[:strings.LastIndex(repoTag, ":")] + "@" + digest
	if out, err := pod("pull", "--tls-verify=false", byDigest); err != nil {
		t.Fatalf("podman pull %s: %v\n%s", byDigest, err, out)
	}
	runArgs := []string{"run", "--rm", "--cap-drop", "all", "--security-opt", "no-new-privileges", "--read-only",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
	for _, cmd := range []string{"version", "--version"} {
		out, err := pod(append(runArgs, "--network", "none", byDigest, cmd)...)
		if err != nil || strings.TrimSpace(out) != "csi-clone-sidecar "+version {
			t.Fatalf("podman run %s %s: %v, %q; want %q", byDigest, cmd, err, out, "csi-clone-sidecar "+version)
		}
	}

	dir := t.TempDir()
	driver, err := csidriver.Start(csidriver.Config{Endpoint: filepath.Join(dir, "csi.sock"), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(driver.Stop)
	port := freePort(t)
	name := fmt.Sprintf("csi-clone-release-test-%d", os.Getpid())
	// Detached and named (not --rm): removed by the cleanup below.
	if out, err := pod(append([]string{"run"}, append(runArgs[2:], "-d", "--name", name, "--network", "host", "-v", dir+":/csi",
		byDigest, "--csi-address=/csi/csi.sock", "--listen-address=/csi/csi-clone.sock", "--verdicts=false",
		fmt.Sprintf("--http-endpoint=127.0.0.1:%d", port))...)...); err != nil {
		t.Fatalf("podman run the relay: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := pod("rm", "-f", "-t", "2", name); err != nil {
			t.Logf("podman rm %s: %v\n%s", name, err, out)
		}
	})
	relayIdentity(t, filepath.Join(dir, "csi-clone.sock"), func() string { out, _ := pod("logs", name); return out })
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
}

// relayIdentity dials the relay's socket once it exists and makes the
// Identity calls csi-sanity starts with: GetPluginInfo must be the
// driver's answer, Probe must say ready.
func relayIdentity(t *testing.T, socket string, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not create %s in 60s; its log:\n%s", socket, logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := csi.NewIdentityClient(conn)
	info, err := id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != csidriver.DefaultDriverName {
		t.Fatalf("GetPluginInfo through the relay: %v, %q; want %q\n%s", err, info.GetName(), csidriver.DefaultDriverName, logs())
	}
	probe, err := id.Probe(ctx, &csi.ProbeRequest{})
	if err != nil || (probe.GetReady() != nil && !probe.GetReady().GetValue()) {
		t.Fatalf("Probe through the relay: %v, %v", err, probe)
	}
}

// podmanStore returns a podman runner with a private store, removed after
// the test, flagged for these machines as deploy/image_test.go explains
// (runc, cgroupfs).
func podmanStore(t *testing.T, podman string) func(args ...string) (string, error) {
	t.Helper()
	store, err := os.MkdirTemp("", "podman-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(store) })
	global := []string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"),
		"--tmpdir", filepath.Join(store, "tmp"), "--storage-driver", "vfs", "--events-backend", "none",
		"--cgroup-manager", "cgroupfs", "--runtime", "runc"}
	return func(args ...string) (string, error) {
		return runIn(t, ".", podman, append(slices.Clone(global), args...)...)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func lookPath(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH (%s)", name, install)
	}
	return path
}

// runIn runs a command in dir and returns its combined output.
func runIn(t *testing.T, dir, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
