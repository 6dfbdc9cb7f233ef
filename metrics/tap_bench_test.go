package metrics_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cozystack/csi-clone-sidecar/metrics"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// chunk is one write of one side of a recorded connection.
type chunk struct {
	fromClient bool
	p          []byte
}

// chunkLog keeps both sides' writes in the order they happened.
type chunkLog struct {
	mu     sync.Mutex
	chunks []chunk
}

type chunkConn struct {
	net.Conn
	log        *chunkLog
	fromClient bool
}

func (c *chunkConn) Write(p []byte) (int, error) {
	c.log.mu.Lock()
	c.log.chunks = append(c.log.chunks, chunk{c.fromClient, bytes.Clone(p)})
	c.log.mu.Unlock()
	return c.Conn.Write(p)
}

type chunkListener struct {
	net.Listener
	log *chunkLog
}

func (l chunkListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &chunkConn{Conn: c, log: l.log}, nil
}

// recordCalls records, write by write, one connection carrying calls
// calls made by call, each with its own deadline as a kubernetes-csi
// sidecar sends them.
func recordCalls(b *testing.B, calls int, call func(context.Context, csi.ControllerClient) error) []chunk {
	sock := filepath.Join(b.TempDir(), "driver.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	log := &chunkLog{}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, capabilities{})
	go srv.Serve(chunkListener{l, log})
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///csi", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, err
			}
			return &chunkConn{Conn: c, log: log, fromClient: true}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := csi.NewControllerClient(conn)
	for range calls {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := call(ctx, client); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	return log.chunks
}

// BenchmarkTapPerCall is the tap's cost per small call on a long-lived
// connection (the case csi-provisioner makes): a recorded connection of
// 1000 ControllerGetCapabilities calls is fed write by write, in the order
// the writes happened, to one TapConn timing each call into a real metrics
// Recorder and observed by an Observer that selects the decoded methods, as
// in the binary.
func BenchmarkTapPerCall(b *testing.B) {
	benchmarkTap(b, 1000, func(ctx context.Context, c csi.ControllerClient) error {
		_, err := c.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
		return err
	})
}

// BenchmarkTapPerCreateVolume is the same for a clone's CreateVolume of
// about 4 KiB (a StorageClass's worth of parameters, provisioner secrets,
// a clone source), the call the tap decodes in full.
func BenchmarkTapPerCreateVolume(b *testing.B) {
	benchmarkTap(b, 1000, createVolume(cloneRequest(58, 6)))
}

// createVolume makes each call a CreateVolume of req.
func createVolume(req *csi.CreateVolumeRequest) func(context.Context, csi.ControllerClient) error {
	return func(ctx context.Context, c csi.ControllerClient) error {
		_, err := c.CreateVolume(ctx, req)
		return err
	}
}

// cloneRequest is a clone's CreateVolume as csi-provisioner sends it to
// LINSTOR: ~60 StorageClass parameters, the keys the provisioner adds,
// secrets, a capacity range, a block capability, a source volume.
func cloneRequest(filler, valueLen int) *csi.CreateVolumeRequest {
	req := &csi.CreateVolumeRequest{
		Name:          "pvc-0b1c2d3e-bench",
		CapacityRange: &csi.CapacityRange{RequiredBytes: 20 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
		Parameters: map[string]string{
			"csi.storage.k8s.io/pvc/name":      "worker-disk",
			"csi.storage.k8s.io/pvc/namespace": "tenant-bench",
			"csi.storage.k8s.io/pv/name":       "pvc-0b1c2d3e-bench",
		},
		Secrets: map[string]string{"username": "bench", "password": "planted-secret-never-kept"},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "pvc-golden"},
		}},
	}
	for i := range filler {
		req.Parameters[fmt.Sprintf("property.linstor.csi.linbit.com/DrbdOptions/Net/opt%04d", i)] = strings.Repeat("v", valueLen)
	}
	return req
}

// BenchmarkTapPerHugeCreateVolume is the same for a CreateVolume of about
// 1 MiB (990 parameters), near what a Kubernetes object can hold.
func BenchmarkTapPerHugeCreateVolume(b *testing.B) {
	benchmarkTap(b, 20, createVolume(cloneRequest(987, 1000)))
}

func benchmarkTap(b *testing.B, calls int, call func(context.Context, csi.ControllerClient) error) {
	chunks := recordCalls(b, calls, call)
	tap := sidecar.NewTap(decodedOnly{}, metrics.New(), 1024)
	defer tap.Close()
	at := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		tc := tap.NewConn()
		for _, c := range chunks {
			if c.fromClient {
				tc.FromClient().Feed(c.p, at)
			} else {
				tc.FromDriver().Feed(c.p, at)
			}
		}
		tc.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*calls), "ns/call")
}

// capabilities answers ControllerGetCapabilities, the call kubernetes-csi
// sidecars repeat most and the tap only times.
type capabilities struct {
	csi.UnimplementedControllerServer
}

func (capabilities) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.Name, CapacityBytes: req.CapacityRange.GetRequiredBytes()}}, nil
}

func (capabilities) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{}, nil
}

// decodedOnly selects the methods the tap decodes, as the verdict engine does.
type decodedOnly struct{}

func (decodedOnly) Observe(sidecar.Observation) {}
func (decodedOnly) Observes(method string) bool { return sidecar.DecodedMethod(method) }
