package mutants

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// repoRoot is the checkout this file belongs to.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Every mutant of the table still applies: its file exists, its original
// text is there exactly once, and its package has test files. A change to
// the code that a mutant rewrites fails here, in make unit, not in the next
// slow make mutation.
func TestEveryMutantStillApplies(t *testing.T) {
	ms, err := Table()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 30 {
		t.Errorf("%d mutants, want at least 30", len(ms))
	}
	root := repoRoot()
	for _, m := range ms {
		src, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			t.Errorf("%s: %v", m.Name(), err)
			continue
		}
		if n := strings.Count(string(src), m.From); n != 1 {
			t.Errorf("%s: %q found %d times, want once", m.Name(), m.From, n)
		}
		if dir := strings.TrimPrefix(m.Pkg, "./"); dir != filepath.Dir(m.File) {
			t.Errorf("%s: package %s, but the file is in %s: a mutant is killed by its own package's tests", m.Name(), m.Pkg, filepath.Dir(m.File))
		}
		tests, _ := filepath.Glob(filepath.Join(root, m.File, "..", "*_test.go"))
		if len(tests) == 0 {
			t.Errorf("%s: %s has no tests", m.Name(), m.Pkg)
		}
	}
}

// Apply changes the copy's file and restore puts it back byte for byte.
func TestApplyAndRestore(t *testing.T) {
	dir := t.TempDir()
	orig := "package x\n\nfunc f() int { return 1 }\n"
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	m := Mutant{File: "x.go", From: "return 1", To: "return 2"}
	restore, err := Apply(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "x.go")); !strings.Contains(string(got), "return 2") {
		t.Fatalf("mutated: %q", got)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "x.go")); string(got) != orig {
		t.Fatalf("restored: %q", got)
	}
	if _, err := Apply(dir, Mutant{File: "x.go", From: "return 3", To: "return 4"}); err == nil {
		t.Fatal("a mutant whose original is absent applied")
	}
}
