package repo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildOutputs are paths the repository's commands write into the work
// tree, one per kind: make's bin/ and dist/, a test binary (go test -c), and
// `go build ./<dir>` of each main package at the root (which is how the
// 55 MB bench binary once got committed).
func buildOutputs(t *testing.T, root string) []string {
	t.Helper()
	outs := []string{"bin/csi-clone-sidecar", "bin/image/linux/arm64/csi-clone-sidecar", "dist/SHA256SUMS",
		"dist/oci/index.json", "deploy/deploy.test", "csi-clone-sidecar.test", "_output/x"}
	cmd := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	mains := strings.Fields(string(out))
	if len(mains) < 3 {
		t.Fatalf("go list found %d main packages: %q", len(mains), mains)
	}
	for _, pkg := range mains {
		outs = append(outs, pkg[strings.LastIndex(pkg, "/")+1:])
	}
	return outs
}

// Every build output is ignored by git (.gitignore) and left out of an
// image build context (.dockerignore).
func TestBuildOutputsAreIgnored(t *testing.T) {
	root := repoRoot(t)
	docker := readDockerignore(t, filepath.Join(root, ".dockerignore"))
	for _, path := range buildOutputs(t, root) {
		cmd := exec.Command("git", "check-ignore", "-q", "--no-index", path)
		cmd.Dir = root
		if err := cmd.Run(); err != nil {
			t.Errorf("%s is not ignored by .gitignore (git check-ignore: %v)", path, err)
		}
		if !dockerIgnores(docker, path) {
			t.Errorf("%s is not excluded by .dockerignore", path)
		}
	}
}

// readDockerignore returns the patterns of a .dockerignore, cleaned as the
// builder cleans them.
func readDockerignore(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf("%s: exception %q: this test does not model exceptions", path, line)
		}
		patterns = append(patterns, filepath.Clean(strings.TrimPrefix(line, "/")))
	}
	return patterns
}

// dockerIgnores reports whether a path is excluded from the build context:
// a pattern matches it or one of its parent directories, from the context's
// root (Docker anchors every pattern there); "**/" matches any number of
// leading directories.
func dockerIgnores(patterns []string, path string) bool {
	parts := strings.Split(path, "/")
	for _, p := range patterns {
		anywhere := strings.HasPrefix(p, "**/")
		p = strings.TrimPrefix(p, "**/")
		for end := 1; end <= len(parts); end++ {
			for start := 0; start < end; start++ {
				if start > 0 && !anywhere {
					break
				}
				if ok, _ := filepath.Match(p, strings.Join(parts[start:end], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}

// The matcher over its cases: anchored at the root, a directory excludes
// what is under it, "**/" reaches down.
func TestDockerIgnores(t *testing.T) {
	patterns := []string{"bin", "**/*.test", "bench"}
	for path, want := range map[string]bool{
		"bin/x": true, "bin": true, "deploy/deploy.test": true, "x.test": true, "bench": true,
		"test/bench/main.go": false, "sidecar/bin": false, "binx": false, "deploy/x.go": false,
	} {
		if got := dockerIgnores(patterns, path); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
}
