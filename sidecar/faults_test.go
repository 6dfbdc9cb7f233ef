package sidecar_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// TestMain doubles as a driver process for the tests that kill the driver:
// with SIDECAR_TEST_DRIVER set it serves the fake controller on that socket.
func TestMain(m *testing.M) {
	if sock := os.Getenv("SIDECAR_TEST_DRIVER"); sock != "" {
		serveDriverProcess(sock, os.Getenv("SIDECAR_TEST_MARKER"))
		return
	}
	os.Exit(m.Run())
}

type markerController struct {
	fakeController
	marker string
}

func (c *markerController) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "hang" {
		os.WriteFile(c.marker, []byte("in call"), 0o600)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.fakeController.CreateVolume(ctx, req)
}

func serveDriverProcess(sock, marker string) {
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		os.Exit(3)
	}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, &markerController{marker: marker})
	srv.Serve(l)
}

func startDriverProcess(t *testing.T, sock, marker string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SIDECAR_TEST_DRIVER="+sock, "SIDECAR_TEST_MARKER="+marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Not the socket file: it appears at bind, before listen, and a connect
	// between the two is refused (seen on a loaded machine).
	waitFor(t, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return cmd
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startRelay(t *testing.T, dir string, obs sidecar.Observer) (relaySock, driverSock string) {
	t.Helper()
	relaySock, driverSock = filepath.Join(dir, "relay.sock"), filepath.Join(dir, "driver.sock")
	r, err := sidecar.NewRelay(sidecar.Config{ListenPath: relaySock, DriverPath: driverSock, Observer: obs, Tap: true})
	if err != nil {
		t.Fatal(err)
	}
	go r.Serve(context.Background())
	t.Cleanup(func() { r.Close() })
	return relaySock, driverSock
}

func dialController(t *testing.T, sock string) csi.ControllerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return csi.NewControllerClient(conn)
}

func TestDriverAbsentAtStartThenCreated(t *testing.T) {
	dir := t.TempDir()
	relaySock, driverSock := startRelay(t, dir, nil)
	client := dialController(t, relaySock)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "a"})
	if c := status.Code(err); c != codes.Unavailable {
		t.Fatalf("with no driver: got %v, want Unavailable (as without the relay)", err)
	}
	startDriverProcess(t, driverSock, filepath.Join(dir, "marker"))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if _, err := client.CreateVolume(ctx2, &csi.CreateVolumeRequest{Name: "a"}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("once the driver is up: %v", err)
	}
}

func TestDriverKilledMidCall(t *testing.T) {
	dir := t.TempDir()
	obs := newCollector()
	relaySock, driverSock := startRelay(t, dir, obs)
	marker := filepath.Join(dir, "marker")
	driver := startDriverProcess(t, driverSock, marker)
	client := dialController(t, relaySock)

	deadline := 60 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "hang"})
		errc <- err
	}()
	waitFor(t, func() bool { _, err := os.Stat(marker); return err == nil })
	driver.Process.Signal(syscall.SIGKILL)
	driver.Wait()
	err := <-errc
	if c := status.Code(err); c != codes.Unavailable {
		t.Fatalf("call whose driver died: got %v, want Unavailable before the deadline", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the error only came with the deadline")
	}
	got := obs.wait(t, 1)
	if got[0].Code != codes.Unavailable || got[0].Method != sidecar.MethodCreateVolume {
		t.Errorf("observation of the interrupted call = %+v", got[0])
	}

	startDriverProcess(t, driverSock, marker)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if _, err := client.CreateVolume(ctx2, &csi.CreateVolumeRequest{Name: "b"}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("after the driver restarted: %v", err)
	}
}

type abandonCounter struct {
	mu      sync.Mutex
	reasons []string
}

func (a *abandonCounter) CallFinished(string, codes.Code, time.Duration) {}
func (a *abandonCounter) ConnectionTapped()                              {}
func (a *abandonCounter) ObservationDropped()                            {}
func (a *abandonCounter) CallUndecoded(string)                           {}
func (a *abandonCounter) ConnectionAbandoned(r string) {
	a.mu.Lock()
	a.reasons = append(a.reasons, r)
	a.mu.Unlock()
}

func (a *abandonCounter) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reasons)
}

func TestGarbageFromClientNeitherCrashesNorLeaks(t *testing.T) {
	dir := t.TempDir()
	rec := &abandonCounter{}
	relaySock, driverSock := filepath.Join(dir, "relay.sock"), filepath.Join(dir, "driver.sock")
	r, err := sidecar.NewRelay(sidecar.Config{ListenPath: relaySock, DriverPath: driverSock, Recorder: rec, Observer: newCollector(), Tap: true})
	if err != nil {
		t.Fatal(err)
	}
	go r.Serve(context.Background())
	defer r.Close()
	startDriverProcess(t, driverSock, filepath.Join(dir, "marker"))
	before := runtime.NumGoroutine()

	junk := make([]byte, 256<<10)
	rand.Read(junk)
	inputs := [][]byte{junk, []byte("GET / HTTP/1.1\r\n\r\n"),
		// A SETTINGS frame whose length is not a multiple of 6.
		append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 5, 4, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5)}
	for i, in := range inputs {
		// The driver answers through the relay as it does directly (its
		// SETTINGS): the client's end of input reaches it as a half-close, so
		// its answer still comes back.
		// A driver that hangs up while the relay still writes is a reset,
		// which the relay passes on as one: it may cut the answer short.
		direct, relayed := replyTo(t, driverSock, in), replyTo(t, relaySock, in)
		if len(direct) == 0 || !bytes.Equal(relayed, direct) && !(i == 0 && bytes.HasPrefix(direct, relayed)) {
			t.Errorf("input %d: the relay answered %q, the driver directly %q", i, relayed, direct)
		}
	}
	waitFor(t, func() bool { return rec.count() == len(inputs) })
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })

	client := dialController(t, relaySock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "after-garbage"}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("relay unusable after garbage: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// Each connection's tap gives up on its own goroutine: the order of
	// the three is not the order they were sent in.
	got := slices.Sorted(slices.Values(rec.reasons))
	if strings.Join(got, ",") != "framing,not-http2,not-http2" {
		t.Errorf("abandon reasons = %v", rec.reasons)
	}
}

// replyTo sends in on a new connection to sock, ends its input and returns
// everything read back until the other end hangs up.
func replyTo(t *testing.T, sock string, in []byte) []byte {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(in)
	c.(*net.UnixConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var reply bytes.Buffer
	if _, err := reply.ReadFrom(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the reply from %s: %v", sock, err)
	}
	return reply.Bytes()
}
