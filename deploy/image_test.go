package deploy_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// What `make image` is asked to stamp in, and what the image must then say.
const (
	imageVersion  = "image-test"
	imageRevision = "0123456789abcdef0123456789abcdef01234567"
	imageTag      = "example.test/csi-clone-sidecar:image-test"
	podmanInstall = "Debian: apt-get install -y podman runc (make tools installs them)"
)

// The platforms `make image` builds by default, as Go and the ELF header
// name them.
var imagePlatforms = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// dockerStage is one FROM ... stage of the Dockerfile, its instructions
// upper-cased by keyword and joined with their arguments.
type dockerStage struct {
	from         string
	instructions []string
}

// readDockerfile reads the Dockerfile's stages; a line ending in a
// backslash continues on the next.
func readDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []dockerStage
	sc := bufio.NewScanner(f)
	pending := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		if line == "" {
			continue
		}
		keyword, args, _ := strings.Cut(line, " ")
		keyword = strings.ToUpper(keyword)
		if keyword == "FROM" {
			stages = append(stages, dockerStage{from: args})
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %q before the first FROM", line)
		}
		last := &stages[len(stages)-1]
		last.instructions = append(last.instructions, keyword+" "+strings.Join(strings.Fields(args), " "))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

// The Dockerfile (for users with an engine) builds the binary with
// `make sidecar`, the very target `make build` uses, for the target
// platform; that target produces a static binary, which the runtime stage
// runs alone on an empty base.
func TestDockerfileShipsTheStaticBinaryMakeBuilds(t *testing.T) {
	stages := readDockerfile(t)
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a runtime stage", len(stages))
	}
	build, rt := stages[0], stages[1]
	if !hasInstruction(build, "RUN GOOS=${TARGETOS} GOARCH=${TARGETARCH} make sidecar") {
		t.Errorf("the build stage must run `make sidecar` (what `make build` runs) for the target platform: %q", build.instructions)
	}
	if rt.from != "scratch" {
		t.Errorf("runtime base %q: want scratch (the image is the binary alone, as make image builds it)", rt.from)
	}
	if !hasInstruction(rt, "COPY --from=build /src/bin/csi-clone-sidecar /csi-clone-sidecar") {
		t.Errorf("runtime stage does not copy the binary `make sidecar` wrote: %q", rt.instructions)
	}
	if build, sidecar := makeCommands(t, "build"), makeCommands(t, "sidecar"); !strings.Contains(build, sidecar) {
		t.Errorf("`make build` does not build the sidecar as `make sidecar` does:\nbuild:   %s\nsidecar: %s", build, sidecar)
	}
	assertStatic(t, buildSidecar(t))
}

// `make image` builds the image without a container engine. The test opens
// what it wrote: the OCI layout holds an index of linux/amd64 and
// linux/arm64 images, each one layer holding only the static binary for its
// architecture, with the entrypoint, user and labels the Dockerfile's
// runtime stage declares; the docker-archive of each platform holds the same
// image; the binary taken out of this machine's layer runs; and Debian's
// podman loads the docker-archive and runs it as the image says, with every
// capability dropped and a read-only root filesystem.
func TestMakeImageWithoutAnEngine(t *testing.T) {
	podman := tool(t, "podman", podmanInstall)
	tool(t, "runc", podmanInstall)
	out := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "--no-print-directory", "image", "IMAGE_DIR="+out,
		"VERSION="+imageVersion, "REVISION="+imageRevision, "IMAGE="+imageTag)
	res, err := cmd.CombinedOutput()
	t.Logf("make image:\n%s", res)
	if err != nil {
		t.Fatalf("make image: %v", err)
	}
	index, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	index, im := platformIndex(t, index)
	want := dockerfileConfig(t)
	var hostBinary string
	bins := t.TempDir()
	for _, desc := range im.Manifests {
		arch := desc.Platform.Architecture
		t.Run(arch, func(t *testing.T) {
			img, err := index.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, img, *desc.Platform, want)
			bin := onlyFile(t, img, strings.TrimPrefix(want.Entrypoint[0], "/"), filepath.Join(bins, arch))
			checkELF(t, bin, imagePlatforms[arch])
			sameImageInArchive(t, filepath.Join(out, "csi-clone-sidecar-linux-"+arch+".tar"), img)
			if arch == runtime.GOARCH {
				hostBinary = bin
			}
		})
	}
	if hostBinary == "" {
		t.Fatalf("no image for this machine's architecture %s", runtime.GOARCH)
	}
	if out, err := exec.Command(hostBinary, "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), imageVersion) {
		t.Errorf("the image's binary --version: %v, %q; want %q", err, out, imageVersion)
	}
	runUnderPodman(t, podman, filepath.Join(out, "csi-clone-sidecar-linux-"+runtime.GOARCH+".tar"))
}

// platformIndex checks the layout's index.json: one image index, named
// imageTag, of one image per platform of imagePlatforms; it returns that
// index.
func platformIndex(t *testing.T, index v1.ImageIndex) (v1.ImageIndex, *v1.IndexManifest) {
	t.Helper()
	outer, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(outer.Manifests) != 1 || outer.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != imageTag {
		t.Fatalf("index.json: want one index named %s, got %+v", imageTag, outer.Manifests)
	}
	inner, err := index.ImageIndex(outer.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := inner.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range im.Manifests {
		if m.Platform == nil {
			t.Fatalf("index entry %s has no platform", m.Digest)
		}
		got = append(got, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	slices.Sort(got)
	if wantPlatforms := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(got, wantPlatforms) {
		t.Fatalf("image index platforms %v, want %v", got, wantPlatforms)
	}
	return inner, im
}

// dockerfileConfig is the config the Dockerfile's runtime stage declares,
// its build arguments set as the test sets make's variables.
func dockerfileConfig(t *testing.T) v1.Config {
	t.Helper()
	stages := readDockerfile(t)
	rt := stages[len(stages)-1]
	cfg := v1.Config{Labels: map[string]string{}}
	args := strings.NewReplacer("${VERSION}", imageVersion, "${REVISION}", imageRevision)
	labelRE := regexp.MustCompile(`([A-Za-z0-9._-]+)="([^"]*)"`)
	for _, in := range rt.instructions {
		keyword, rest, _ := strings.Cut(in, " ")
		switch keyword {
		case "USER":
			cfg.User = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &cfg.Entrypoint); err != nil {
				t.Fatalf("Dockerfile ENTRYPOINT %s: want the exec (JSON) form: %v", rest, err)
			}
		case "LABEL":
			for _, m := range labelRE.FindAllStringSubmatch(rest, -1) {
				cfg.Labels[m[1]] = args.Replace(m[2])
			}
		}
	}
	// What is decided (README "Image"): root's uid, every capability dropped
	// by the pod; the three OCI labels.
	if cfg.User != "0:0" || len(cfg.Entrypoint) != 1 || !strings.HasPrefix(cfg.Entrypoint[0], "/") {
		t.Fatalf("Dockerfile runtime stage: user %q, entrypoint %q; want 0:0 and the binary's absolute path", cfg.User, cfg.Entrypoint)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/cozystack/csi-clone-sidecar",
		"org.opencontainers.image.revision": imageRevision,
		"org.opencontainers.image.version":  imageVersion,
	}
	if !maps.Equal(cfg.Labels, wantLabels) {
		t.Fatalf("Dockerfile labels %v, want %v", cfg.Labels, wantLabels)
	}
	return cfg
}

// checkConfig: the image's config is the Dockerfile's, for its platform.
func checkConfig(t *testing.T, img v1.Image, plat v1.Platform, want v1.Config) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != plat.OS || cf.Architecture != plat.Architecture {
		t.Errorf("config says %s/%s, the index %s/%s", cf.OS, cf.Architecture, plat.OS, plat.Architecture)
	}
	got := cf.Config
	if !slices.Equal(got.Entrypoint, want.Entrypoint) || len(got.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want entrypoint %q and no cmd", got.Entrypoint, got.Cmd, want.Entrypoint)
	}
	if got.User != want.User {
		t.Errorf("user %q, want %q", got.User, want.User)
	}
	if !maps.Equal(got.Labels, want.Labels) {
		t.Errorf("labels %v, want the Dockerfile's %v", got.Labels, want.Labels)
	}
}

// onlyFile checks that the image is one layer holding one file, path,
// root-owned and executable, and writes it into dir.
func onlyFile(t *testing.T, img v1.Image, path, dir string) string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want one (the binary, on an empty base)", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var files []string
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(path))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, hdr.Name)
		if hdr.Name != path {
			continue
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Mode&0o111 == 0 || hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("%s: type %c mode %o owner %d:%d; want a root-owned executable file", path, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid)
		}
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, tr); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, buf.Bytes(), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(files, []string{path}) {
		t.Fatalf("layer holds %q, want only %q", files, path)
	}
	return out
}

// checkELF: the binary is for machine and static (the image has no loader
// and no library).
func checkELF(t *testing.T, path string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s is for %s, want %s", path, f.Machine, machine)
	}
	assertNoLoader(t, path, f)
}

// sameImageInArchive: the platform's docker-archive, tagged imageTag, holds
// the image the layout holds (same config and layer).
func sameImageInArchive(t *testing.T, archive string, img v1.Image) {
	t.Helper()
	tag, err := name.NewTag(imageTag)
	if err != nil {
		t.Fatal(err)
	}
	fromArchive, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	for what, pair := range map[string][2]func() (v1.Hash, error){
		"config": {img.ConfigName, fromArchive.ConfigName},
		"layers": {func() (v1.Hash, error) { return onlyLayerDiffID(img) }, func() (v1.Hash, error) { return onlyLayerDiffID(fromArchive) }},
	} {
		a, errA := pair[0]()
		b, errB := pair[1]()
		if errA != nil || errB != nil || a != b {
			t.Errorf("%s: %s %v (%v), the layout's %v (%v)", archive, what, b, errB, a, errA)
		}
	}
}

func onlyLayerDiffID(img v1.Image) (v1.Hash, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	if len(cf.RootFS.DiffIDs) != 1 {
		return v1.Hash{}, errors.New("not one layer")
	}
	return cf.RootFS.DiffIDs[0], nil
}

// runUnderPodman loads this machine's docker-archive into a private podman
// store and runs the image as a pod would run it: no network, every
// capability dropped, no privilege escalation, read-only root filesystem,
// the image's own entrypoint and user. --version must print the stamped
// version; a bad flag must exit non-zero with its reason.
//
// Two things of these machines shape the flags: Debian's crun (1.8) refuses
// their hybrid cgroup v1/v2 layout ("cgroups in hybrid mode not
// supported"), so the runtime is Debian's runc; and the container's init
// may not set podman's default NOFILE/NPROC limits here, so the limits are
// given, small.
func runUnderPodman(t *testing.T, podman, archive string) {
	t.Helper()
	// Short: podman refuses a runroot path over 50 characters.
	store, err := os.MkdirTemp("", "podman-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(store) })
	global := []string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"),
		"--tmpdir", filepath.Join(store, "tmp"), "--storage-driver", "vfs", "--events-backend", "none",
		"--cgroup-manager", "cgroupfs", "--runtime", "runc"}
	pod := func(args ...string) (string, error) {
		return run(".", podman, append(slices.Clone(global), args...)...)
	}
	if out, err := pod("load", "-i", archive); err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}
	runArgs := []string{"run", "--rm", "--network", "none", "--cap-drop", "all",
		"--security-opt", "no-new-privileges", "--read-only",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", imageTag}
	out, err := pod(append(runArgs, "--version")...)
	if err != nil || !strings.Contains(out, "csi-clone-sidecar "+imageVersion) {
		t.Errorf("podman run %s --version: %v\n%s", imageTag, err, out)
	}
	out, err = pod(append(runArgs, "--csi-address=tcp://driver:1234", "--listen-address=/csi/csi-clone.sock")...)
	if err == nil || !strings.Contains(out, "--csi-address") {
		t.Errorf("podman run with a bad --csi-address: %v, want a non-zero exit naming the flag\n%s", err, out)
	}
	out, err = pod("image", "inspect", "--format", "{{.User}} {{json .Config.Entrypoint}}", imageTag)
	if err != nil || strings.TrimSpace(out) != `0:0 ["/csi-clone-sidecar"]` {
		t.Errorf("podman image inspect: %v, %q", err, out)
	}
}

func hasInstruction(s dockerStage, want string) bool {
	for _, in := range s.instructions {
		if strings.HasPrefix(in, want) {
			return true
		}
	}
	return false
}

// makeCommands is what make would run for target, without running it.
func makeCommands(t *testing.T, target string) string {
	t.Helper()
	out, err := exec.Command("make", "-C", "..", "--no-print-directory", "-n", target, "VERSION=image-test").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", target, err, out)
	}
	return string(out)
}

// buildSidecar runs `make sidecar` into a temporary directory, as the image's
// build stage does into bin/.
func buildSidecar(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "--no-print-directory", "sidecar", "VERSION=image-test", "BIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make sidecar: %v\n%s", err, out)
	}
	return filepath.Join(dir, "csi-clone-sidecar")
}

// assertStatic fails unless the binary needs no dynamic loader and no
// shared library (the image has neither) and reports the version make
// stamped in.
func assertStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	assertNoLoader(t, path, f)
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "image-test") {
		t.Errorf("%s --version: %v, %q; want the version make stamped in", path, err, out)
	}
}

func assertNoLoader(t *testing.T, path string, f *elf.File) {
	t.Helper()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for a dynamic loader; the image has none", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v; the image has none", path, libs)
	}
}

// automaticPlatformArgs are the build arguments BuildKit (docker buildx) sets
// from --platform in the global scope. A stage sees one only through an ARG
// that names it, and an ARG with a default there keeps the default, whatever
// the platform: the arm64 image would ship the default's binary.
var automaticPlatformArgs = []string{"TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT", "BUILDPLATFORM", "BUILDOS", "BUILDARCH", "BUILDVARIANT"}

// Every automatic platform argument the Dockerfile's stages declare is
// declared without a default, so that buildx's value reaches the build.
func TestDockerfileTakesThePlatformFromTheBuilder(t *testing.T) {
	for i, s := range readDockerfile(t) {
		for _, in := range s.instructions {
			name, value, hasDefault := strings.Cut(strings.TrimPrefix(in, "ARG "), "=")
			if strings.HasPrefix(in, "ARG ") && slices.Contains(automaticPlatformArgs, name) && hasDefault {
				t.Errorf("stage %d declares %s with the default %q: it would override the builder's --platform", i, name, value)
			}
		}
	}
}

// The Dockerfile built for each platform by a real builder (Debian's
// buildah, with --platform as buildx takes it): the binary in each image is
// an ELF for that platform's machine (amd64: x86-64, arm64: aarch64),
// static, alone in the image. The golang base is a stand-in (no registry
// is reachable here): an empty image with this machine's /usr (Go
// toolchain, make, shell) and module and build caches mounted in, so the
// build stage runs the Dockerfile's own commands natively.
func TestDockerfileBuildsEachPlatform(t *testing.T) {
	buildah := tool(t, "buildah", "Debian: apt-get install -y buildah (make tools installs it)")
	goenv := func(name string) string {
		out, err := exec.Command("go", "env", name).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	// The stand-in's toolchain builds offline: every module, fetched here.
	if out, err := run("..", "go", "mod", "download"); err != nil {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	modCache, buildCache := goenv("GOMODCACHE"), goenv("GOCACHE")
	store, err := os.MkdirTemp("", "buildah-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(store) })
	bh := func(args ...string) string {
		t.Helper()
		global := []string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs"}
		out, err := run("..", buildah, append(global, args...)...)
		if err != nil {
			t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(out)
	}
	for arch, machine := range imagePlatforms {
		t.Run(arch, func(t *testing.T) {
			// buildah 1.28 resolves the build stage's base for the target
			// platform; the stand-in says so and runs natively anyway.
			golangStandIn(t, bh, arch)
			tag := "example.test/dockerfile:" + arch
			bh("build", "--pull=never", "--isolation", "chroot", "--platform", "linux/"+arch,
				"--build-arg", "VERSION="+imageVersion,
				"--volume", "/usr:/usr:ro", "--volume", modCache+":/go/pkg/mod", "--volume", buildCache+":/root/.cache/go-build",
				"-t", tag, ".")
			dir := t.TempDir()
			bh("push", "-q", tag, "oci:"+filepath.Join(dir, "oci")+":"+arch)
			index, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
			if err != nil {
				t.Fatal(err)
			}
			im, err := index.IndexManifest()
			if err != nil || len(im.Manifests) != 1 {
				t.Fatalf("the pushed layout: %v, %d manifests", err, len(im.Manifests))
			}
			img, err := index.Image(im.Manifests[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			if cf, err := img.ConfigFile(); err != nil || cf.Architecture != arch {
				t.Fatalf("image config: %v, architecture %q, want %s", err, cf.Architecture, arch)
			}
			checkELF(t, onlyFile(t, img, "csi-clone-sidecar", filepath.Join(dir, "bin")), machine)
		})
	}
}

// golangStandIn commits, as golang:1.26 for arch, an empty image whose
// /bin, /lib and /lib64 point into /usr (Debian's merged /usr, mounted from
// this machine at build time) with the golang image's environment, offline.
func golangStandIn(t *testing.T, bh func(...string) string, arch string) {
	t.Helper()
	ctr := bh("from", "scratch")
	root := bh("mount", ctr)
	for link, target := range map[string]string{"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"usr", "tmp", "go", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bh("umount", ctr)
	bh("config", "--arch", arch, "--os", "linux", "--workingdir", "/go",
		"--env", "PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"--env", "GOPATH=/go", "--env", "GOTOOLCHAIN=local", "--env", "GOPROXY=off", ctr)
	bh("commit", "-q", "--rm", ctr, "localhost/golang:1.26")
}
