// Command run runs the hand-written mutant suite (test/mutants/mutants.txt)
// on a copy of the repository, never on the working tree: for each package
// it first runs the named tests unmutated (they must pass, or a kill means
// nothing), then applies each mutant in turn, runs its package's named
// tests and puts the file back. It prints killed, lived and not viable (the
// mutant does not build) per mutant and fails unless every one is killed.
//
//	go run ./test/mutants/run [-only REGEXP] [-timeout 10m]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/cozystack/csi-clone-sidecar/test/mutants"
)

func main() {
	only := flag.String("only", "", "run only the mutants whose file matches this regexp")
	timeout := flag.Duration("timeout", 10*time.Minute, "the go test -timeout of each run")
	flag.Parse()
	if err := run(*only, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(only string, timeout time.Duration) error {
	table, err := mutants.Table()
	if err != nil {
		return err
	}
	keep := regexp.MustCompile(only)
	var chosen []mutants.Mutant
	for _, m := range table {
		if keep.MatchString(m.File) {
			chosen = append(chosen, m)
		}
	}
	copyDir, err := os.MkdirTemp("", "csi-clone-mutants-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(copyDir)
	if err := copyTree(copyDir); err != nil {
		return err
	}
	if err := baseline(copyDir, chosen, timeout); err != nil {
		return err
	}
	counts := map[string]int{}
	start := time.Now()
	for _, m := range chosen {
		verdict, detail, err := judge(copyDir, m, timeout)
		if err != nil {
			return err
		}
		counts[verdict]++
		fmt.Printf("%-10s %s: %s (%s)%s\n", verdict, m.Name(), m.Kind, m.Pkg, detail)
	}
	fmt.Printf("mutants: %d killed, %d lived, %d not viable of %d, in %s\n", counts["KILLED"], counts["LIVED"],
		counts["NOT VIABLE"], len(chosen), time.Since(start).Round(time.Second))
	if counts["KILLED"] != len(chosen) {
		return fmt.Errorf("%d of %d mutants not killed", len(chosen)-counts["KILLED"], len(chosen))
	}
	return nil
}

// baseline runs each package's named tests on the unmutated copy.
func baseline(dir string, ms []mutants.Mutant, timeout time.Duration) error {
	runs := map[string][]string{}
	var pkgs []string
	for _, m := range ms {
		if runs[m.Pkg] == nil {
			pkgs = append(pkgs, m.Pkg)
		}
		runs[m.Pkg] = append(runs[m.Pkg], "(?:"+m.Run+")")
	}
	for _, pkg := range pkgs {
		if out, err := goTest(dir, pkg, strings.Join(runs[pkg], "|"), timeout); err != nil {
			return fmt.Errorf("the tests of %s fail unmutated: %v\n%s", pkg, err, out)
		}
	}
	return nil
}

// judge applies m to the copy, runs its tests and restores the file.
func judge(dir string, m mutants.Mutant, timeout time.Duration) (verdict, detail string, err error) {
	restore, err := mutants.Apply(dir, m)
	if err != nil {
		return "", "", err
	}
	out, testErr := goTest(dir, m.Pkg, m.Run, timeout)
	if err := restore(); err != nil {
		return "", "", fmt.Errorf("restoring %s in the copy: %w", m.File, err)
	}
	switch {
	case testErr == nil:
		return "LIVED", "", nil
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		return "NOT VIABLE", "\n" + string(out), nil
	}
	return "KILLED", firstFailure(out), nil
}

func goTest(dir, pkg, run string, timeout time.Duration) ([]byte, error) {
	cmd := exec.Command("go", "test", "-count=1", "-timeout", timeout.String(), "-run", run, pkg)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// firstFailure is the first "--- FAIL" line of a test run, to show what
// killed the mutant.
func firstFailure(out []byte) string {
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "--- FAIL") || strings.HasPrefix(line, "panic:") {
			return ": " + strings.TrimSpace(line)
		}
	}
	return ""
}

// copyTree copies the repository's files (tracked, and untracked unless
// ignored) into dir.
func copyTree(dir string) error {
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("git ls-files (run from the repository's root): %w", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		info, err := os.Lstat(name)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(dir, name), name, info.Mode()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(dst, src string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
