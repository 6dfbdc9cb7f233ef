package repo_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedSize is the largest file the repository may track. The largest
// legitimate ones (go.sum files of the tools modules, the dashboard) are a
// fraction of it; a build output or a data dump is not.
const maxTrackedSize = 1 << 20

// executableMagics are the first bytes of the executable formats Go builds
// for: a tracked binary is a build output that escaped .gitignore.
var executableMagics = []struct {
	format string
	magic  []byte
}{
	{"ELF", []byte{0x7f, 'E', 'L', 'F'}},
	{"Mach-O 32-bit", []byte{0xfe, 0xed, 0xfa, 0xce}},
	{"Mach-O 64-bit", []byte{0xfe, 0xed, 0xfa, 0xcf}},
	{"Mach-O 32-bit (little-endian)", []byte{0xce, 0xfa, 0xed, 0xfe}},
	{"Mach-O 64-bit (little-endian)", []byte{0xcf, 0xfa, 0xed, 0xfe}},
	{"Mach-O universal", []byte{0xca, 0xfe, 0xba, 0xbe}},
	{"PE (Windows)", []byte{'M', 'Z'}},
}

// repoRoot is the top of the work tree this test runs in.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v (git is needed: apt-get install -y git)", err)
	}
	return strings.TrimSpace(string(out))
}

// trackedFiles lists the files git tracks (the index, so a file staged for
// commit counts), relative to root.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
}

// executableFormat names the executable format a file's first bytes say,
// or "" for none.
func executableFormat(head []byte) string {
	for _, m := range executableMagics {
		if bytes.HasPrefix(head, m.magic) {
			return m.format
		}
	}
	return ""
}

// Every tracked file is at most 1 MiB and none is an executable binary: a
// clone and an image build context carry every tracked byte.
func TestTrackedFilesAreSmallAndNotBinaries(t *testing.T) {
	root := repoRoot(t)
	files := trackedFiles(t, root)
	if len(files) < 10 {
		t.Fatalf("git ls-files lists %d files; is this the repository?", len(files))
	}
	for _, rel := range files {
		path := filepath.Join(root, rel)
		st, err := os.Lstat(path)
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet staged
		}
		if err != nil {
			t.Fatal(err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		if st.Size() > maxTrackedSize {
			t.Errorf("%s is %.1f MiB, over the 1 MiB a tracked file may be (git rm --cached it and ignore it)", rel, float64(st.Size())/(1<<20))
		}
		if format := executableFormat(fileHead(t, path)); format != "" {
			t.Errorf("%s is an executable (%s): build outputs are not tracked (git rm --cached it and ignore it)", rel, format)
		}
	}
}

func fileHead(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 4)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		t.Fatal(err)
	}
	return head[:n]
}

// The magic table over the whole set: each format is recognised from its
// own first bytes, and text is not taken for any.
func TestExecutableFormat(t *testing.T) {
	for _, m := range executableMagics {
		if got := executableFormat(append(append([]byte{}, m.magic...), 0, 0)); got != m.format {
			t.Errorf("%x: %q, want %q", m.magic, got, m.format)
		}
	}
	for _, text := range []string{"", "package main\n", "#!/bin/sh\n", "\x7fEL", "{}"} {
		if got := executableFormat([]byte(text)); got != "" {
			t.Errorf("%q taken for %s", text, got)
		}
	}
}
