package sidecar

import (
	"fmt"
	"math"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// grpcTimeout reads grpc-timeout as grpc-go's decodeTimeout
// (internal/transport/http_util.go): 2 to 9 characters, 1 to 8 digits and
// one of the six units; hours beyond what a Duration holds are clamped to
// the longest one.
func TestGRPCTimeoutFollowsDecodeTimeout(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1S", time.Second, true},
		{"12345678n", 12345678, true},
		{"2562047H", 2562047 * time.Hour, true},
		{"2562048H", math.MaxInt64, true}, // past what a Duration holds: clamped
		{"5124096H", math.MaxInt64, true}, // unclamped, 2^64 ns and 25 minutes: 25 minutes
		{"99999999H", math.MaxInt64, true},
		{"5m", 5 * time.Millisecond, true},
		{"5u", 5 * time.Microsecond, true},
		{"5M", 5 * time.Minute, true},
		{"S", 0, false},
		{"", 0, false},
		{"123456789S", 0, false},
		{"1s", 0, false},
		{"+1S", 0, false},
		{"1.5S", 0, false},
		{"-1S", 0, false},
		{" 1S", 0, false},
		{"1_0S", 0, false},
		{"0x1S", 0, false},
		{"00000000S", 0, true},
		{"99999999m", 99999999 * time.Millisecond, true},
	} {
		if got, _, ok := grpcTimeout(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("grpcTimeout(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// A cancel half an hour into a call whose grpc-timeout is millions of hours
// is a cancel, not the deadline (which an unclamped reading of the timeout
// put 25 minutes after the start).
func TestAHugeTimeoutPutsNoDeadlineNear(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	start := time.Now()
	w.headers(true, 1, false, ":method", "POST", ":path", MethodProbe, "content-type", "application/grpc", "grpc-timeout", "5124096H")
	w.check(w.cfr.WriteData(1, true, []byte{0, 0, 0, 0, 0}))
	feedParsedAt(u.tc, u.tc.FromClient(), w.client.Bytes(), start)
	w.check(w.dfr.WriteRSTStream(1, http2.ErrCodeCancel))
	feedParsedAt(u.tc, u.tc.FromDriver(), w.driver.Bytes(), start.Add(30*time.Minute))
	if got := fmt.Sprint(u.rec.finished); got != fmt.Sprint([]codes.Code{codes.Canceled}) {
		t.Fatalf("finished %s, want one Canceled", got)
	}
	u.close()
}

// cancelledAt is the code the tap gives a Probe whose request carries
// grpc-timeout and which the client cancels `after` its headers crossed
// the relay.
func cancelledAt(t *testing.T, timeout string, after time.Duration) []codes.Code {
	t.Helper()
	w, u := newWire(t), newTapUnderTest()
	defer u.close()
	start := time.Now()
	w.headers(true, 1, false, ":method", "POST", ":path", MethodProbe, "content-type", "application/grpc", "grpc-timeout", timeout)
	w.check(w.cfr.WriteData(1, true, []byte{0, 0, 0, 0, 0}))
	feedParsedAt(u.tc, u.tc.FromClient(), w.client.Bytes(), start)
	w.client.Reset()
	w.check(w.cfr.WriteRSTStream(1, http2.ErrCodeCancel))
	feedParsedAt(u.tc, u.tc.FromClient(), w.client.Bytes(), start.Add(after))
	return u.rec.finished
}

// A client's cancel is DeadlineExceeded only from one unit of its
// grpc-timeout and deadlineTransit before the deadline on, for every unit
// grpc-go writes: the slack is the header's precision, not a share of the
// timeout (1/64 of a 300 s timeout took cancels 4.7 s early for the
// deadline's).
func TestCancelIsTheDeadlineOnlyAtTheDeadline(t *testing.T) {
	for _, unit := range []struct {
		letter string
		d      time.Duration
	}{{"n", time.Nanosecond}, {"u", time.Microsecond}, {"m", time.Millisecond}, {"S", time.Second}, {"M", time.Minute}, {"H", time.Hour}} {
		timeout := 1000 * unit.d
		from := max(0, timeout-unit.d-deadlineTransit)
		header := "1000" + unit.letter
		if got := cancelledAt(t, header, from); fmt.Sprint(got) != fmt.Sprint([]codes.Code{codes.DeadlineExceeded}) {
			t.Errorf("grpc-timeout %s, cancelled %v after the headers: %v; want DeadlineExceeded", header, from, got)
		}
		if from == 0 {
			continue // within the slack from the start: every cancel is the deadline's
		}
		if got := cancelledAt(t, header, from-time.Nanosecond); fmt.Sprint(got) != fmt.Sprint([]codes.Code{codes.Canceled}) {
			t.Errorf("grpc-timeout %s, cancelled %v after the headers: %v; want Canceled", header, from-time.Nanosecond, got)
		}
	}
	// grpc-go writes a 300 s timeout as 300000m: a cancel a second early
	// is the caller's.
	if got := cancelledAt(t, "300000m", 299*time.Second); fmt.Sprint(got) != fmt.Sprint([]codes.Code{codes.Canceled}) {
		t.Errorf("300 s timeout cancelled at 299 s: %v; want Canceled", got)
	}
}
