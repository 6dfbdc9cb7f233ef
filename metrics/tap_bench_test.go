package metrics_test

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
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
// ControllerGetCapabilities calls, each with its own deadline as a
// kubernetes-csi sidecar sends them.
func recordCalls(b *testing.B, calls int) []chunk {
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
		if _, err := client.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{}); err != nil {
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
	const calls = 1000
	chunks := recordCalls(b, calls)
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

func (capabilities) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{}, nil
}

// decodedOnly selects the methods the tap decodes, as the verdict engine does.
type decodedOnly struct{}

func (decodedOnly) Observe(sidecar.Observation) {}
func (decodedOnly) Observes(method string) bool { return sidecar.DecodedMethod(method) }
