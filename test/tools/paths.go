// Package tools locates the pinned test tools and CRD sets that
// test/tools/build.sh ("make tools") builds once into a cache outside the
// repository. The pins live in versions.txt, shared with build.sh.
package tools

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed versions.txt
var versionsTxt string

// entry is one row of versions.txt.
type entry struct{ kind, name, version string }

// entries parses versions.txt; build.sh reads the same columns.
func entries() []entry {
	var out []entry
	for _, line := range strings.Split(versionsTxt, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		out = append(out, entry{kind: f[0], name: f[1], version: f[2]})
	}
	return out
}

// Version returns the pinned version of a tool ("bin") or CRD set ("crds").
func Version(kind, name string) (string, error) {
	var known []string
	for _, e := range entries() {
		if e.kind == kind && e.name == name {
			return e.version, nil
		}
		if e.kind == kind {
			known = append(known, e.name)
		}
	}
	return "", fmt.Errorf("tools: no pinned %s %q in test/tools/versions.txt (known: %s)",
		kind, name, strings.Join(known, ", "))
}

// CacheDir is $TOOLS_CACHE, by default
// ${XDG_CACHE_HOME:-$HOME/.cache}/csi-clone-sidecar, as in build.sh (make
// passes TOOLS_CACHE to both).
func CacheDir() (string, error) {
	if dir := os.Getenv("TOOLS_CACHE"); dir != "" {
		return dir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("tools: no cache directory: %w", err)
	}
	return filepath.Join(base, "csi-clone-sidecar"), nil
}

// Bin returns the path of the cached binary of a pinned tool, e.g.
// Bin("kube-apiserver"), or an error naming `make tools` if it is not built.
func Bin(name string) (string, error) {
	path, err := cached("bin", name)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", missing("bin", name, path, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("tools: %s is not an executable file; delete it and run `make tools`", path)
	}
	return path, nil
}

// CRDDir returns the cached directory of a CRD set: "snapshot" (the six
// VolumeSnapshot CRDs), "cdi" (CDI's CRDs) or "prometheus" (the
// prometheus-operator CRDs, ServiceMonitor and PrometheusRule among them).
func CRDDir(name string) (string, error) {
	path, err := cached("crds", name)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", missing("crds", name, path, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("tools: %s is not a directory; delete it and run `make tools`", path)
	}
	return path, nil
}

// CRDFile returns the path of one file in a CRD set, e.g.
// CRDFile("prometheus", "monitoring.coreos.com_servicemonitors.yaml").
func CRDFile(set, file string) (string, error) {
	dir, err := CRDDir(set)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, file)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("tools: CRD set %s has no %s: %w", set, file, err)
	}
	return path, nil
}

// cached is the path build.sh gives a pinned item: <cache>/<kind>/<name>-<version>.
func cached(kind, name string) (string, error) {
	ver, err := Version(kind, name)
	if err != nil {
		return "", err
	}
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, kind, name+"-"+ver), nil
}

func missing(kind, name, path string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tools: %s %s is not in the cache (%s); run `make tools` (test/tools/build.sh %s)",
			kind, name, path, name)
	}
	return fmt.Errorf("tools: %s %s: %w", kind, name, err)
}

// ModuleSource returns the directory of a module the build uses, in the
// module cache (go list -m), so a test can read an upstream's own source.
func ModuleSource(module string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		return "", fmt.Errorf("go list the module %s: %v (run the tests with the Go toolchain on PATH)", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}
