package sidecar_test

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// recordingConn keeps a copy of everything read from and written to a conn.
type recordingConn struct {
	net.Conn
	mu          sync.Mutex
	read, wrote bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.read.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.wrote.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *recordingConn) snapshot() (read, wrote []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.read.Bytes()), bytes.Clone(c.wrote.Bytes())
}

type recordingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*recordingConn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recordingConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, rc)
	l.mu.Unlock()
	return rc, nil
}

// session is what one client connection sent and received, recorded at the
// client and at the driver.
type session struct {
	clientSent, clientGot, driverGot, driverSent []byte
}

// recordSession runs a few CSI calls through the relay (or straight to the
// driver when relay is false) and returns the bytes seen at both ends.
func recordSession(t testing.TB, relay, big bool) session {
	dir := t.TempDir()
	driverSock, relaySock := filepath.Join(dir, "driver.sock"), filepath.Join(dir, "relay.sock")
	l, err := net.Listen("unix", driverSock)
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: l}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, &fakeController{})
	go srv.Serve(rl)
	defer srv.Stop()
	target := driverSock
	if relay {
		r, err := sidecar.NewRelay(sidecar.Config{ListenPath: relaySock, DriverPath: driverSock, Observer: sidecar.Observers{}, Tap: true})
		if err != nil {
			t.Fatal(err)
		}
		go r.Serve(context.Background())
		defer r.Close()
		target = relaySock
	}
	var client *recordingConn
	conn, err := grpc.NewClient("passthrough:///csi", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "unix", target)
			if err == nil {
				client = &recordingConn{Conn: c}
				return client, nil
			}
			return nil, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	runCalls(t, csi.NewControllerClient(conn), big)
	rl.mu.Lock()
	conns := rl.conns
	rl.mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("driver saw %d connections, want 1", len(conns))
	}
	// Compare while the connection is quiet but open: how a closing
	// connection's last frames race the close is not the relay's doing.
	var s session
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.clientGot, s.clientSent = client.snapshot()
		s.driverGot, s.driverSent = conns[0].snapshot()
		settled := len(s.driverGot) == len(s.clientSent) && len(s.clientGot) == len(s.driverSent)
		if settled || time.Now().After(deadline) {
			return s
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runCalls(t testing.TB, c csi.ControllerClient, big bool) {
	ctx := context.Background()
	params := map[string]string{"csi.storage.k8s.io/pvc/name": "tmp-pvc-1"}
	if big {
		params["blob"] = strings.Repeat("x", 300<<10) // spans many frames and reads
	}
	golden := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "golden"}}}
	calls := []*csi.CreateVolumeRequest{
		{Name: "v1", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}, VolumeContentSource: golden},
		{Name: "v2", Parameters: params, Secrets: map[string]string{"k": "s3cr3t"}},
		{Name: "fail"},
	}
	for _, req := range calls {
		c.CreateVolume(ctx, req)
	}
	if _, err := c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "vol-v1"}); err != nil {
		t.Fatal(err)
	}
}

func TestDriverReceivesExactlyTheClientsBytes(t *testing.T) {
	s := recordSession(t, true, true)
	if len(s.clientSent) < 300<<10 || len(s.driverSent) == 0 {
		t.Fatalf("session too small: client sent %d, driver sent %d bytes", len(s.clientSent), len(s.driverSent))
	}
	if !bytes.Equal(s.clientSent, s.driverGot) {
		t.Errorf("client -> driver differs: sent %d bytes, driver got %d", len(s.clientSent), len(s.driverGot))
	}
	if !bytes.Equal(s.driverSent, s.clientGot) {
		t.Errorf("driver -> client differs: sent %d bytes, client got %d", len(s.driverSent), len(s.clientGot))
	}
}
