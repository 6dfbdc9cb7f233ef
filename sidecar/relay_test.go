package sidecar_test

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// fakeController is a minimal CSI controller used to exercise the relay in
// unit tests; the real test driver (test/csidriver) is used by the sanity and
// e2e tests.
type fakeController struct {
	csi.UnimplementedControllerServer
	block     chan struct{}
	cancelled chan struct{}
}

func (f *fakeController) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "fail" {
		return nil, status.Error(codes.ResourceExhausted, "pool full: 100%")
	}
	if req.GetName() == "block" {
		close(f.block)
		<-ctx.Done()
		close(f.cancelled)
		return nil, ctx.Err()
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      "vol-" + req.GetName(),
		CapacityBytes: req.GetCapacityRange().GetRequiredBytes(),
		ContentSource: req.GetVolumeContentSource(),
	}}, nil
}

func (f *fakeController) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}

type collector struct {
	mu  sync.Mutex
	obs []sidecar.Observation
	got chan struct{}
}

func newCollector() *collector { return &collector{got: make(chan struct{}, 1000)} }

func (c *collector) Observe(o sidecar.Observation) {
	c.mu.Lock()
	c.obs = append(c.obs, o)
	c.mu.Unlock()
	c.got <- struct{}{}
}

func (c *collector) wait(t *testing.T, n int) []sidecar.Observation {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-c.got:
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d observations, want %d", i, n)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sidecar.Observation(nil), c.obs...)
}

type stack struct {
	driverSock, relaySock string
	ctrl                  *fakeController
	relay                 *sidecar.Relay
	obs                   *collector
	client                csi.ControllerClient
}

func startStack(t *testing.T) *stack {
	t.Helper()
	dir := t.TempDir()
	s := &stack{driverSock: filepath.Join(dir, "driver.sock"), relaySock: filepath.Join(dir, "relay.sock"),
		ctrl: &fakeController{block: make(chan struct{}), cancelled: make(chan struct{})}, obs: newCollector()}
	l, err := net.Listen("unix", s.driverSock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, s.ctrl)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	s.relay, err = sidecar.NewRelay(sidecar.Config{ListenPath: s.relaySock, DriverPath: s.driverSock, Observer: s.obs, Tap: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.relay.Serve(context.Background())
	t.Cleanup(func() { s.relay.Close() })
	conn, err := grpc.NewClient("unix://"+s.relaySock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.client = csi.NewControllerClient(conn)
	return s
}

func TestRelayObservesCloneAndExpand(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	_, err := s.client.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:                "pvc-1",
		CapacityRange:       &csi.CapacityRange{RequiredBytes: 1 << 30},
		Parameters:          map[string]string{"csi.storage.k8s.io/pvc/name": "tmp-pvc-abc"},
		Secrets:             map[string]string{"password": "hunter2"},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "golden"}}},
		VolumeCapabilities:  []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "vol-pvc-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 3 << 30}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.client.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "fail"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err = %v", err)
	}
	obs := s.obs.wait(t, 3)
	cv := obs[0]
	if cv.Method != sidecar.MethodCreateVolume || cv.Code != codes.OK || cv.Request.SourceVolumeID != "golden" ||
		cv.Response.VolumeID != "vol-pvc-1" || cv.Response.CapacityBytes != 1<<30 || !cv.Request.Block ||
		cv.Request.Parameters["csi.storage.k8s.io/pvc/name"] != "tmp-pvc-abc" || cv.Response.SourceVolumeID != "golden" {
		t.Errorf("CreateVolume observation = %+v", cv)
	}
	ex := obs[1]
	if ex.Method != sidecar.MethodControllerExpandVolume || ex.Request.VolumeID != "vol-pvc-1" || ex.Response.CapacityBytes != 3<<30 {
		t.Errorf("expand observation = %+v", ex)
	}
	fl := obs[2]
	if fl.Code != codes.ResourceExhausted || fl.Message != "pool full: 100%" || fl.Response.VolumeID != "" {
		t.Errorf("failed observation = %+v", fl)
	}
	for _, o := range obs {
		if o.End.Before(o.Start) || o.Start.IsZero() {
			t.Errorf("bad timing %v..%v", o.Start, o.End)
		}
	}
}

func TestClientCancelReachesDriverAndIsObserved(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.client.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "block"})
		errc <- err
	}()
	<-s.ctrl.block
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("err = %v", err)
	}
	select {
	case <-s.ctrl.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the driver never saw the client's cancel")
	}
	obs := s.obs.wait(t, 1)
	if obs[0].Code != codes.Canceled || obs[0].Method != sidecar.MethodCreateVolume {
		t.Errorf("observation = %+v", obs[0])
	}
}

// A side's end of input reaches the other as a half-close, in both
// directions: the driver reads the client's whole request to its end and
// still answers, and after the driver's own end the client still sends and
// the driver still reads.
func TestEndOfInputIsAHalfCloseBothWays(t *testing.T) {
	dir := t.TempDir()
	driverSock, relaySock := filepath.Join(dir, "driver.sock"), filepath.Join(dir, "relay.sock")
	l, err := net.Listen("unix", driverSock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := sidecar.NewRelay(sidecar.Config{ListenPath: relaySock, DriverPath: driverSock})
	if err != nil {
		t.Fatal(err)
	}
	go r.Serve(context.Background())
	defer r.Close()

	// One connection per direction: the side that ends first, then the
	// other that keeps talking.
	for _, clientEndsFirst := range []bool{true, false} {
		client, err := net.Dial("unix", relaySock)
		if err != nil {
			t.Fatal(err)
		}
		driver, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		first, second := client.(*net.UnixConn), driver.(*net.UnixConn)
		if !clientEndsFirst {
			first, second = second, first
		}
		first.Write([]byte("request"))
		first.CloseWrite()
		if got := readToEnd(t, second); got != "request" {
			t.Fatalf("client ends first = %v: the other side read %q, want the whole of it", clientEndsFirst, got)
		}
		for _, part := range []string{"answer, ", "after the end"} {
			if _, err := second.Write([]byte(part)); err != nil {
				t.Fatalf("client ends first = %v: writing after the other's end: %v", clientEndsFirst, err)
			}
		}
		second.CloseWrite()
		if got := readToEnd(t, first); got != "answer, after the end" {
			t.Fatalf("client ends first = %v: the side that ended read %q back, want the whole answer", clientEndsFirst, got)
		}
		client.Close()
		driver.Close()
	}
}

// readToEnd reads c until its peer ends its input.
func readToEnd(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading to the end: %v", err)
	}
	return string(b)
}
