package sidecar

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
)

// budgetUsed is how many budget bytes the tap holds right now.
func (u *tapUnderTest) budgetUsed() int64 { return maxBufferedBytes - u.tap.budget.left.Load() }

// Only the messages of decoded methods are buffered, and only as their
// bytes arrive: a 4 MiB ListVolumes reply in flight holds no budget; a
// CreateVolume request whose prefix announces 1 MiB holds what its kept
// field brought so far (64 KiB), not the megabyte.
func TestOnlyDecodedMethodsAreBuffered(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.request(1, "/csi.v1.Controller/ListVolumes", &csi.ListVolumesRequest{})
	w.headers(false, 1, false, ":status", "200")
	w.check(w.dfr.WriteData(1, false, binary.BigEndian.AppendUint32([]byte{0}, 4<<20)))
	w.check(w.dfr.WriteData(1, false, bytes.Repeat([]byte{'v'}, 16<<10)))
	w.headers(true, 3, false, ":path", MethodCreateVolume)
	w.check(w.cfr.WriteData(3, false, stalledName(1<<20, 64<<10)))
	u.feed(w)
	if got := u.budgetUsed(); got < 64<<10 || got > 2*(64<<10) {
		t.Fatalf("budget used %d, want the CreateVolume's 64 KiB so far, at most twice that", got)
	}
	u.close()
	if got := u.budgetUsed(); got != 0 {
		t.Fatalf("budget used %d after the connection closed, want 0", got)
	}
}

// stalledName is the start of a CreateVolume request of size bytes whose
// name takes all of it: the prefix and sent bytes of the name.
func stalledName(size, sent int) []byte {
	nameLen := size - 1 - len(protowire.AppendVarint(nil, uint64(size)))
	b := binary.BigEndian.AppendUint32([]byte{0}, uint32(size))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(nameLen))
	return append(b, bytes.Repeat([]byte{'n'}, sent)...)
}

// Giving up on a connection lets go of everything at once: call records
// with their buffered requests (secrets included), frame buffers and header
// decoders, on both directions.
func TestAbandonFreesEverything(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.headers(true, 1, false, ":path", MethodCreateVolume)
	w.check(w.cfr.WriteData(1, false, binary.BigEndian.AppendUint32([]byte{0}, 2<<20)))
	w.check(w.cfr.WriteData(1, false, []byte("secrets...")))
	u.feed(w)
	feedParsed(u.tc, u.tc.FromDriver(), []byte{0, 0}) // half a frame header, kept
	if u.budgetUsed() == 0 || u.records() != 1 {
		t.Fatal("nothing held before the garbage; the test proves nothing")
	}
	feedParsed(u.tc, u.tc.FromClient(), []byte{0, 0, 4, 0xff, 0, 0, 0, 0, 0, 'x', 'x', 'x', 'x'}) // oversized-type garbage
	feedParsedAt(u.tc, u.tc.FromClient(), bytes.Repeat([]byte{0xff}, frameHeaderLen), time.Now())
	if len(u.rec.abandoned) != 1 {
		t.Fatalf("abandoned %v, want once", u.rec.abandoned)
	}
	if u.budgetUsed() != 0 || u.tc.calls != nil {
		t.Errorf("after abandon: budget used %d, calls %v", u.budgetUsed(), u.tc.calls)
	}
	for _, d := range []*direction{u.tc.client, u.tc.driver} {
		if !d.released || d.buf != nil || d.block != nil || d.headers.dec != nil {
			t.Errorf("direction (client %v) still holds state after abandon", d.fromClient)
		}
	}
	u.close()
}

// One connection cannot leave the others no budget (issue 24: 8 stalled
// 4 MiB prefixes from one client took all 32 MiB): one connection with 8
// CreateVolumes stalled a byte before their 4 MiB end holds at most
// maxConnBufferedBytes, and 100 calls on another connection meanwhile are
// all decoded.
func TestOneConnectionCannotStarveTheOthers(t *testing.T) {
	u := newTapUnderTest()
	hog, hw := u.tap.NewConn(), newWire(t)
	for id := uint32(1); id <= 15; id += 2 {
		hw.headers(true, id, false, ":path", MethodCreateVolume)
		msg := stalledName(maxMessageBytes, 0)
		for rest := maxMessageBytes - (len(msg) - 5) - 1; rest > 0; rest -= min(rest, 16<<10) {
			msg = append(msg, bytes.Repeat([]byte{'n'}, min(rest, 16<<10))...)
		}
		for b := msg; len(b) > 0; b = b[min(len(b), 16<<10):] {
			hw.check(hw.cfr.WriteData(id, false, b[:min(len(b), 16<<10)]))
		}
	}
	feedParsedAt(hog, hog.FromClient(), hw.client.Bytes(), time.Now())
	if got := u.budgetUsed(); got == 0 || got > maxConnBufferedBytes {
		t.Fatalf("the stalled connection holds %d bytes, want some and at most %d", got, maxConnBufferedBytes)
	}
	w := newWire(t)
	for id := uint32(1); id < 200; id += 2 {
		w.request(id, MethodCreateVolume, &csi.CreateVolumeRequest{Name: "pvc-" + strconv.Itoa(int(id))})
		w.reply(id, &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v"}}, codes.OK)
	}
	u.feed(w)
	hog.Close()
	obs := u.close()
	decoded := 0
	for _, o := range obs {
		if o.Request.Name != "" && o.Response.VolumeID == "v" {
			decoded++
		}
	}
	if decoded != 100 {
		t.Fatalf("%d of the other connection's 100 calls decoded (undecoded: %v)", decoded, u.rec.undecoded)
	}
	if got := u.budgetUsed(); got != 0 {
		t.Fatalf("budget used %d after every connection closed", got)
	}
}

// stalledHogBytes is a client's side of a connection holding as much of
// the budget as one connection may: two CreateVolumes, each stalled a byte
// before the end of the largest message the tap buffers.
func stalledHogBytes(t *testing.T) []byte {
	hw := newWire(t)
	for _, id := range []uint32{1, 3} {
		hw.headers(true, id, false, ":path", MethodCreateVolume)
		msg := stalledName(maxMessageBytes, 0)
		msg = append(msg, bytes.Repeat([]byte{'n'}, maxMessageBytes-(len(msg)-5)-1)...)
		for b := msg; len(b) > 0; b = b[min(len(b), 16<<10):] {
			hw.check(hw.cfr.WriteData(id, false, b[:min(len(b), 16<<10)]))
		}
	}
	return hw.client.Bytes()
}

// However many connections stall at their most, calls on another
// connection are all decoded (issue 38: four connections of 8 MiB each
// took the whole 32 MiB and left 0 of 100 calls elsewhere decoded).
func TestStalledConnectionsCannotStarveTheOthers(t *testing.T) {
	hog := stalledHogBytes(t)
	for _, stalled := range []int{1, 4, 16} {
		t.Run(strconv.Itoa(stalled), func(t *testing.T) {
			u := newTapUnderTest()
			var hogs []*TapConn
			for range stalled {
				tc := u.tap.NewConn()
				feedParsedAt(tc, tc.FromClient(), hog, time.Now())
				hogs = append(hogs, tc)
			}
			w := newWire(t)
			for id := uint32(1); id < 200; id += 2 {
				w.request(id, MethodCreateVolume, &csi.CreateVolumeRequest{Name: "pvc-" + strconv.Itoa(int(id))})
				w.reply(id, &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v"}}, codes.OK)
			}
			u.feed(w)
			held := u.budgetUsed()
			for _, tc := range hogs {
				tc.Close()
			}
			decoded := 0
			for _, o := range u.close() {
				if o.Request.Name != "" && o.Response.VolumeID == "v" {
					decoded++
				}
			}
			if decoded != 100 {
				t.Errorf("%d stalled connections holding %d bytes: %d of 100 calls elsewhere decoded (undecoded: %v)", stalled, held, decoded, u.rec.undecoded)
			}
			if got := u.budgetUsed(); got != 0 {
				t.Errorf("budget used %d after every connection closed", got)
			}
		})
	}
}
