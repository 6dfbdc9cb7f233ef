// Package mutants holds the hand-written semantic mutant suite (mutants.txt):
// one-line bugs a person would write (a wrong unit, a missed case, a
// forgotten wipe, stale bookkeeping, a wrong default, an off-by-one
// boundary), each with the package whose own tests must kill it. It parses
// the table and applies a mutant to a copy of the tree; cmd/ runs them
// (make mutation).
package mutants

import (
	"bufio"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

//go:embed mutants.txt
var table string

// Mutant is one row of mutants.txt.
type Mutant struct {
	Line int    // where its block starts in mutants.txt
	File string // relative to the repository root
	From string // the exact original text, present once in File
	To   string // its replacement
	Pkg  string // the package whose tests must kill it (./sidecar)
	Run  string // the -run pattern of the tests expected to kill it
	Kind string // what kind of bug it is, in words
}

// Name identifies a mutant in reports: file and table line.
func (m Mutant) Name() string { return fmt.Sprintf("%s (mutants.txt:%d)", m.File, m.Line) }

// Table parses mutants.txt: blocks of "key: value" lines separated by blank
// lines; "#" starts a comment line. Every key is required.
func Table() ([]Mutant, error) {
	var out []Mutant
	var cur *Mutant
	seen := map[string]bool{}
	finish := func() error {
		if cur == nil {
			return nil
		}
		for k, v := range map[string]string{"file": cur.File, "from": cur.From, "to": cur.To, "pkg": cur.Pkg, "run": cur.Run, "kind": cur.Kind} {
			if v == "" {
				return fmt.Errorf("mutants.txt:%d: no %s", cur.Line, k)
			}
		}
		if cur.From == cur.To {
			return fmt.Errorf("mutants.txt:%d: from and to are the same", cur.Line)
		}
		out, cur, seen = append(out, *cur), nil, map[string]bool{}
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(table))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
			continue
		case strings.TrimSpace(line) == "":
			if err := finish(); err != nil {
				return nil, err
			}
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("mutants.txt:%d: want key: value, got %q", n, line)
		}
		// One space after the colon; the rest of the line is the value,
		// leading tabs included (Go source is indented with tabs: \t).
		value = strings.ReplaceAll(strings.TrimPrefix(value, " "), `\t`, "\t")
		if cur == nil {
			cur = &Mutant{Line: n}
		}
		if seen[key] {
			return nil, fmt.Errorf("mutants.txt:%d: %s twice in one block", n, key)
		}
		seen[key] = true
		field, ok := map[string]*string{"file": &cur.File, "from": &cur.From, "to": &cur.To,
			"pkg": &cur.Pkg, "run": &cur.Run, "kind": &cur.Kind}[key]
		if !ok {
			return nil, fmt.Errorf("mutants.txt:%d: unknown key %q", n, key)
		}
		*field = value
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return out, sc.Err()
}

// Apply rewrites m's file under root and returns a function that puts the
// original back. The original text must be present exactly once.
func Apply(root string, m Mutant) (restore func() error, err error) {
	path := filepath.Join(root, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if n := strings.Count(string(orig), m.From); n != 1 {
		return nil, fmt.Errorf("%s: %q found %d times, want once", m.Name(), m.From, n)
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	mutated := strings.Replace(string(orig), m.From, m.To, 1)
	if err := os.WriteFile(path, []byte(mutated), info.Mode()); err != nil {
		return nil, err
	}
	return func() error { return os.WriteFile(path, orig, info.Mode()) }, nil
}
