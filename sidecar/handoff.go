package sidecar

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The relayed bytes waiting for a parser: at most a whole largest message
// per connection and maxHandoffTotalBytes of all together. A connection
// whose parsing falls further behind gives up its view (AbandonBacklog);
// the relay never waits for it.
const (
	maxHandoffBytes      = maxMessageBytes
	maxHandoffTotalBytes = 4 * maxHandoffBytes
)

// keptHandoffBytes is what a connection's hand-off keeps of its buffers
// between batches: an idle connection holds no more than this per buffer.
const keptHandoffBytes = relayBufferBytes

// copiedReadBytes is the largest read copied into the queue; a larger one
// is queued in its own buffer, which costs no copy but holds a whole relay
// buffer until parsed.
const copiedReadBytes = 16 << 10

// maxInlineParseBytes bounds what a pump parses of the other direction's
// reads before it goes back to its own socket; the rest goes to a
// goroutine, so a peer flooding one direction never holds up the other.
const maxInlineParseBytes = 256 << 10

// handoff puts the reads of both relay goroutines of a connection into one
// order, the order the relay read them, and has them parsed in it. Each
// pump takes its place in that order before forwarding a read, so a
// request is in line before the driver can answer it and a reply before
// the client can react to it: the tap sees the calls as the peers did.
//
// The pump that finds nobody parsing takes the parser's duty: it forwards
// its read, then parses it from its own buffer and whatever the other pump
// queued meanwhile, in order. A pump that finds the duty taken queues its
// read (a copy, or a large read's buffer) and goes straight back to its
// socket. So a quiet connection parses each read once, off the forwarding
// path, with no copy and no goroutine switch; only past
// maxInlineParseBytes does a goroutine take the duty over.
type handoff struct {
	conn *TapConn

	mu      sync.Mutex
	parsing bool    // a pump or the helper goroutine holds the duty
	queued  []byte  // bytes of the copied reads waiting, in order
	chunks  []chunk // the waiting reads, in order
	held    int     // what the waiting reads and the batch being parsed hold
	closed  bool    // no more reads come
	spare   []byte  // the buffer of the last batch, wiped, for the next
	spareCh []chunk
	helper  sync.WaitGroup
}

// chunk is one relayed read waiting for the parser: copied into queued
// (ending at end), or, when large, the read's own buffer, held.
type chunk struct {
	fromClient bool
	at         time.Time
	end        int
	read       *relayRead
	n          int
}

func newHandoff(tc *TapConn) *handoff { return &handoff{conn: tc} }

// handoffSink is one direction's side of the hand-off.
type handoffSink struct {
	h          *handoff
	fromClient bool
}

// turn is a read's place in line: own is set when its pump holds the
// parser's duty and must parse p once it has forwarded it.
type turn struct {
	own bool
	p   []byte
	at  time.Time
}

// Feed takes p's place in line and parses what it must at once (p is not
// kept).
func (s handoffSink) Feed(p []byte, at time.Time) {
	s.parseAfter(s.take(p, nil, at))
}

// feedRead takes the read's place in line; the pump calls parseAfter once
// it has forwarded it.
func (s handoffSink) feedRead(r *relayRead, n int, at time.Time) turn {
	return s.take(r.b[:n], r, at)
}

// take puts the read p (of the buffer r, if any) in line: as the duty's
// holder, or queued.
func (s handoffSink) take(p []byte, r *relayRead, at time.Time) turn {
	h := s.h
	if h.conn.abandoned.Load() {
		return turn{}
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return turn{}
	}
	if !h.parsing && len(h.chunks) == 0 {
		h.parsing = true
		h.mu.Unlock()
		return turn{own: true, p: p, at: at}
	}
	c := chunk{fromClient: s.fromClient, at: at}
	n := len(p)
	if r != nil && len(p) > copiedReadBytes {
		c.read, c.n, n = r, len(p), len(r.b)
	}
	if h.held+n > maxHandoffBytes || !h.conn.tap.handoffBytes.take(int64(n)) {
		h.mu.Unlock()
		h.conn.abandon(AbandonBacklog, fmt.Errorf("more than %d relayed bytes of a connection (or %d of all) waited for the parser",
			maxHandoffBytes, maxHandoffTotalBytes))
		return turn{}
	}
	h.held += n
	if c.read != nil {
		c.read.hold()
	} else {
		h.queued = append(h.queued, p...)
	}
	c.end = len(h.queued)
	h.chunks = append(h.chunks, c)
	h.mu.Unlock()
	return turn{}
}

// parseAfter parses the read of a turn that holds the duty, then what was
// queued behind it, and gives the duty up once the line is empty (or hands
// it to a goroutine past maxInlineParseBytes).
func (s handoffSink) parseAfter(t turn) {
	if !t.own {
		return
	}
	h := s.h
	d := h.conn.driver
	if s.fromClient {
		d = h.conn.client
	}
	d.Feed(t.p, t.at)
	h.parseQueued(maxInlineParseBytes)
}

// parseQueued parses the queued reads a batch at a time, up to limit bytes
// (no limit when negative), holding the duty; it gives the duty up once the
// line is empty, or hands it to a goroutine at the limit.
func (h *handoff) parseQueued(limit int) {
	parsed := 0
	for {
		h.mu.Lock()
		if len(h.chunks) == 0 {
			h.parsing = false
			h.mu.Unlock()
			return
		}
		if limit >= 0 && parsed >= limit {
			h.helper.Add(1)
			h.mu.Unlock()
			go func() {
				defer h.helper.Done()
				h.parseQueued(-1)
			}()
			return
		}
		batch, chunks := h.queued, h.chunks
		h.queued, h.chunks = h.spare[:0], h.spareCh[:0]
		h.spare, h.spareCh = nil, nil
		h.mu.Unlock()

		h.feedBatch(batch, chunks)
		held := heldBy(batch, chunks)
		parsed += held
		releaseReads(chunks)
		clear(batch) // relayed requests carry secrets

		h.mu.Lock()
		h.giveLocked(held)
		if cap(batch) <= keptHandoffBytes && !h.closed {
			h.spare, h.spareCh = batch[:0], chunks[:0]
		}
		h.mu.Unlock()
	}
}

func (h *handoff) feedBatch(batch []byte, chunks []chunk) {
	from := 0
	for _, c := range chunks {
		d := h.conn.driver
		if c.fromClient {
			d = h.conn.client
		}
		if c.read != nil {
			d.Feed(c.read.b[:c.n], c.at)
			continue
		}
		d.Feed(batch[from:c.end], c.at)
		from = c.end
	}
}

// heldBy is what a batch holds of the allowances.
func heldBy(batch []byte, chunks []chunk) int {
	n := len(batch)
	for _, c := range chunks {
		if c.read != nil {
			n += len(c.read.b)
		}
	}
	return n
}

// releaseReads lets go of the relay buffers a batch held.
func releaseReads(chunks []chunk) {
	for i := range chunks {
		if chunks[i].read != nil {
			chunks[i].read.release()
			chunks[i].read = nil
		}
	}
}

// close takes no more reads and waits until what is in line was parsed.
// The pumps have returned: only a helper goroutine may still be parsing.
func (h *handoff) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.helper.Wait()
	h.mu.Lock()
	h.spare, h.spareCh = nil, nil
	h.mu.Unlock()
}

// drain waits until every read put in line so far has been parsed (tests).
func (h *handoff) drain() {
	for {
		h.mu.Lock()
		idle := !h.parsing && len(h.chunks) == 0
		h.mu.Unlock()
		if idle {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// dropQueuedLocked wipes and lets go of what waits: an abandoned view
// keeps none of the relayed bytes.
func (h *handoff) dropQueuedLocked() {
	h.giveLocked(heldBy(h.queued, h.chunks))
	releaseReads(h.chunks)
	clear(h.queued)
	h.queued, h.chunks, h.spare, h.spareCh = nil, nil, nil, nil
}

// giveLocked returns n bytes to the allowances.
func (h *handoff) giveLocked(n int) {
	h.held -= n
	h.conn.tap.handoffBytes.add(int64(n))
}

// allowance is bytes shared by every connection of a tap.
type allowance struct{ left atomic.Int64 }

func newAllowance(n int64) *allowance {
	a := &allowance{}
	a.left.Store(n)
	return a
}

// take reserves n bytes, or reports that they are not available.
func (a *allowance) take(n int64) bool {
	if a.left.Add(-n) >= 0 {
		return true
	}
	a.left.Add(n)
	return false
}

func (a *allowance) add(n int64) { a.left.Add(n) }
