package sidecar

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// The retry book's rule, case by case (grpc-go v1.85 stream.go
// csAttempt.shouldRetry and clientStream.bufferForRetryLocked, which
// TestRefusedStreamsCountAsGRPCGoRetriesThem asks through the relay): each
// row hands the book refused and answered streams in the order two
// connections' parsers might, and says which refusals the client saw fail.
func TestRetryBookFollowsGRPCGo(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type event struct {
		refused bool // else answered
		a       attempt
		size    int
	}
	refused := func(sig uint64, size, start, end int) event {
		return event{refused: true, a: attempt{method: "m", sig: sig, start: at(start), end: at(end)}, size: size}
	}
	answered := func(sig uint64, start int) event {
		return event{a: attempt{method: "m", sig: sig, start: at(start), end: at(start + 1)}}
	}
	const small, big = 100, maxRetryReplayBytes + 1
	for _, tc := range []struct {
		name       string
		events     []event
		wantFailed []int // the events the client saw fail
	}{
		{"a first attempt is retried", []event{refused(1, small, 0, 1)}, nil},
		{"a request over the replay buffer is committed", []event{refused(1, big, 0, 1)}, []int{0}},
		{"a request at the replay buffer is retried", []event{refused(1, maxRetryReplayBytes, 0, 1)}, nil},
		{"its retry refused again fails", []event{refused(1, small, 0, 1), refused(1, small, 2, 3)}, []int{1}},
		{"a third refusal is a new call's first attempt", []event{
			refused(1, small, 0, 1), refused(1, small, 2, 3), refused(1, small, 4, 5)}, []int{1}},
		{"a stream opened before the refusal is no retry of it", []event{
			refused(1, small, 0, 5), refused(1, small, 1, 6)}, nil},
		{"another request is no retry", []event{refused(1, small, 0, 1), refused(2, small, 2, 3)}, nil},
		{"another method is no retry", []event{
			refused(1, small, 0, 1), {refused: true, a: attempt{method: "n", sig: 1, start: at(2), end: at(3)}, size: small}}, nil},
		{"an answered retry takes the refusal", []event{
			refused(1, small, 0, 1), answered(1, 2), refused(1, small, 4, 5)}, nil},
		{"an answer opened before the refusal is no retry", []event{
			refused(1, small, 1, 2), answered(1, 0), refused(1, small, 4, 5)}, []int{2}},
		{"a stream long after a refusal is no retry of it", []event{
			refused(1, small, 0, 1),
			{refused: true, a: attempt{method: "m", sig: 1, start: at(2).Add(pendingRetryLife), end: at(3).Add(pendingRetryLife)}, size: small}}, nil},
		// A GOAWAY's retry comes on a new connection, parsed apart from
		// the refused one: it may reach the book first, or after a later
		// call of the same request.
		{"a retry refused again that comes first fails", []event{
			refused(1, small, 2, 3), refused(1, small, 0, 1)}, []int{0}},
		{"a retry answered that comes first takes the refusal", []event{
			answered(1, 2), refused(1, small, 0, 1), refused(1, small, 4, 5)}, nil},
		{"the first stream after the refusal is its retry, whatever came first", []event{
			refused(1, small, 0, 1), answered(1, 6), refused(1, small, 2, 3)}, []int{2}},
		{"a later call answered does not take a refusal whose retry comes late", []event{
			refused(1, small, 0, 1), answered(1, 6), refused(1, small, 7, 8), refused(1, small, 2, 3)}, []int{3}},
		// A refusal read before any of its request crossed has no size or
		// first bytes: it pairs only with another such stream of its
		// method, never with a sized one (another call's, as far as the
		// wire tells).
		{"unsized streams of a method pair", []event{refused(0, 0, 0, 1), refused(0, 0, 2, 3)}, []int{1}},
		{"an unsized refusal is no retry of a sized one", []event{refused(7, small, 0, 1), refused(0, 0, 2, 3)}, nil},
		{"a sized refusal is no retry of an unsized one", []event{refused(0, 0, 0, 1), refused(7, small, 2, 3)}, nil},
		{"an unsized refusal never retried counts as retried: the wire cannot size it", []event{
			refused(0, 0, 0, 1), refused(7, small, 0, 2)}, nil},
		{"a committed refusal after an unsized one fails once", []event{
			refused(0, 0, 0, 1), refused(7, big, 2, 3)}, []int{1}},
		{"a committed refusal takes no retry", []event{
			refused(7, big, 0, 1), refused(7, big, 2, 3)}, []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failed []time.Time
			b := retryBook{failed: func(a attempt) { failed = append(failed, a.start) }}
			for _, e := range tc.events {
				if e.refused {
					b.refused(e.a, e.size)
				} else {
					b.answered(e.a)
				}
			}
			b.close()
			var got []int
			for _, f := range failed {
				got = append(got, slices.IndexFunc(tc.events, func(e event) bool { return e.refused && e.a.start.Equal(f) }))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.wantFailed) {
				t.Fatalf("the client saw events %v fail, want %v", got, tc.wantFailed)
			}
		})
	}
}

// The book keeps at most maxPendingRetries refusals, the newest, and
// recentAnswers answered streams; it decides a refusal settleTime after
// it was made, without waiting for the tap to close.
func TestRetryBookIsBoundedAndDecidesInTime(t *testing.T) {
	var failed atomic.Int32
	b := retryBook{failed: func(attempt) { failed.Add(1) }}
	now := time.Now()
	refusal := func(sig uint64, start time.Time) attempt {
		return attempt{method: "m", sig: sig, start: start, end: start.Add(time.Microsecond)}
	}
	for i := range maxPendingRetries + 10 {
		b.refused(refusal(uint64(i+1), now), 100)
	}
	b.mu.Lock()
	kept, oldest := len(b.waiting), b.waiting[0].sig
	b.mu.Unlock()
	if kept != maxPendingRetries || oldest != 11 {
		t.Fatalf("%d refusals kept, the oldest %d; want the newest %d", kept, oldest, maxPendingRetries)
	}
	later := now.Add(time.Millisecond)
	b.refused(refusal(maxPendingRetries+10, later), 100) // the newest's retry, refused again
	b.refused(refusal(1, later), 100)                    // the first's was dropped: a first attempt
	deadline := time.Now().Add(10 * settleTime)
	for failed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := failed.Load(); n != 1 {
		t.Fatalf("%d calls failed %v after the refusals, want 1", n, 10*settleTime)
	}
	for i := range 2 * recentAnswers {
		b.answered(attempt{method: "n", sig: uint64(i + 1), start: later})
	}
	if b.answers[0].sig != recentAnswers+1 {
		t.Fatalf("the answers ring holds %d first, want the newest %d", b.answers[0].sig, recentAnswers+1)
	}
	b.close()
}

// A request's shape is sized from its prefix whichever way its bytes are
// cut, and its signature depends on the method, size and first bytes only.
func TestRequestShape(t *testing.T) {
	msg := append([]byte{0, 0, 0, 1, 0}, make([]byte, 256)...) // announces 256 bytes
	for cut := range 8 {
		var r requestShape
		r.note(msg[:cut])
		if r.known() != (cut >= 5) {
			t.Fatalf("cut %d: known %v", cut, r.known())
		}
		r.note(msg[cut:40])
		if r.size() != 261 || !r.known() {
			t.Fatalf("cut %d: size %d, want 261", cut, r.size())
		}
	}
	var a, b requestShape
	a.note(msg[:40])
	b.note(msg)
	if a.signature() != b.signature() || a.signature() == 0 {
		t.Fatal("signature depends on more than size and first bytes")
	}
	var c requestShape
	c.note(msg[:4])
	if c.signature() != 0 {
		t.Fatal("a request whose prefix did not cross has a signature")
	}
}

// A refusal booked before any of its request crossed takes the size that
// crosses later while it waits (TapConn.sizeLate): over the replay buffer,
// the client saw it fail; within it, it is a first attempt, retried. Once
// decided, it stays decided.
func TestRetryBookSizesALateRequest(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	unsized := attempt{method: "m", start: t0, end: t0.Add(time.Millisecond)}
	for _, tc := range []struct {
		name         string
		size         int
		decidedFirst bool
		wantFailed   int
	}{
		{"over the replay buffer", maxRetryReplayBytes + 1, false, 1},
		{"within the replay buffer", maxRetryReplayBytes, false, 0},
		{"sized once decided", maxRetryReplayBytes + 1, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failed atomic.Int32
			b := retryBook{failed: func(attempt) { failed.Add(1) }}
			b.refused(unsized, 0)
			if tc.decidedFirst {
				b.mu.Lock()
				b.decideLocked(time.Time{})
				b.mu.Unlock()
			}
			b.sized(unsized, 7, tc.size)
			b.close()
			if got := int(failed.Load()); got != tc.wantFailed {
				t.Fatalf("%d calls failed, want %d", got, tc.wantFailed)
			}
		})
	}
}
