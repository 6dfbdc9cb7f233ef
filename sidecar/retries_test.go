package sidecar

import (
	"testing"
	"time"
)

// The retry book's rule, case by case (grpc-go v1.85 stream.go
// csAttempt.shouldRetry and clientStream.bufferForRetryLocked, which
// TestRefusedStreamsCountAsGRPCGoRetriesThem asks through the relay): each
// row refuses or answers streams in order and says which refusals the
// client saw fail.
func TestRetryBookFollowsGRPCGo(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type event struct {
		refused     bool // else answered
		sig         uint64
		size        int
		start, end  time.Time
		wantCounted bool // for a refusal
	}
	for _, tc := range []struct {
		name   string
		events []event
	}{
		{"a first attempt is retried", []event{{refused: true, sig: 1, size: 100, start: at(0), end: at(1)}}},
		{"a request over the replay buffer is committed", []event{
			{refused: true, sig: 1, size: maxRetryReplayBytes + 1, start: at(0), end: at(1), wantCounted: true}}},
		{"a request at the replay buffer is retried", []event{
			{refused: true, sig: 1, size: maxRetryReplayBytes, start: at(0), end: at(1)}}},
		{"its retry refused again fails", []event{
			{refused: true, sig: 1, size: 100, start: at(0), end: at(1)},
			{refused: true, sig: 1, size: 100, start: at(2), end: at(3), wantCounted: true}}},
		{"a third refusal is a new call's first attempt", []event{
			{refused: true, sig: 1, size: 100, start: at(0), end: at(1)},
			{refused: true, sig: 1, size: 100, start: at(2), end: at(3), wantCounted: true},
			{refused: true, sig: 1, size: 100, start: at(4), end: at(5)}}},
		{"a stream opened before the refusal is no retry of it", []event{
			{refused: true, sig: 1, size: 100, start: at(0), end: at(5)},
			{refused: true, sig: 1, size: 100, start: at(1), end: at(6)}}},
		{"another request is no retry", []event{
			{refused: true, sig: 1, size: 100, start: at(0), end: at(1)},
			{refused: true, sig: 2, size: 100, start: at(2), end: at(3)}}},
		{"an answered retry forgets the refusal", []event{
			{refused: true, sig: 1, size: 100, start: at(0), end: at(1)},
			{sig: 1, start: at(2)},
			{refused: true, sig: 1, size: 100, start: at(4), end: at(5)}}},
		{"an answer opened before the refusal forgets nothing", []event{
			{refused: true, sig: 1, size: 100, start: at(1), end: at(2)},
			{sig: 1, start: at(0)},
			{refused: true, sig: 1, size: 100, start: at(4), end: at(5), wantCounted: true}}},
		{"a refusal is forgotten after its life", []event{
			{refused: true, sig: 1, size: 100, start: at(0), end: at(1)},
			{refused: true, sig: 1, size: 100, start: at(2), end: at(1).Add(pendingRetryLife + time.Millisecond)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b retryBook
			for i, e := range tc.events {
				if !e.refused {
					b.answered(e.sig, e.start)
					continue
				}
				if got := b.refused(e.sig, e.size, e.start, e.end); got != e.wantCounted {
					t.Fatalf("event %d: counted %v, want %v", i, got, e.wantCounted)
				}
			}
		})
	}
}

// The book keeps at most maxPendingRetries refusals, the newest.
func TestRetryBookIsBounded(t *testing.T) {
	var b retryBook
	t0 := time.Unix(1700000000, 0)
	for i := range maxPendingRetries + 10 {
		b.refused(uint64(i), 100, t0, t0)
	}
	if n := int(b.pending.Load()); n != maxPendingRetries || len(b.waiting) != n {
		t.Fatalf("%d refusals kept (%d counted), want %d", len(b.waiting), n, maxPendingRetries)
	}
	if b.refused(0, 100, t0.Add(time.Millisecond), t0.Add(time.Millisecond)) {
		t.Fatal("the oldest refusal was kept past the bound")
	}
	if !b.refused(maxPendingRetries+9, 100, t0.Add(time.Millisecond), t0.Add(time.Millisecond)) {
		t.Fatal("the newest refusal was dropped")
	}
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
	if a.signature("m") != b.signature("m") || a.signature("m") == a.signature("n") {
		t.Fatal("signature depends on more than method, size and first bytes")
	}
}
