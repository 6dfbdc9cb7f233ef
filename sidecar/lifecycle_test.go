package sidecar_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// serveGRPC serves a gRPC server with what register adds on sock until the
// test ends.
func serveGRPC(t *testing.T, sock string, register func(*grpc.Server)) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
}

func serveController(t *testing.T, sock string) {
	serveGRPC(t, sock, func(s *grpc.Server) { csi.RegisterControllerServer(s, &fakeController{}) })
}

// heldObserver holds every Observe call until let is called, so a test can
// tell what returned before the observations were delivered.
type heldObserver struct {
	entered   chan struct{}
	release   chan struct{}
	once      sync.Once
	delivered atomic.Int64
}

func newHeldObserver() *heldObserver {
	return &heldObserver{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (h *heldObserver) Observe(sidecar.Observation) {
	h.entered <- struct{}{}
	<-h.release
	h.delivered.Add(1)
}

func (h *heldObserver) let() { h.once.Do(func() { close(h.release) }) }

func createVolumes(t *testing.T, client csi.ControllerClient, names ...string) {
	t.Helper()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name})
		cancel()
		if err != nil {
			t.Fatalf("CreateVolume %s: %v", name, err)
		}
	}
}

// heldRelay is a relay with a tap whose observer holds every observation,
// after two calls: one observation is inside Observe, one queued behind it.
func heldRelay(t *testing.T, closeTimeout time.Duration) (*sidecar.Relay, *heldObserver, string) {
	t.Helper()
	dir := t.TempDir()
	relaySock, driverSock := filepath.Join(dir, "relay.sock"), filepath.Join(dir, "driver.sock")
	serveController(t, driverSock)
	obs := newHeldObserver()
	r, err := sidecar.NewRelay(sidecar.Config{ListenPath: relaySock, DriverPath: driverSock,
		Observer: obs, Tap: true, CloseTimeout: closeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { obs.let(); r.Close() })
	return r, obs, relaySock
}

func TestServeAndEveryCloseWaitForQueuedObservations(t *testing.T) {
	r, obs, relaySock := heldRelay(t, 0)
	served := make(chan int64, 1)
	go func() {
		r.Serve(context.Background())
		served <- obs.delivered.Load()
	}()
	createVolumes(t, dialController(t, relaySock), "a", "b")
	<-obs.entered

	firstClose, secondClose := make(chan int64, 1), make(chan int64, 1)
	go func() { r.Close(); firstClose <- obs.delivered.Load() }()
	// The socket goes before Close waits for the tap: Close has begun.
	waitFor(t, func() bool { _, err := os.Lstat(relaySock); return errors.Is(err, os.ErrNotExist) })
	go func() { r.Close(); secondClose <- obs.delivered.Load() }()
	select {
	case n := <-served:
		t.Fatalf("Serve returned while the observer was held (%d of 2 delivered)", n)
	case n := <-secondClose:
		t.Fatalf("a second Close returned while the first was waiting (%d of 2 delivered)", n)
	case <-time.After(200 * time.Millisecond):
		// Neither returned early; the checks below are what must hold.
	}
	obs.let()
	for name, ch := range map[string]chan int64{"Serve": served, "the first Close": firstClose, "the second Close": secondClose} {
		if n := <-ch; n != 2 {
			t.Errorf("%s returned with %d of 2 observations delivered", name, n)
		}
	}
}

func TestCloseGivesUpAfterCloseTimeout(t *testing.T) {
	r, obs, relaySock := heldRelay(t, 50*time.Millisecond)
	served := make(chan error, 1)
	go func() { served <- r.Serve(context.Background()) }()
	createVolumes(t, dialController(t, relaySock), "a")
	<-obs.entered
	err := r.Close()
	if err == nil || !strings.Contains(err.Error(), "still pending") {
		t.Errorf("Close with an observer that never returns = %v; want the give-up error", err)
	}
	if serr := <-served; serr == nil || serr.Error() != err.Error() {
		t.Errorf("Serve = %v; want Close's error %v", serr, err)
	}
	if n := obs.delivered.Load(); n != 0 {
		t.Errorf("%d observations delivered by a held observer", n)
	}
}

const acceptChildEnv = "SIDECAR_TEST_ACCEPT_CHILD"

// TestAcceptErrorsDoNotEndTheRelay runs a relay in a child process (this test
// again) that takes every file descriptor it may have: the relay's accept
// fails with EMFILE while a client waits in the backlog. Once the child
// frees the descriptors, the waiting client's call must go through.
func TestAcceptErrorsDoNotEndTheRelay(t *testing.T) {
	if dir := os.Getenv(acceptChildEnv); dir != "" {
		acceptChild(t, dir)
		return
	}
	dir := t.TempDir()
	serveController(t, filepath.Join(dir, "driver.sock"))
	child, lines := startAcceptChild(t, dir)
	waitForLine(t, lines, "full")

	client := dialController(t, filepath.Join(dir, "relay.sock"))
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "a"})
		errc <- err
	}()
	waitForLine(t, lines, "too many open files")
	if _, err := io.WriteString(child, "free\n"); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("call waiting while the relay had no descriptors: %v", err)
	}
}

// startAcceptChild returns the child's stdin and its stdout and stderr lines.
func startAcceptChild(t *testing.T, dir string) (io.Writer, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptErrorsDoNotEndTheRelay$")
	cmd.Env = append(os.Environ(), acceptChildEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait(); pw.Close() })
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		for s := bufio.NewScanner(pr); s.Scan(); {
			lines <- s.Text()
		}
	}()
	return stdin, lines
}

// waitForLine reads lines until one contains want; a relay whose Serve
// returned fails the test.
func waitForLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child exited before printing %q", want)
			}
			t.Log("child:", l)
			if strings.Contains(l, "serve returned") {
				t.Fatalf("the relay stopped: %s", l)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("child never printed %q", want)
		}
	}
}

// acceptChild is the child's side: it prints "full" once every descriptor
// is taken, frees them when a line arrives on stdin, and prints "serve
// returned" if Serve ever does.
func acceptChild(t *testing.T, dir string) {
	r, err := sidecar.NewRelay(sidecar.Config{ListenPath: filepath.Join(dir, "relay.sock"), DriverPath: filepath.Join(dir, "driver.sock")})
	if err != nil {
		t.Fatal(err)
	}
	go func() { fmt.Println("serve returned:", r.Serve(context.Background())) }()
	fds := takeAllFDs(t)
	fmt.Println("full")
	in := bufio.NewReader(os.Stdin)
	in.ReadString('\n')
	for _, fd := range fds {
		syscall.Close(fd)
	}
	in.ReadString('\n') // until the parent is done
}

func takeAllFDs(t *testing.T) []int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = min(lim.Max, 256) // few descriptors to take
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var fds []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.EMFILE) {
			return fds
		}
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
}
