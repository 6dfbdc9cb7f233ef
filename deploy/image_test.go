package deploy_test

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dockerStage is one FROM ... stage of the Dockerfile, its instructions
// upper-cased by keyword and joined with their arguments.
type dockerStage struct {
	from         string
	instructions []string
}

func readDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []dockerStage
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
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
		last.instructions = append(last.instructions, keyword+" "+args)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

// The image cannot be built here (no Docker engine on these machines), so
// this checks what it is made of: the build stage runs `make sidecar`, the
// very target `make build` uses, and that target produces a static binary;
// the runtime stage is distroless, non-root, and runs that binary.
func TestImageShipsTheStaticBinaryMakeBuilds(t *testing.T) {
	stages := readDockerfile(t)
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a runtime stage", len(stages))
	}
	build, runtime := stages[0], stages[1]
	if !hasInstruction(build, "RUN make sidecar") {
		t.Errorf("the build stage must run `make sidecar` (what `make build` runs): %q", build.instructions)
	}
	if !strings.Contains(runtime.from, "distroless/static") || !strings.HasSuffix(runtime.from, ":nonroot") {
		t.Errorf("runtime base %q: want distroless static, nonroot", runtime.from)
	}
	for _, want := range []string{
		"COPY --from=build /src/bin/csi-clone-sidecar /csi-clone-sidecar",
		"USER 65532:65532",
		`ENTRYPOINT ["/csi-clone-sidecar"]`,
	} {
		if !hasInstruction(runtime, want) {
			t.Errorf("runtime stage lacks %q: %q", want, runtime.instructions)
		}
	}
	if build, sidecar := makeCommands(t, "build"), makeCommands(t, "sidecar"); !strings.Contains(build, sidecar) {
		t.Errorf("`make build` does not build the sidecar as `make sidecar` does:\nbuild:   %s\nsidecar: %s", build, sidecar)
	}
	assertStatic(t, buildSidecar(t))
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
// shared library: distroless/static has neither.
func assertStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for a dynamic loader; the image has none", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v; the image has none", path, libs)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "image-test") {
		t.Errorf("%s --version: %v, %q; want the version make stamped in", path, err, out)
	}
}
