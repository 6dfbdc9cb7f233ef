package sidecar

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// grpc-go's transparent retry of a stream the server refused, as its client
// decides it (google.golang.org/grpc v1.85 stream.go: csAttempt.shouldRetry,
// clientStream.bufferForRetryLocked): a refused stream (RST_STREAM
// REFUSED_STREAM, or beyond a GOAWAY: the transport marks it unprocessed)
// is retried at once, on the same connection or a new one, only if it was
// the call's first attempt and the call is not committed; a unary call is
// committed once its request (5-byte prefix and message) is over the replay
// buffer, 256 KiB by default. Otherwise the client sees Unavailable (or
// io.EOF when it read the refusal before writing the request: see
// TestRefusedStreamsCountAsGRPCGoRetriesThem).
//
// The wire does not say which attempt a stream is, so the tap keeps, for
// the whole tap (a GOAWAY's retry comes on another connection), the
// refusals and the streams answered lately, with their request: method,
// size and first bytes. grpc-go opens the retry only once it has read the
// refusal, so a refusal's retry is the first stream of the same request
// opened after it: refused again, it is the Unavailable call the client
// saw; answered, the retry got through.

// maxRetryReplayBytes is grpc-go's default replay buffer
// (defaultMaxRetryRPCBufferSize, rpc_util.go).
const maxRetryReplayBytes = 256 << 10

const (
	// maxPendingRetries bounds the refusals waiting to be decided.
	maxPendingRetries = 1024
	// pendingRetryLife is how long one waits for its retry: grpc-go
	// retries at once, but a GOAWAY's retry may first wait for a new
	// connection.
	pendingRetryLife = 30 * time.Second
	// requestSignatureBytes is how much of a request's message tells
	// attempts of one call from other calls of its method and size (a CSI
	// request starts with its name or volume ID).
	requestSignatureBytes = 32
)

// Each connection's bytes are parsed in the order the relay read them, but
// two connections are parsed apart, and one can lag the other by
// milliseconds: a GOAWAY's retry, on a new connection, can reach the book
// before the refusal it retries, or after a later, unrelated call of the
// same request. So the book decides by the streams' times, not by the
// order they reach it, and only once every stream that could be a
// refusal's retry has had time to come: settleTime after the refusal, the
// refusal's retry is the first stream of its call opened after it; if
// that stream was refused too, it is the call the client saw fail.

const (
	// settleTime is how long a refusal waits before it is decided: far
	// longer than two connections' parsers are apart. The failed call is
	// recorded that much later.
	settleTime = time.Second
	// recentAnswers is how many answered streams the book remembers as
	// possible retries: more than a CSI controller answers in settleTime.
	recentAnswers = 256
)

// retryBook is the refusals waiting to be decided, and the streams
// answered lately, which may be their retries.
type retryBook struct {
	// failed records a refused attempt the client saw fail (Unavailable).
	failed func(attempt)

	mu       sync.Mutex
	waiting  []attempt // by refusal time
	answers  [recentAnswers]attempt
	nextSlot int
	timer    *time.Timer // decides the waiting refusals when they are due
	closed   bool
}

// attempt is one stream of a call, as the retry rule needs it.
type attempt struct {
	method string
	// sig is the request's size and first bytes (requestShape.signature),
	// 0 when its prefix did not cross (the client read the refusal before
	// it sent its request): such a stream is taken as an attempt only of
	// a call whose request did not cross either. Taking it for one of any
	// call of its method would pair independent calls refused together
	// (TestTapDifferential's sessions), so a sized retry refused again
	// after an unsized first attempt goes uncounted: the wire's limit.
	sig        uint64
	start, end time.Time // opened; refused or answered
	// committed: a refusal grpc-go does not retry, its request being over
	// the replay buffer.
	committed bool
}

// retryOf tells whether r may be grpc-go's retry of the refused stream a:
// an attempt of the same call, opened once the refusal was read.
func (r attempt) retryOf(a attempt) bool {
	return r.method == a.method && r.sig == a.sig &&
		r.start.After(a.end) && r.start.Sub(a.end) <= pendingRetryLife
}

// refused books a refused stream of requestBytes. A committed one failed,
// but it is booked too: it may be the retry of a refusal of the same call
// that came before the request crossed, and must fail only once.
func (b *retryBook) refused(a attempt, requestBytes int) {
	a.committed = requestBytes > maxRetryReplayBytes
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if len(b.waiting) >= maxPendingRetries {
		b.waiting = b.waiting[1:] // the oldest goes undecided: taken as retried
	}
	at, _ := slices.BinarySearchFunc(b.waiting, a.end, func(w attempt, t time.Time) int {
		if w.end.After(t) {
			return 1
		}
		return -1 // after those refused at the same time: they came first
	})
	b.waiting = slices.Insert(b.waiting, at, a)
	if b.timer == nil {
		b.timer = time.AfterFunc(settleTime, b.decideDue)
	}
}

// sized gives a refusal booked before any of its request crossed the size
// and first bytes that crossed since: the client sent them before it read
// the refusal (TapConn.settleRefusals). Decided already, it stays as it
// was decided.
func (b *retryBook) sized(booked attempt, sig uint64, requestBytes int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, w := range b.waiting {
		if w.method == booked.method && w.sig == booked.sig && w.start.Equal(booked.start) && w.end.Equal(booked.end) {
			b.waiting[i].sig, b.waiting[i].committed = sig, requestBytes > maxRetryReplayBytes
			return
		}
	}
}

// answered remembers an answered stream: it may be a refusal's retry.
func (b *retryBook) answered(a attempt) {
	b.mu.Lock()
	b.answers[b.nextSlot] = a
	b.nextSlot = (b.nextSlot + 1) % recentAnswers
	b.mu.Unlock()
}

// decideDue decides the refusals settleTime old, and waits for the next.
func (b *retryBook) decideDue() {
	b.mu.Lock()
	failed := b.decideLocked(time.Now().Add(-settleTime))
	b.timer = nil
	if len(b.waiting) > 0 && !b.closed {
		b.timer = time.AfterFunc(time.Until(b.waiting[0].end.Add(settleTime)), b.decideDue)
	}
	b.mu.Unlock()
	for _, a := range failed {
		b.failed(a)
	}
}

// close decides every refusal still waiting: nothing more will come.
func (b *retryBook) close() {
	b.mu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
	failed := b.decideLocked(time.Time{})
	b.mu.Unlock()
	for _, a := range failed {
		b.failed(a)
	}
}

// decideLocked decides, oldest first, the refusals made by until (all if
// until is zero), and returns the attempts the client saw fail.
func (b *retryBook) decideLocked(until time.Time) (failed []attempt) {
	for len(b.waiting) > 0 && (until.IsZero() || !b.waiting[0].end.After(until)) {
		first := b.waiting[0]
		b.waiting = b.waiting[1:]
		if first.committed {
			failed = append(failed, first)
			continue
		}
		refusedAgain, answer := b.retryLocked(first)
		switch {
		case refusedAgain >= 0:
			failed = append(failed, b.waiting[refusedAgain])
			b.waiting = slices.Delete(b.waiting, refusedAgain, refusedAgain+1)
		case answer >= 0:
			b.answers[answer] = attempt{} // it retried this refusal only
		}
		// Unsized and never retried: grpc-go had committed the call (its
		// request over the replay buffer, refused before any of it
		// crossed), or its context ended, or the retry is on a connection
		// the tap does not follow. The wire cannot tell; it counts as
		// retried, as a sized first attempt whose retry never came does.
	}
	return failed
}

// retryLocked finds a's retry, the first stream of its call opened after
// it: a waiting refusal (refusedAgain) or an answered stream (answer);
// -1 when none came.
func (b *retryBook) retryLocked(a attempt) (refusedAgain, answer int) {
	refusedAgain, answer = -1, -1
	var first time.Time
	for i, w := range b.waiting {
		if w.retryOf(a) && (refusedAgain < 0 || w.start.Before(first)) {
			refusedAgain, first = i, w.start
		}
	}
	for i, r := range b.answers {
		if r.retryOf(a) && (first.IsZero() || r.start.Before(first)) {
			refusedAgain, answer, first = -1, i, r.start
		}
	}
	return refusedAgain, answer
}

// requestShape is what a call's request tells of its attempt: its size and
// first bytes, as they cross, for any method.
type requestShape struct {
	prefix [5]byte
	seen   int // request DATA bytes so far
	head   [requestSignatureBytes]byte
	nhead  int
}

func (r *requestShape) note(p []byte) {
	for len(p) > 0 && r.seen < len(r.prefix) {
		r.prefix[r.seen] = p[0]
		p, r.seen = p[1:], r.seen+1
	}
	n := copy(r.head[r.nhead:], p)
	r.nhead += n
	r.seen += len(p)
}

// known tells whether the request's size is: its prefix crossed.
func (r *requestShape) known() bool { return r.seen >= len(r.prefix) }

// size is the request's bytes in grpc-go's replay buffer: the announced
// message and its prefix once the prefix crossed, the bytes seen before.
func (r *requestShape) size() int {
	if !r.known() {
		return r.seen
	}
	return len(r.prefix) + int(binary.BigEndian.Uint32(r.prefix[1:]))
}

var signatureSeed = maphash.MakeSeed()

// signature tells attempts of one call apart from other calls of its
// method: 0 until the request's prefix crossed, never 0 after.
func (r *requestShape) signature() uint64 {
	if !r.known() {
		return 0
	}
	var h maphash.Hash
	h.SetSeed(signatureSeed)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(r.size()))
	h.Write(n[:])
	h.Write(r.head[:r.nhead])
	return h.Sum64() | 1
}
