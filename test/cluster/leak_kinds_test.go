package cluster

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The leak check sees the other kinds of thing a stack could leave on the
// machine: a bound unix socket under an e2e state directory, a mount of this
// mount namespace and an attached loop device.
func TestLeakedSeesSocketMountAndLoop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("mounts and loop devices need root: run the tests as root (make test does; the e2e needs it too)")
	}
	// Named unlike the default state directory: a cluster's own directory
	// (Options.Dir, CSI_CLONE_E2E_DIR) is watched wherever it is.
	dir, err := os.MkdirTemp("", "leakcheck-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		t.Fatal(err)
	}
	noteStateDir(dir)
	before, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}

	sock := filepath.Join(dir, "leak.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("csi-clone-leakcheck", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Fatalf("no loop device to attach (%v): install util-linux (losetup) and load the loop module (modprobe loop), "+
			"or in a container give it /dev/loop-control and a few /dev/loopN (mknod /dev/loopN b 7 N)", err)
	}
	dev := strings.TrimSpace(string(out))
	defer exec.Command("losetup", "--detach", dev).Run()

	after, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"socket " + sock, "mount " + mnt, "loop device " + filepath.Base(dev) + " " + img}
	leaked := before.Leaked(after)
	for _, w := range want {
		if leaked == nil || !strings.Contains(leaked.Error(), w) {
			t.Errorf("Leaked = %v, want it to name %q", leaked, w)
		}
	}

	l.Close()
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("losetup", "--detach", dev).Run(); err != nil {
		t.Fatal(err)
	}
	final, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Only ours: other tests on the machine may attach or mount meanwhile.
	if leaked := before.Leaked(final); leaked != nil {
		for _, w := range want {
			if strings.Contains(leaked.Error(), w) {
				t.Errorf("after cleanup, Leaked still names %q", w)
			}
		}
	}
}
