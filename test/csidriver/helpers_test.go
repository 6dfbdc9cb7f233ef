package csidriver_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
)

const mib = int64(1) << 20

// harness is one in-process driver and a client connected to it.
type harness struct {
	t    *testing.T
	dir  string
	cfg  csidriver.Config
	d    *csidriver.Driver
	conn *grpc.ClientConn
	ctl  csi.ControllerClient
	id   csi.IdentityClient
}

func newHarness(t *testing.T, cfg csidriver.Config) *harness {
	t.Helper()
	dir := t.TempDir()
	if cfg.Endpoint == "" {
		cfg.Endpoint = "unix://" + filepath.Join(dir, "csi.sock")
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(dir, "state")
	}
	h := &harness{t: t, dir: dir, cfg: cfg}
	h.start()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) start() {
	h.t.Helper()
	d, err := csidriver.Start(h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	conn, err := grpc.NewClient(d.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	h.d, h.conn = d, conn
	h.ctl, h.id = csi.NewControllerClient(conn), csi.NewIdentityClient(conn)
}

func (h *harness) stop() {
	if h.conn != nil {
		h.conn.Close()
		h.conn = nil
	}
	if h.d != nil {
		h.d.Stop()
	}
}

func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
}

// createReq builds a CreateVolume request; pool "" leaves the parameter out.
func createReq(name, pool string, size int64) *csi.CreateVolumeRequest {
	req := &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
	}
	if pool != "" {
		req.Parameters = map[string]string{csidriver.PoolParameter: pool}
	}
	return req
}

func fromVolume(req *csi.CreateVolumeRequest, id string) *csi.CreateVolumeRequest {
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
	return req
}

func fromSnapshot(req *csi.CreateVolumeRequest, id string) *csi.CreateVolumeRequest {
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
	return req
}

func (h *harness) mustCreate(req *csi.CreateVolumeRequest) *csi.Volume {
	h.t.Helper()
	resp, err := h.ctl.CreateVolume(ctx(h.t), req)
	if err != nil {
		h.t.Fatalf("CreateVolume %s: %v", req.GetName(), err)
	}
	return resp.GetVolume()
}

func (h *harness) mustSnapshot(name, source string) *csi.Snapshot {
	h.t.Helper()
	resp, err := h.ctl.CreateSnapshot(ctx(h.t), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: source})
	if err != nil {
		h.t.Fatalf("CreateSnapshot %s: %v", name, err)
	}
	return resp.GetSnapshot()
}

// wantCode fails the test unless err carries code.
func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: got %v (%v), want %v", what, status.Code(err), err, code)
	}
}

// writeAt puts data into a volume's data file, as a workload would.
func (h *harness) writeAt(volumeID string, off int64, data []byte) {
	h.t.Helper()
	f, err := os.OpenFile(h.d.VolumePath(volumeID), os.O_WRONLY, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) readAt(path string, off int64, n int) []byte {
	h.t.Helper()
	f, err := os.Open(path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil {
		h.t.Fatal(err)
	}
	return buf
}

func pattern(seed byte, n int) []byte {
	return bytes.Repeat([]byte{seed, seed + 1, seed + 2, 0xff}, n/4)
}
