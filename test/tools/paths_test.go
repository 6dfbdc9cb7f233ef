package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPinParses guards the format build.sh and this package both read.
func TestEveryPinParses(t *testing.T) {
	want := map[string][]string{
		"bin": {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "cdi-controller", "cdi-crds",
			"cdi-clone-token", "csi-provisioner", "csi-resizer", "csi-snapshotter",
			"snapshot-controller", "victoria-metrics", "vmalert", "gremlins"},
		"crds": {"snapshot", "cdi", "prometheus"},
	}
	for kind, names := range want {
		for _, name := range names {
			v, err := Version(kind, name)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(v, "v") {
				t.Errorf("%s %s: version %q does not start with v", kind, name, v)
			}
		}
	}
	for _, e := range entries() {
		if e.kind != "bin" && e.kind != "crds" {
			t.Errorf("versions.txt row %q has unknown kind %q", e.name, e.kind)
		}
	}
}

func TestMissingToolNamesMakeTools(t *testing.T) {
	t.Setenv("TOOLS_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	_, err := Bin("kube-apiserver")
	if err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("Bin on an empty cache: got %v, want an error naming `make tools`", err)
	}
	if _, err := CRDDir("snapshot"); err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("CRDDir on an empty cache: got %v, want an error naming `make tools`", err)
	}
}

func TestUnknownToolIsAnError(t *testing.T) {
	if _, err := Bin("kubelet"); err == nil || !strings.Contains(err.Error(), "versions.txt") {
		t.Fatalf("Bin(kubelet): got %v, want an error naming versions.txt", err)
	}
}

func TestCachedToolIsFoundUnderItsVersion(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("TOOLS_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", cache)
	ver, err := Version("bin", "etcd")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(cache, "csi-clone-sidecar", "bin", "etcd-"+ver)
	if err := os.MkdirAll(filepath.Dir(want), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Bin("etcd"); err == nil {
		t.Fatal("Bin accepted a non-executable file")
	}
	if err := os.Chmod(want, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Bin("etcd")
	if err != nil || got != want {
		t.Fatalf("Bin(etcd) = %q, %v; want %q", got, err, want)
	}
}

// make passes TOOLS_CACHE to build.sh and to the tests: both look there.
func TestToolsCacheOverridesTheDefault(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("TOOLS_CACHE", cache)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	ver, err := Version("bin", "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(cache, "bin", "kubectl-"+ver)
	if err := os.MkdirAll(filepath.Dir(want), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Bin("kubectl"); err != nil || got != want {
		t.Fatalf("Bin(kubectl) = %q, %v; want %q", got, err, want)
	}
}
