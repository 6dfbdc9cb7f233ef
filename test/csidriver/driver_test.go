package csidriver_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
)

var threePools = []csidriver.Pool{{Name: "replicated"}, {Name: "other"}, {Name: "local", NodeLocal: true}}

// TestClonesCopyData checks that clones and restores carry the source's bytes
// (not just its size), stay sparse, and are independent of their source.
func TestClonesCopyData(t *testing.T) {
	h := newHarness(t, csidriver.Config{Pools: threePools})
	src := h.mustCreate(createReq("golden", "replicated", 8*mib))
	head, tail := pattern(1, 4096), pattern(7, 4096)
	h.writeAt("golden", 0, head)
	h.writeAt("golden", 5*mib, tail)

	clone := h.mustCreate(fromVolume(createReq("worker", "replicated", 16*mib), src.GetVolumeId()))
	if clone.GetCapacityBytes() != 16*mib || clone.GetContentSource().GetVolume().GetVolumeId() != "golden" {
		t.Errorf("clone: capacity %d, source %v", clone.GetCapacityBytes(), clone.GetContentSource())
	}
	cross := h.mustCreate(fromVolume(createReq("cross", "other", 0), "golden"))
	if cross.GetCapacityBytes() != 8*mib {
		t.Errorf("clone without a size: capacity %d, want the source's %d", cross.GetCapacityBytes(), 8*mib)
	}
	h.mustSnapshot("snap", "golden")
	h.writeAt("golden", 0, pattern(42, 4096)) // after the snapshot: must not show up in it
	restored := h.mustCreate(fromSnapshot(createReq("restored", "replicated", 8*mib), "snap"))

	for _, id := range []string{"worker", "cross", "restored"} {
		path := h.d.VolumePath(id)
		if got := h.readAt(path, 0, 4096); !bytes.Equal(got, head) {
			t.Errorf("%s: first block differs from the source's at clone time", id)
		}
		if got := h.readAt(path, 5*mib, 4096); !bytes.Equal(got, tail) {
			t.Errorf("%s: block at 5MiB differs from the source's", id)
		}
		if got := h.readAt(path, mib, 4096); !bytes.Equal(got, make([]byte, 4096)) {
			t.Errorf("%s: a hole of the source reads as non-zero", id)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if allocated := st.Blocks * 512; allocated > 2*mib {
			t.Errorf("%s: %d bytes allocated for 8KiB of data: the copy is not sparse", id, allocated)
		}
	}
	if restored.GetContentSource().GetSnapshot().GetSnapshotId() != "snap" {
		t.Errorf("restored volume reports source %v", restored.GetContentSource())
	}
	h.writeAt("worker", 0, pattern(99, 4096))
	if got := h.readAt(h.d.VolumePath("golden"), 0, 4096); !bytes.Equal(got, pattern(42, 4096)) {
		t.Error("writing the clone changed the source")
	}
}

// TestNodeLocalCloneFail: with --node-local-clone=fail a clone into a
// node-local pool from another pool is refused at once with a clear message,
// while a clone inside the node-local pool works.
func TestNodeLocalCloneFail(t *testing.T) {
	h := newHarness(t, csidriver.Config{Pools: threePools, NodeLocalClone: csidriver.CloneFail})
	h.mustCreate(createReq("golden", "replicated", 4*mib))
	h.mustSnapshot("golden-snap", "golden")
	for _, req := range []*csi.CreateVolumeRequest{
		fromVolume(createReq("w1", "local", 4*mib), "golden"),
		fromSnapshot(createReq("w2", "local", 4*mib), "golden-snap"),
	} {
		_, err := h.ctl.CreateVolume(ctx(t), req)
		wantCode(t, err, codes.InvalidArgument, "clone into node-local pool")
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "node-local pool local") || !strings.Contains(msg, "golden") {
			t.Errorf("message %q should name the pool and the source", msg)
		}
	}
	h.mustCreate(createReq("local-src", "local", 4*mib))
	h.mustCreate(fromVolume(createReq("local-clone", "local", 4*mib), "local-src"))
	h.mustCreate(fromVolume(createReq("out-of-local", "replicated", 4*mib), "local-src"))
}

// TestNodeLocalCloneHang: by default the clone never completes; the call
// ends with the caller's deadline or cancellation, and nothing is created.
func TestNodeLocalCloneHang(t *testing.T) {
	h := newHarness(t, csidriver.Config{Pools: threePools})
	h.mustCreate(createReq("golden", "replicated", 4*mib))

	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := h.ctl.CreateVolume(short, fromVolume(createReq("w1", "local", 4*mib), "golden"))
	wantCode(t, err, codes.DeadlineExceeded, "hanging clone with a deadline")

	cancelled, cancelNow := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.ctl.CreateVolume(cancelled, fromVolume(createReq("w2", "local", 4*mib), "golden"))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the call reach the driver; either way it must end Canceled
	cancelNow()
	wantCode(t, <-done, codes.Canceled, "hanging clone cancelled")

	list, err := h.ctl.ListVolumes(ctx(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetEntries()); n != 1 {
		t.Errorf("%d volumes after two hung clones, want only the golden", n)
	}
}

// TestRestartKeepsState: a driver started on the same state directory knows
// its volumes, snapshots, sizes and publications, and drops the leftovers of
// an interrupted create.
func TestRestartKeepsState(t *testing.T) {
	h := newHarness(t, csidriver.Config{Pools: threePools})
	h.mustCreate(createReq("vol", "other", 4*mib))
	h.writeAt("vol", 0, pattern(3, 4096))
	h.mustSnapshot("snap", "vol")
	if _, err := h.ctl.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: "vol", CapacityRange: &csi.CapacityRange{RequiredBytes: 12 * mib}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ctl.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{
		VolumeId: "vol", NodeId: csidriver.DefaultNodeID, VolumeCapability: mountCap()}); err != nil {
		t.Fatal(err)
	}
	h.stop()
	leftover := filepath.Join(h.cfg.StateDir, "volumes", "half-made.img")
	if err := os.WriteFile(leftover, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.start()

	got, err := h.ctl.ControllerGetVolume(ctx(t), &csi.ControllerGetVolumeRequest{VolumeId: "vol"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetVolume().GetCapacityBytes() != 12*mib || got.GetVolume().GetVolumeContext()[csidriver.PoolParameter] != "other" {
		t.Errorf("after restart: %v", got.GetVolume())
	}
	if nodes := got.GetStatus().GetPublishedNodeIds(); len(nodes) != 1 || nodes[0] != csidriver.DefaultNodeID {
		t.Errorf("after restart: published to %v", nodes)
	}
	snaps, err := h.ctl.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{SourceVolumeId: "vol"})
	if err != nil || len(snaps.GetEntries()) != 1 || snaps.GetEntries()[0].GetSnapshot().GetSizeBytes() != 4*mib {
		t.Fatalf("after restart: snapshots %v, %v", snaps, err)
	}
	h.mustCreate(fromSnapshot(createReq("restored", "other", 4*mib), "snap"))
	if !bytes.Equal(h.readAt(h.d.VolumePath("restored"), 0, 4096), pattern(3, 4096)) {
		t.Error("restore after restart lost the snapshot's data")
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("leftover data file without metadata survived the restart: %v", err)
	}

	h.stop()
	cfg := h.cfg
	cfg.Pools = []csidriver.Pool{{Name: "replicated"}}
	if d, err := csidriver.Start(cfg); err == nil || !strings.Contains(err.Error(), `pool "other"`) {
		if d != nil {
			d.Stop()
		}
		t.Errorf("start without the pool the state uses: %v, want an error naming pool \"other\"", err)
	}
}

// TestErrorCodes covers the CSI error codes and idempotency rules the sidecar
// and CDI rely on, beyond what csi-sanity checks.
func TestErrorCodes(t *testing.T) {
	h := newHarness(t, csidriver.Config{Pools: []csidriver.Pool{
		{Name: "replicated", CapacityBytes: 64 * mib}, {Name: "other"}}})
	c := ctx(t)
	h.mustCreate(createReq("v", "replicated", 8*mib))
	again := h.mustCreate(createReq("v", "replicated", 4*mib))
	if again.GetCapacityBytes() != 8*mib {
		t.Errorf("repeated create (smaller, compatible) returned %d bytes, want the existing 8MiB", again.GetCapacityBytes())
	}
	_, err := h.ctl.CreateVolume(c, createReq("v", "other", 8*mib))
	wantCode(t, err, codes.AlreadyExists, "same name, other pool")
	_, err = h.ctl.CreateVolume(c, createReq("v", "replicated", 16*mib))
	wantCode(t, err, codes.AlreadyExists, "same name, larger size")
	_, err = h.ctl.CreateVolume(c, fromVolume(createReq("v", "replicated", 8*mib), "v"))
	wantCode(t, err, codes.AlreadyExists, "same name, a content source")
	_, err = h.ctl.CreateVolume(c, createReq("x", "nosuch", mib))
	wantCode(t, err, codes.InvalidArgument, "unknown pool")
	_, err = h.ctl.CreateVolume(c, createReq("bad/name", "replicated", mib))
	wantCode(t, err, codes.InvalidArgument, "name with a slash")
	_, err = h.ctl.CreateVolume(c, createReq("huge", "replicated", 128*mib))
	wantCode(t, err, codes.OutOfRange, "larger than the pool")
	small := fromVolume(createReq("small", "replicated", 4*mib), "v")
	small.CapacityRange.LimitBytes = 4 * mib
	_, err = h.ctl.CreateVolume(c, small)
	wantCode(t, err, codes.OutOfRange, "clone smaller than its source")
	_, err = h.ctl.CreateVolume(c, fromSnapshot(createReq("r", "replicated", mib), "nosuch"))
	wantCode(t, err, codes.NotFound, "restore from a missing snapshot")

	_, err = h.ctl.ControllerExpandVolume(c, &csi.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: 100 * mib}})
	wantCode(t, err, codes.OutOfRange, "expand beyond the pool")
	_, err = h.ctl.ControllerExpandVolume(c, &csi.ControllerExpandVolumeRequest{VolumeId: "nosuch", CapacityRange: &csi.CapacityRange{RequiredBytes: mib}})
	wantCode(t, err, codes.NotFound, "expand a missing volume")
	_, err = h.ctl.ControllerExpandVolume(c, &csi.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: 20 * mib, LimitBytes: 4 * mib}})
	wantCode(t, err, codes.InvalidArgument, "expand with required > limit")

	h.mustSnapshot("s", "v")
	h.mustCreate(createReq("w", "replicated", mib))
	_, err = h.ctl.CreateSnapshot(c, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "w"})
	wantCode(t, err, codes.AlreadyExists, "snapshot name reused for another volume")
	_, err = h.ctl.CreateSnapshot(c, &csi.CreateSnapshotRequest{Name: "s2", SourceVolumeId: "nosuch"})
	wantCode(t, err, codes.NotFound, "snapshot of a missing volume")

	cap1, err := h.ctl.GetCapacity(c, &csi.GetCapacityRequest{Parameters: map[string]string{"linstor.csi.linbit.com/storagePool": "replicated"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := 64*mib - 8*mib - 8*mib - mib; cap1.GetAvailableCapacity() != want {
		t.Errorf("available %d, want %d (64MiB minus volume, snapshot, volume)", cap1.GetAvailableCapacity(), want)
	}
}

// TestExpandNodeExpansion: filesystem volumes need the node to grow the
// filesystem, block volumes do not.
func TestExpandNodeExpansion(t *testing.T) {
	h := newHarness(t, csidriver.Config{})
	h.mustCreate(createReq("fs", "", 4*mib))
	blk := createReq("blk", "", 4*mib)
	blk.VolumeCapabilities = []*csi.VolumeCapability{blockCap()}
	h.mustCreate(blk)
	for id, want := range map[string]bool{"fs": true, "blk": false} {
		resp, err := h.ctl.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
			VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 10 * mib}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetCapacityBytes() != 10*mib || resp.GetNodeExpansionRequired() != want {
			t.Errorf("%s: %v, want 10MiB and node_expansion_required=%v", id, resp, want)
		}
		fi, err := os.Stat(h.d.VolumePath(id))
		if err != nil || fi.Size() != 10*mib {
			t.Errorf("%s: data file size %v (%v), want 10MiB", id, fi.Size(), err)
		}
	}
}

// TestPagination walks ListVolumes and ListSnapshots page by page.
func TestPagination(t *testing.T) {
	h := newHarness(t, csidriver.Config{})
	for i := range 5 {
		h.mustCreate(createReq(fmt.Sprintf("v%d", i), "", mib))
		h.mustSnapshot(fmt.Sprintf("s%d", i), fmt.Sprintf("v%d", i))
	}
	seen := map[string]int{}
	token := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("ListVolumes pagination does not end")
		}
		resp, err := h.ctl.ListVolumes(ctx(t), &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEntries() {
			seen[e.GetVolume().GetVolumeId()]++
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
	}
	if len(seen) != 5 {
		t.Errorf("pages held %v, want v0..v4 once each", seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times", id, n)
		}
	}
	page, err := h.ctl.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{MaxEntries: 3})
	if err != nil || len(page.GetEntries()) != 3 || page.GetNextToken() == "" {
		t.Fatalf("first snapshot page: %v, %v", page, err)
	}
	rest, err := h.ctl.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{StartingToken: page.GetNextToken()})
	if err != nil || len(rest.GetEntries()) != 2 || rest.GetNextToken() != "" {
		t.Errorf("second snapshot page: %v, %v", rest, err)
	}
	_, err = h.ctl.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{StartingToken: page.GetNextToken() + "/x"})
	wantCode(t, err, codes.Aborted, "snapshot token not issued by the driver")
}

// TestConcurrentCreates: racing creates of one name yield one volume, and
// racing creates of many names never overcommit a pool.
func TestConcurrentCreates(t *testing.T) {
	h := newHarness(t, csidriver.Config{Pools: []csidriver.Pool{{Name: "p", CapacityBytes: 10 * 4 * mib}}})
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[codes.Code]int{}
	created := ""
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("v%02d", i)
			_, err := h.ctl.CreateVolume(ctx(t), createReq(name, "p", 4*mib))
			mu.Lock()
			results[status.Code(err)]++
			if err == nil {
				created = name
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if results[codes.OK] != 10 || results[codes.OutOfRange] != 10 {
		t.Errorf("20 creates of 4MiB into a 40MiB pool: %v, want 10 OK and 10 OutOfRange", results)
	}

	same := map[codes.Code]int{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.ctl.CreateVolume(ctx(t), createReq(created, "p", 4*mib))
			mu.Lock()
			same[status.Code(err)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if same[codes.OK] == 0 || same[codes.OK]+same[codes.Aborted] != 8 {
		t.Errorf("8 repeats of an existing create: %v, want OK (or Aborted while one is in flight)", same)
	}
}
