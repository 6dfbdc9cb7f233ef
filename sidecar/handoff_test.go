package sidecar

import (
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// A connection whose parsing falls more than maxHandoffBytes behind gives
// up its view (backlog) and lets go of every queued byte and relay buffer
// at once; the pump that held the duty then finds nothing left to parse.
func TestHandoffBacklogAbandonsTheViewAndHoldsNothing(t *testing.T) {
	u := newTapUnderTest()
	client, driver := u.tc.FromClient(), u.tc.FromDriver()
	first := newRelayRead()
	held := client.feedRead(first, 9, time.Now()) // the duty, held while "forwarding"
	if !held.own {
		t.Fatal("the first read did not take the parser's duty")
	}
	var reads []*relayRead
	for queued := 0; queued <= maxHandoffBytes; queued += relayBufferBytes {
		r := newRelayRead()
		driver.parseAfter(driver.feedRead(r, relayBufferBytes, time.Now()))
		reads = append(reads, r)
	}
	if len(u.rec.abandoned) != 1 || u.rec.abandoned[0] != AbandonBacklog {
		t.Fatalf("abandoned %v, want backlog once", u.rec.abandoned)
	}
	for i, r := range reads {
		if got := r.refs.Load(); got != 1 { // the pump's own reference only
			t.Fatalf("read %d: %d references after the abandon, want the pump's alone", i, got)
		}
	}
	client.parseAfter(held)
	first.release()
	if u.tc.handoff.held != 0 || u.tap.handoffBytes.left.Load() != maxHandoffTotalBytes || u.tc.handoff.parsing {
		t.Fatalf("after the abandon: %d bytes held, %d of %d left, parsing %v", u.tc.handoff.held,
			u.tap.handoffBytes.left.Load(), maxHandoffTotalBytes, u.tc.handoff.parsing)
	}
	u.close()
}

// A pump holding the duty parses at most maxInlineParseBytes of what was
// queued behind it, then hands the rest to a goroutine and returns: every
// call is still parsed, in order, and nothing stays held.
func TestHandoffPastTheInlineLimitIsAllParsedInOrder(t *testing.T) {
	const calls = 6000
	w, u := newWire(t), newTapUnderTest()
	client, driver := u.tc.FromClient(), u.tc.FromDriver()
	first := newRelayRead()
	n := copy(first.b, w.client.Bytes()) // the preface and SETTINGS
	w.client.Reset()
	held := client.feedRead(first, n, time.Now())
	for id := uint32(1); id < 2*calls; id += 2 { // each call queued behind the duty
		w.request(id, MethodCreateVolume, &csi.CreateVolumeRequest{Name: "n"})
		client.Feed(w.client.Bytes(), time.Now())
		w.client.Reset()
		w.reply(id, &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v"}}, codes.OK)
		driver.Feed(w.driver.Bytes(), time.Now())
		w.driver.Reset()
	}
	queued := u.tc.handoff.held
	if queued <= maxInlineParseBytes {
		t.Fatalf("only %d bytes queued: the limit is not reached", queued)
	}
	client.parseAfter(held)
	first.release()
	u.tc.WaitParsed()
	obs := u.close()
	if len(obs) != calls || len(u.rec.abandoned) > 0 {
		t.Fatalf("%d observations, abandoned %v; want %d, none", len(obs), u.rec.abandoned, calls)
	}
	for _, o := range obs {
		if o.Code != codes.OK || o.Response.VolumeID != "v" || o.Request.Name != "n" {
			t.Fatalf("observation %+v, want every call whole", o)
		}
	}
	if u.tc.handoff.held != 0 || u.tap.handoffBytes.left.Load() != maxHandoffTotalBytes {
		t.Fatalf("%d bytes held, %d of %d left after close", u.tc.handoff.held, u.tap.handoffBytes.left.Load(), maxHandoffTotalBytes)
	}
}
