package sidecar

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// budgetUsed is how many budget bytes the tap holds right now.
func (u *tapUnderTest) budgetUsed() int64 { return maxBufferedBytes - u.tap.budget.left.Load() }

// Only the messages of decoded methods are buffered: a 4 MiB ListVolumes
// reply in flight holds no budget, a CreateVolume request in flight holds
// exactly its size.
func TestOnlyDecodedMethodsAreBuffered(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.request(1, "/csi.v1.Controller/ListVolumes", &csi.ListVolumesRequest{})
	w.headers(false, 1, false, ":status", "200")
	w.check(w.dfr.WriteData(1, false, binary.BigEndian.AppendUint32([]byte{0}, 4<<20)))
	w.check(w.dfr.WriteData(1, false, bytes.Repeat([]byte{'v'}, 16<<10)))
	w.headers(true, 3, false, ":path", MethodCreateVolume)
	w.check(w.cfr.WriteData(3, false, binary.BigEndian.AppendUint32([]byte{0}, 1<<20)))
	u.feed(w)
	if got := u.budgetUsed(); got != 1<<20 {
		t.Fatalf("budget used %d, want only the CreateVolume's 1 MiB", got)
	}
	u.close()
	if got := u.budgetUsed(); got != 0 {
		t.Fatalf("budget used %d after the connection closed, want 0", got)
	}
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
	u.tc.FromDriver().Feed([]byte{0, 0}, time.Now()) // half a frame header, kept
	if u.budgetUsed() == 0 || u.records() != 1 {
		t.Fatal("nothing held before the garbage; the test proves nothing")
	}
	u.tc.FromClient().Feed([]byte{0, 0, 4, 0xff, 0, 0, 0, 0, 0, 'x', 'x', 'x', 'x'}, time.Now()) // oversized-type garbage
	u.tc.FromClient().Feed(bytes.Repeat([]byte{0xff}, frameHeaderLen), time.Now())
	if len(u.rec.abandoned) != 1 {
		t.Fatalf("abandoned %v, want once", u.rec.abandoned)
	}
	if u.budgetUsed() != 0 || u.tc.calls != nil {
		t.Errorf("after abandon: budget used %d, calls %v", u.budgetUsed(), u.tc.calls)
	}
	for _, d := range []*direction{u.tc.client, u.tc.driver} {
		if !d.released || d.buf != nil || d.headers.dec != nil || d.fr != nil {
			t.Errorf("direction (client %v) still holds state after abandon", d.fromClient)
		}
	}
	u.close()
}

// The budget is shared by every connection: once it is spent, a further
// large message is counted as undecoded ("budget"), not buffered.
func TestBudgetIsSharedByConnections(t *testing.T) {
	u := newTapUnderTest()
	var conns []*TapConn
	for i := 0; i <= maxBufferedBytes/maxMessageBytes; i++ {
		w, tc := newWire(t), u.tap.NewConn()
		conns = append(conns, tc)
		w.headers(true, 1, false, ":path", MethodCreateVolume)
		w.check(w.cfr.WriteData(1, false, binary.BigEndian.AppendUint32([]byte{0}, maxMessageBytes)))
		tc.FromClient().Feed(w.client.Bytes(), time.Now())
	}
	if got := u.budgetUsed(); got != maxBufferedBytes {
		t.Fatalf("budget used %d, want all of it (%d)", got, maxBufferedBytes)
	}
	for _, tc := range conns { // each call ends unfinished when its connection closes
		tc.Close()
	}
	u.close()
	n := len(conns)
	want := append(make([]string, n-1), UndecodedBudget)
	for i := range n - 1 {
		want[i] = UndecodedTruncated
	}
	if !equalSets(u.rec.undecoded, want) {
		t.Fatalf("undecoded %v, want %d truncated and one %q", u.rec.undecoded, n-1, UndecodedBudget)
	}
	if got := u.budgetUsed(); got != 0 {
		t.Fatalf("budget used %d after every connection closed", got)
	}
}
