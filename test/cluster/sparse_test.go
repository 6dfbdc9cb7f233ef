package cluster

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	const size = 64 << 20
	for _, p := range []string{src, dst} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(src, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("middle"), 32<<20)
	f.WriteAt([]byte("tail"), size-4)
	f.Close()
	if err := copySparse(dst, src); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	if len(b) != size || !bytes.Equal(a, b) {
		t.Fatalf("copy differs from source (len %d)", len(b))
	}
}
