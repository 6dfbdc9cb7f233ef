package deploy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The socket permission checks below run the test binary again as a child
// with another identity; roleEnv tells the child what to do.
const (
	roleEnv = "DEPLOY_TEST_SOCKET_ROLE"
	sockEnv = "DEPLOY_TEST_SOCKET"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(socketChild(role, os.Getenv(sockEnv)))
	}
	os.Exit(m.Run())
}

// socketChild is the child's whole life. Exit 0: done; 13: EACCES on dial;
// anything else: an unexpected failure, printed.
func socketChild(role, path string) int {
	switch role {
	case "dial":
	case "dial-without-caps":
		// A root process whose capabilities were dropped, as the kubernetes-csi
		// sidecars run with capabilities: drop: [ALL]. Capabilities are per
		// thread: drop them on this one and dial from it.
		runtime.LockOSThread()
		var data [2]unix.CapUserData
		if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0]); err != nil {
			fmt.Println("capset:", err)
			return 2
		}
		status, _ := os.ReadFile("/proc/thread-self/status")
		if !strings.Contains(string(status), "CapEff:\t0000000000000000") {
			fmt.Println("capabilities still effective")
			return 2
		}
	case "listen":
		// The sidecar: the runtime's default umask, then mode 0660 as
		// --listen-address promises; serve until the parent closes stdin.
		syscall.Umask(0o022)
		l, err := net.Listen("unix", path)
		if err != nil {
			fmt.Println("listen:", err)
			return 2
		}
		defer l.Close()
		if err := os.Chmod(path, 0o660); err != nil {
			fmt.Println("chmod:", err)
			return 2
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	default:
		fmt.Println("unknown role", role)
		return 2
	}
	c, err := net.Dial("unix", path)
	if errors.Is(err, syscall.EACCES) {
		return 13
	}
	if err != nil {
		fmt.Println("dial:", err)
		return 2
	}
	c.Close()
	return 0
}

// identity is a uid/gid pair a child runs as.
type identity struct{ uid, gid uint32 }

// socketLab is a directory like the pod's socket-dir emptyDir (mode 0777) and
// a copy of the test binary that any identity can execute.
type socketLab struct {
	dir, bin string
}

func newSocketLab(t *testing.T) *socketLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("switching identities needs root: run the tests as root (make test does; the e2e needs it too)")
	}
	dir, err := os.MkdirTemp("", "deploy-socket-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "deploy.test")
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	return &socketLab{dir: dir, bin: bin}
}

func (l *socketLab) child(role, sock string, id identity) *exec.Cmd {
	cmd := exec.Command(l.bin)
	cmd.Env = []string{roleEnv + "=" + role, sockEnv + "=" + sock}
	cmd.Dir = l.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}}
	return cmd
}

// dial reports whether a child with identity id (and, for root, no
// capabilities) can connect to sock.
func (l *socketLab) dial(t *testing.T, sock string, id identity) bool {
	t.Helper()
	role := "dial"
	if id.uid == 0 {
		role = "dial-without-caps"
	}
	out, err := l.child(role, sock, id).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &exit) && exit.ExitCode() == 13:
		return false
	}
	t.Fatalf("%s child as %d:%d: %v\n%s", role, id.uid, id.gid, err, out)
	return false
}

// driverSocket listens on a socket as root with umask, as the driver does.
func (l *socketLab) driverSocket(t *testing.T, name string, umask int) string {
	t.Helper()
	sock := filepath.Join(l.dir, name)
	old := syscall.Umask(umask)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return sock
}

// sidecarSocket starts a child that listens as id, the way the sidecar does.
func (l *socketLab) sidecarSocket(t *testing.T, name string, id identity) string {
	t.Helper()
	sock := filepath.Join(l.dir, name)
	cmd := l.child("listen", sock, id)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("listener as %d:%d: %q", id.uid, id.gid, line)
	}
	return sock
}

// sidecarIdentity is runAsUser/runAsGroup of the sidecar the chart renders
// (deploy/linstor/podtemplate.yaml).
func sidecarIdentity(t *testing.T) identity {
	t.Helper()
	sec := linstorSidecar(t)["securityContext"].(map[string]any)
	uid, ok1 := sec["runAsUser"].(float64)
	gid, ok2 := sec["runAsGroup"].(float64)
	if !ok1 || !ok2 {
		t.Fatal("the sidecar's securityContext sets no runAsUser or runAsGroup")
	}
	return identity{uint32(uid), uint32(gid)}
}

// The kernel's view of the pod with the sidecar added and the driver left as
// it is: the driver, root, creates its socket with the container runtime's
// default umask 0022 (srwxr-xr-x root:root). The sidecar, uid 0 with every
// capability dropped, dials it as its owner, as csi-provisioner does; a
// non-root uid, even in group 0, could not. The capability-less root
// kubernetes-csi sidecars dial the sidecar's own socket (mode 0660) as its
// owner.
func TestSocketPermissionsInThePod(t *testing.T) {
	lab := newSocketLab(t)
	sidecar := sidecarIdentity(t)
	root := identity{0, 0}

	driverSock := lab.driverSocket(t, "csi.sock", 0o022)
	if !lab.dial(t, driverSock, sidecar) {
		t.Errorf("the sidecar (%d:%d, no capabilities) cannot dial the driver's socket made with umask 0022", sidecar.uid, sidecar.gid)
	}
	if lab.dial(t, driverSock, identity{65532, 0}) {
		t.Errorf("a non-root uid in group 0 dials the driver's socket made with umask 0022: uid 0 is not needed")
	}

	own := lab.sidecarSocket(t, "csi-clone.sock", sidecar)
	if !lab.dial(t, own, root) {
		t.Errorf("csi-provisioner (root, no capabilities) cannot dial the sidecar's socket (sidecar %d:%d, mode 0660)", sidecar.uid, sidecar.gid)
	}
	// The check can fail: a socket of another owner and group shuts a
	// capability-less root out.
	other := lab.sidecarSocket(t, "csi-clone-other.sock", identity{65532, 65532})
	if lab.dial(t, other, root) {
		t.Errorf("root without capabilities dials a 0660 socket of 65532:65532: the permission check is not in effect")
	}
}
