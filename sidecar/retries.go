package sidecar

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// grpc-go's transparent retry of a stream the server refused, as its client
// decides it (google.golang.org/grpc v1.85 stream.go: csAttempt.shouldRetry,
// clientStream.bufferForRetryLocked): a refused stream (RST_STREAM
// REFUSED_STREAM, or beyond a GOAWAY: the transport marks it unprocessed)
// is retried at once, on the same connection or a new one, only if it was
// the call's first attempt and the call is not committed; a unary call is
// committed once its request (5-byte prefix and message) is over the replay
// buffer, 256 KiB by default. Otherwise the client sees Unavailable.
//
// The wire does not say which attempt a stream is, so the tap keeps, for
// the whole tap (a GOAWAY's retry comes on another connection), the
// refused first attempts whose retry has not come yet, by request: method,
// size and first bytes. grpc-go opens the retry only once it has read the
// refusal, so a refused stream opened after a matching refusal is that
// retry, refused again: the Unavailable call the client saw. A stream
// opened after one and answered was that retry getting through.

// maxRetryReplayBytes is grpc-go's default replay buffer
// (defaultMaxRetryRPCBufferSize, rpc_util.go).
const maxRetryReplayBytes = 256 << 10

const (
	// maxPendingRetries bounds the refused first attempts remembered.
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

// retryBook is the refused first attempts waiting for their retry.
type retryBook struct {
	pending atomic.Int32 // len(waiting), read without the lock
	mu      sync.Mutex
	waiting []pendingRetry // oldest first
}

type pendingRetry struct {
	sig uint64
	at  time.Time
}

var signatureSeed = maphash.MakeSeed()

// refused decides a refused stream: counted is true when the client saw it
// fail (Unavailable), false when grpc-go retries it.
// The stream was opened at start and refused at at.
func (b *retryBook) refused(sig uint64, requestBytes int, start, at time.Time) (counted bool) {
	if requestBytes > maxRetryReplayBytes {
		return true // committed: no retry
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked(at)
	if b.takeLocked(sig, start) {
		return true // the retry, refused again
	}
	if len(b.waiting) >= maxPendingRetries {
		b.waiting = b.waiting[1:]
	}
	b.waiting = append(b.waiting, pendingRetry{sig: sig, at: at})
	b.pending.Store(int32(len(b.waiting)))
	return false
}

// answered forgets the refused attempt a stream opened at start and
// answered retried.
func (b *retryBook) answered(sig uint64, start time.Time) {
	if b.pending.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.takeLocked(sig, start)
}

// takeLocked takes the oldest refusal of sig before start.
func (b *retryBook) takeLocked(sig uint64, start time.Time) bool {
	for i, p := range b.waiting {
		if p.sig == sig && start.After(p.at) {
			b.waiting = append(b.waiting[:i], b.waiting[i+1:]...)
			b.pending.Store(int32(len(b.waiting)))
			return true
		}
	}
	return false
}

func (b *retryBook) expireLocked(now time.Time) {
	n := 0
	for n < len(b.waiting) && now.Sub(b.waiting[n].at) > pendingRetryLife {
		n++
	}
	if n > 0 {
		b.waiting = b.waiting[n:]
		b.pending.Store(int32(len(b.waiting)))
	}
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

// signature tells attempts of one call apart from other calls.
func (r *requestShape) signature(method string) uint64 {
	var h maphash.Hash
	h.SetSeed(signatureSeed)
	h.WriteString(method)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(r.size()))
	h.Write(n[:])
	h.Write(r.head[:r.nhead])
	return h.Sum64()
}
