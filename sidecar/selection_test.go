package sidecar

import (
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// onlyObserver selects the calls of one method.
type onlyObserver struct{ method string }

func (onlyObserver) Observe(Observation)           {}
func (o onlyObserver) Observes(method string) bool { return method == o.method }

// A method the tap decodes but the Observer does not select is not
// buffered: its request holds nothing of the budget; a selected one holds
// the bytes that arrived (the budget is reserved as they arrive).
func TestUnselectedDecodedMethodIsNotBuffered(t *testing.T) {
	const sent = 4 << 10
	w := newWire(t)
	u := &tapUnderTest{rec: &countingRecorder{}}
	u.tap = NewTap(Observers{onlyObserver{MethodControllerExpandVolume}}, u.rec, 4096)
	u.tc = u.tap.NewConn()
	w.headers(true, 1, false, ":path", MethodCreateVolume)
	w.check(w.cfr.WriteData(1, false, stalledName(1<<20, sent)))
	u.feed(w)
	if got := u.budgetUsed(); got != 0 {
		t.Fatalf("an unselected CreateVolume holds %d bytes of the budget, want 0", got)
	}
	w.headers(true, 3, false, ":path", MethodControllerExpandVolume)
	w.check(w.cfr.WriteData(3, false, stalledName(1<<20, sent)))
	u.feed(w)
	if got := u.budgetUsed(); got < sent {
		t.Fatalf("a selected ControllerExpandVolume holds %d bytes of the budget, want at least the %d that arrived", got, sent)
	}
	u.close()
}

// A message of exactly maxMessageBytes is kept; one byte more is too large.
func TestMessageSizeBoundIsInclusive(t *testing.T) {
	for _, tc := range []struct {
		n    uint32
		want string
	}{{maxMessageBytes, ""}, {maxMessageBytes + 1, UndecodedTooLarge}} {
		b := newBudget(2 * maxMessageBytes)
		m := &message{method: MethodProbe}
		m.prefix[0] = 0
		binary.BigEndian.PutUint32(m.prefix[1:], tc.n)
		if got := m.reserve(b); got != tc.want {
			t.Errorf("a %d-byte message: reserve = %q, want %q", tc.n, got, tc.want)
		}
		m.free(b, false)
	}
}

// A client that resets a call before its request is whole ends the call at
// once, as Canceled: nothing more comes from it, and nothing is kept.
func TestClientResetMidRequestEndsTheCall(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.headers(true, 1, false, ":path", MethodCreateVolume)
	w.check(w.cfr.WriteData(1, false, append(binary.BigEndian.AppendUint32([]byte{0}, 100), "ten bytes."...)))
	w.check(w.cfr.WriteRSTStream(1, http2.ErrCodeCancel))
	u.feed(w)
	if n := u.records(); n != 0 {
		t.Errorf("%d call records held after the client's reset, want 0", n)
	}
	if u.budgetUsed() != 0 {
		t.Errorf("budget used %d after the client's reset, want 0", u.budgetUsed())
	}
	if fmt.Sprint(u.rec.finished) != fmt.Sprint([]codes.Code{codes.Canceled}) {
		t.Errorf("finished %v, want one Canceled", u.rec.finished)
	}
	u.close()
}
