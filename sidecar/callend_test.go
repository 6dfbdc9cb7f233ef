package sidecar

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// When the driver resets a call whose request is not whole, the tap waits
// for the rest of the request only if it keeps the request's bytes (a
// decoded, selected method): the client's goroutine may not have parsed
// them yet. A call whose bytes it does not keep ends at the reset: the
// client that got the reset sends no more, and its connection may live for
// days.
func TestDriverResetMidRequestWaitsOnlyForKeptRequests(t *testing.T) {
	half := append(binary.BigEndian.AppendUint32([]byte{0}, 100), "ten bytes."...)
	w, u := newWire(t), newTapUnderTest()

	w.headers(true, 1, false, ":path", MethodProbe) // not decoded: nothing kept
	w.check(w.cfr.WriteData(1, false, half))
	w.check(w.dfr.WriteRSTStream(1, http2.ErrCodeInternal))
	u.feed(w)
	if n, got := u.records(), fmt.Sprint(u.rec.finished); n != 0 || got != fmt.Sprint([]codes.Code{codes.Internal}) {
		t.Fatalf("a Probe the driver reset mid-request: %d records held, finished %s; want 0 and one Internal", n, got)
	}

	w.headers(true, 3, false, ":path", MethodCreateVolume) // decoded: its request is kept
	w.check(w.cfr.WriteData(3, false, half))
	w.check(w.dfr.WriteRSTStream(3, http2.ErrCodeInternal))
	u.feed(w)
	if n := u.records(); n != 1 || len(u.rec.finished) != 1 {
		t.Fatalf("a CreateVolume the driver reset mid-request: %d records held, finished %v; want it held, waiting", n, u.rec.finished)
	}
	w.check(w.cfr.WriteData(3, true, make([]byte, 90)))
	u.feed(w)
	if n := u.records(); n != 0 || len(u.rec.finished) != 2 || u.rec.finished[1] != codes.Internal {
		t.Fatalf("once its request is whole: %d records held, finished %v; want it ended, Internal", n, u.rec.finished)
	}
	u.close()
}

// A request whose HEADERS frame ends the stream (no message: not a valid
// unary call, but a client may send it) is whole; its call ends with the
// driver's status like any other, not when the connection closes.
func TestRequestWithoutAMessageEndsAtItsStatus(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.headers(true, 1, true, ":method", "POST", ":path", MethodDeleteVolume, "content-type", "application/grpc")
	w.headers(false, 1, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "13")
	u.feed(w)
	if n, got := u.records(), fmt.Sprint(u.rec.finished); n != 0 || got != fmt.Sprint([]codes.Code{codes.Internal}) {
		t.Fatalf("%d records held, finished %s; want the call ended, Internal", n, got)
	}
	u.close()
}

// A request is its first message (message's doc): bytes after it in the
// stream, here a second message in the DATA frame that ends the first, are
// not kept, whatever the frames' boundaries. grpc-go's server fails such a
// call (received multiple request messages); the tap reports the request
// the client made.
func TestOnlyTheRequestsFirstMessageIsKept(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	first, second := grpcMessage(t, &csi.DeleteVolumeRequest{VolumeId: "first"}), grpcMessage(t, &csi.DeleteVolumeRequest{VolumeId: "second"})
	cut := len(first) - 3
	w.headers(true, 1, false, ":method", "POST", ":path", MethodDeleteVolume, "content-type", "application/grpc")
	w.check(w.cfr.WriteData(1, false, first[:cut]))
	w.check(w.cfr.WriteData(1, true, append(first[cut:], second...)))
	w.headers(false, 1, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "13")
	u.feed(w)
	if obs := u.close(); len(obs) != 1 || obs[0].Request.VolumeID != "first" {
		t.Fatalf("observations %+v, want one whose request is the first message's", obs)
	}
}

// A reply's buffer grows as its bytes arrive, at least twice over, at most
// to its message's size, and its whole capacity is taken from the budget
// (buffers.go): no more, and no byte outside it.
func TestReplyBufferIsTakenFromTheBudgetAsItGrows(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.request(1, MethodCreateVolume, &csi.CreateVolumeRequest{Name: "n"})
	w.headers(false, 1, false, ":status", "200", "content-type", "application/grpc")
	u.feed(w)
	base := u.budgetUsed()
	for _, step := range []struct {
		data []byte
		held int64
	}{
		{append(binary.BigEndian.AppendUint32([]byte{0}, 8<<10), make([]byte, 1000)...), 1 << 10}, // the smallest class holding 1000
		{make([]byte, 24), 1 << 10},   // exactly full: no growth
		{make([]byte, 1), 2 << 10},    // twice over
		{make([]byte, 7000), 8 << 10}, // at most the message's 8 KiB
	} {
		w.check(w.dfr.WriteData(1, false, step.data))
		u.feed(w)
		if got := u.budgetUsed() - base; got != step.held {
			t.Fatalf("after %d more reply bytes the reply holds %d bytes of the budget, want %d", len(step.data), got, step.held)
		}
	}
	u.close()
}
