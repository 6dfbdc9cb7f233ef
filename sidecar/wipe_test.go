package sidecar

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// Every way a call lets go of a buffered request wipes it before its
// buffer goes back to the pool: the request may hold secrets (call.free).
// Each path starts from the same half-received CreateVolume request whose
// bytes are kept verbatim, and the buffers it held are read after the path.
func TestEveryCallPathWipesTheRequest(t *testing.T) {
	paths := []struct {
		name string
		end  func(t *testing.T, w *wire, u *tapUnderTest)
	}{
		{"giveUp: the request ends inside its message", func(t *testing.T, w *wire, u *tapUnderTest) {
			w.check(w.cfr.WriteData(1, true, nil))
			w.reply(1, nil, codes.OK)
			u.feed(w)
		}},
		{"abandon", func(_ *testing.T, _ *wire, u *tapUnderTest) {
			u.tc.abandon(AbandonFraming, nil)
		}},
		{"abandon on a pump while the parser holds the connection", func(_ *testing.T, _ *wire, u *tapUnderTest) {
			u.tc.mu.Lock()
			done := make(chan struct{})
			go func() {
				defer close(done)
				u.tc.abandon(AbandonBacklog, nil)
			}()
			<-done // it could not free what the parser uses: the parser does, letting go
			u.tc.unlock()
		}},
		{"onGoAway", func(_ *testing.T, w *wire, u *tapUnderTest) {
			w.check(w.dfr.WriteGoAway(0, http2.ErrCodeNo, nil))
			u.feed(w)
		}},
		{"refused by the driver", func(_ *testing.T, w *wire, u *tapUnderTest) {
			w.check(w.dfr.WriteRSTStream(1, http2.ErrCodeRefusedStream))
			u.feed(w)
		}},
		{"Close of a call still receiving", func(_ *testing.T, _ *wire, u *tapUnderTest) {
			u.tc.Close()
		}},
		{"publish of a method the observer no longer wants", func(_ *testing.T, w *wire, u *tapUnderTest) {
			u.tap.wants = func(string) bool { return false }
			w.check(w.cfr.WriteData(1, true, bytes.Repeat([]byte("s3cr3t"), 1)))
			w.reply(1, nil, codes.OK)
			u.feed(w)
		}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			w, u := newWire(t), newTapUnderTest()
			held := halfRequest(t, w, u)
			p.end(t, w, u)
			for i, b := range held {
				if at := slices.IndexFunc(b, func(c byte) bool { return c != 0 }); at >= 0 {
					t.Fatalf("buffer %d: byte %d of %d not wiped", i, at, len(b))
				}
			}
			u.close()
		})
	}
}

// halfRequest opens CreateVolume on stream 1 and sends the first part of a
// message whose body the tap copies verbatim (wire type 7), and returns the
// whole of every buffer that holds it.
func halfRequest(t *testing.T, w *wire, u *tapUnderTest) [][]byte {
	t.Helper()
	body := append([]byte{0x0f}, bytes.Repeat([]byte("s3cr3t"), 830)...)
	framed := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)+6)), body...)
	w.headers(true, 1, false, ":method", "POST", ":path", MethodCreateVolume, "content-type", "application/grpc",
		"grpc-timeout", "1m")
	w.check(w.cfr.WriteData(1, false, framed))
	u.feed(w)
	u.tc.mu.Lock()
	defer u.tc.mu.Unlock()
	c := u.tc.calls[1]
	if c == nil || !c.buffer {
		t.Fatal("the request is not buffered: the test shows nothing")
	}
	held := [][]byte{c.req.body[:cap(c.req.body)]}
	if c.req.filter != nil {
		held = append(held, c.req.filter.out[:cap(c.req.filter.out)])
	}
	if !slices.ContainsFunc(held, func(b []byte) bool { return bytes.Contains(b, []byte("s3cr3t")) }) {
		t.Fatal("no buffer holds the request's bytes: the test shows nothing")
	}
	return held
}
