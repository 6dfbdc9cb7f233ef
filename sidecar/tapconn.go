package sidecar

import (
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// TapConn follows one relayed connection: a parser per direction, both
// run by the connection's one parser goroutine in the order the relay read
// their bytes (handoff), sharing the calls in flight.
//
// Only the client's request headers open a call record: read in order, a
// request always comes before the driver's frames of its stream. Frames of
// finished or unknown streams, WINDOW_UPDATE and PRIORITY never make or
// keep a record.
type TapConn struct {
	tap       *Tap
	abandoned atomic.Bool
	tapped    atomic.Bool
	handoff   *handoff
	client    *direction
	driver    *direction

	// mu is held by whoever parses (a direction's Feed, for all of its
	// frames: the hand-off runs one at a time, so it is never contended
	// there) and by Close. abandon, which may run on a pump while the parser
	// holds it, takes it only if it is free; unlock then lets go of what
	// the connection held. It guards what follows and both directions.
	mu         sync.Mutex
	calls      map[uint32]*call
	lastOpened uint32 // the highest stream the client opened
	goAway     uint32 // streams above this the driver will not process
	// spare are records of published calls, emptied, for the next calls:
	// a long connection's calls allocate none (at most maxSpareCalls).
	spare []*call
	// share is what this connection's messages hold of the tap's budget.
	share share
	// refusedUnsized is set while a refused stream waits for its request's
	// size; settled are such streams decided meanwhile, to publish.
	refusedUnsized bool
	settled        []*call
	// lateSized are refused streams settled before any of their request
	// crossed, whose request may cross yet (settleRefusals).
	lateSized []lateSizing
}

// lateSizing is a refused stream booked unsized, and what crossed of its
// request since.
type lateSizing struct {
	id     uint32
	booked attempt
	shape  requestShape
}

// NewConn starts following a new relayed connection.
func (t *Tap) NewConn() *TapConn {
	tc := &TapConn{tap: t, calls: map[uint32]*call{}, goAway: math.MaxUint32}
	tc.client = newDirection(tc, true)
	tc.driver = newDirection(tc, false)
	tc.handoff = newHandoff(tc)
	return tc
}

// FromClient is the sink for bytes the client sent to the driver; feed it
// before forwarding them.
func (tc *TapConn) FromClient() byteSink { return handoffSink{tc.handoff, true} }

// FromDriver is the sink for bytes the driver sent to the client; feed it
// before forwarding them.
func (tc *TapConn) FromDriver() byteSink { return handoffSink{tc.handoff, false} }

// sawBytes counts the connection as tapped once bytes flow: a connection
// closed without a byte (a health check's, say) was never a CSI client.
func (tc *TapConn) sawBytes() {
	if !tc.tapped.Load() && !tc.tapped.Swap(true) {
		tc.tap.recorder.ConnectionTapped()
	}
}

func (tc *TapConn) peerOf(d *direction) *direction {
	if d == tc.client {
		return tc.driver
	}
	return tc.client
}

// Close ends the connection's parsing; both sinks must no longer be fed.
// Calls still open when a connection ends are reported as Unavailable:
// that is what the client got.
func (tc *TapConn) Close() {
	tc.handoff.close()
	defer tc.recoverInto("close")
	tc.mu.Lock()
	if tc.abandoned.Load() {
		tc.releaseLocked()
		tc.mu.Unlock()
		return
	}
	open := tc.calls
	tc.calls, tc.spare = nil, nil
	tc.client.release()
	tc.driver.release()
	tc.mu.Unlock()
	now := time.Now()
	for _, c := range open {
		if c.method == "" {
			c.free(tc.tap.budget)
			continue
		}
		if c.refused { // what crossed of its request is all there is
			tc.publish(c)
			continue
		}
		if !c.statusKnown {
			c.setStatus(codes.Unavailable, now)
			c.message = "connection closed before the call finished"
		}
		tc.publish(c)
	}
}

// recoverInto turns a panic in tap work outside Feed into an abandoned tap.
func (tc *TapConn) recoverInto(what string) {
	if r := recover(); r != nil {
		tc.abandon(AbandonPanic, fmt.Errorf("%s: %v\n%s", what, r, debug.Stack()))
	}
}

// releaseLocked lets go of everything an abandoned connection held: call
// records with their buffered messages (requests' secrets included), frame
// buffers and header tables. The caller holds tc.mu.
func (tc *TapConn) releaseLocked() {
	for _, c := range tc.calls {
		c.free(tc.tap.budget)
	}
	tc.calls, tc.spare = nil, nil
	tc.client.release()
	tc.driver.release()
}

// unlock lets go of tc.mu, and of what the connection held if it was
// abandoned meanwhile: abandon on another goroutine may have found mu
// held just before it was let go, and freed nothing.
func (tc *TapConn) unlock() {
	freed := tc.abandoned.Load()
	if freed {
		tc.releaseLocked()
	}
	tc.mu.Unlock()
	if !freed && tc.abandoned.Load() && tc.mu.TryLock() {
		tc.releaseLocked()
		tc.mu.Unlock()
	}
}

// abandon stops following the connection for good, and lets go of
// everything it held (releaseLocked) at once, or as soon as the parser
// holding tc.mu returns: it never waits for the parser. The relay is
// unaffected.
func (tc *TapConn) abandon(reason string, err error) {
	if tc.abandoned.Swap(true) {
		return
	}
	tc.tap.abandonLog.Info("Tap gave up on a connection; relaying continues untapped", "reason", reason, "err", err)
	tc.tap.recorder.ConnectionAbandoned(reason)
	tc.handoff.mu.Lock()
	tc.handoff.dropQueuedLocked()
	tc.handoff.mu.Unlock()
	// A parser holding mu right now (this goroutine's, if parsing failed)
	// frees it all when it lets go of mu.
	if tc.mu.TryLock() {
		tc.unlock()
	}
}

// onHeaders applies one decoded header block.
func (tc *TapConn) onHeaders(h *headerBlock, fromClient bool, at time.Time) {
	tc.update(h.streamID, func() *call {
		if fromClient {
			return tc.openCall(h, at)
		}
		c := tc.calls[h.streamID]
		if c != nil {
			c.onResponseHeaders(h, at)
		}
		return c
	})
}

// update runs apply on the calls in flight and publishes the call apply
// returns if that completed it. The caller holds tc.mu.
func (tc *TapConn) update(id uint32, apply func() *call) {
	c, settled := tc.completed(id, apply)
	for _, s := range settled { // refused before c opened
		tc.publish(s)
		tc.recycle(s)
	}
	if c != nil {
		tc.publish(c)
		tc.recycle(c)
	}
}

func (tc *TapConn) completed(id uint32, apply func() *call) (c *call, settled []*call) {
	if tc.calls == nil { // abandoned by an earlier frame of this Feed
		return nil, nil
	}
	c = apply()
	settled, tc.settled = tc.settled, nil
	if c == nil || !c.complete() {
		tc.refusedUnsized = tc.refusedUnsized || (c != nil && c.refused)
		return nil, settled
	}
	delete(tc.calls, id)
	return c, settled
}

// openCall applies request headers: a new stream opens a record.
func (tc *TapConn) openCall(h *headerBlock, at time.Time) *call {
	id := h.streamID
	c := tc.calls[id]
	if c != nil && c.method != "" { // gRPC clients send no trailers; only END_STREAM matters
		c.requestDone = c.requestDone || h.endStream
		return c
	}
	if id%2 == 0 || id <= tc.lastOpened {
		return nil // not a client stream, or finished
	}
	tc.lastOpened = id
	if len(tc.calls) >= maxCallsPerConn {
		tc.tap.recorder.CallUndecoded(UndecodedStreams)
		return nil
	}
	c = tc.newCall()
	tc.calls[id] = c
	c.open(h, at, tc.tap.budget, tc.tap.wants)
	if id > tc.goAway { // sent before the client read the GOAWAY: refused
		c.refuse(at, tc.tap.budget)
	} else if tc.refusedUnsized {
		tc.settleRefusals(c.method, at)
	}
	return c
}

// settleRefusals decides the refused streams of method still waiting for
// their request's size, now that the client opened another stream of it
// after their refusal: grpc-go drops what it has not sent of a refused
// attempt's request once it reads the refusal, and only then opens the
// retry, so what crossed is all there is. But the client may have opened
// that stream before it read the refusal, the relay reading the two
// directions in another order than they were written, and go on sending
// the refused request: what crosses of it in the settleTime the retry
// book waits still sizes the refusal (sizeLate). The caller holds tc.mu.
func (tc *TapConn) settleRefusals(method string, at time.Time) {
	waiting := false
	for id, c := range tc.calls {
		if !c.refused {
			continue
		}
		if c.method == method && c.end.Before(at) {
			c.requestDone = true
			delete(tc.calls, id)
			tc.settled = append(tc.settled, c)
			tc.awaitLateSize(id, c, at)
			continue
		}
		waiting = true
	}
	tc.refusedUnsized = waiting
}

// awaitLateSize keeps the settled refusal c of stream id to size it if its
// request crosses yet: at most maxLateSized per connection, for settleTime
// (after that the retry book has decided it). The caller holds tc.mu.
func (tc *TapConn) awaitLateSize(id uint32, c *call, at time.Time) {
	tc.lateSized = slices.DeleteFunc(tc.lateSized, func(l lateSizing) bool { return at.Sub(l.booked.end) > settleTime })
	if len(tc.lateSized) >= maxLateSized {
		tc.lateSized = slices.Delete(tc.lateSized, 0, 1)
	}
	tc.lateSized = append(tc.lateSized, lateSizing{id: id, booked: c.attempt(), shape: c.shape})
}

// sizeLate notes request bytes of a refusal settled unsized; once they
// tell its size, the retry book has it. The caller holds tc.mu.
func (tc *TapConn) sizeLate(id uint32, p []byte) {
	i := slices.IndexFunc(tc.lateSized, func(l lateSizing) bool { return l.id == id })
	if i < 0 {
		return
	}
	l := &tc.lateSized[i]
	l.shape.note(p)
	if l.shape.known() {
		tc.tap.retries.sized(l.booked, l.shape.signature(), l.shape.size())
		tc.lateSized = slices.Delete(tc.lateSized, i, i+1)
	}
}

// newCall is a record whose messages hold of this connection's share, a
// spare one if there is. The caller holds tc.mu.
func (tc *TapConn) newCall() *call {
	var c *call
	if n := len(tc.spare); n > 0 {
		c, tc.spare = tc.spare[n-1], tc.spare[:n-1]
	} else {
		c = new(call)
	}
	*c = call{buffer: tc.tap.buffers}
	c.req.acct.share, c.resp.acct.share = &tc.share, &tc.share
	c.req.space = &c.filter
	return c
}

// recycle keeps the record of a published call, emptied, for a later
// call: publish has handed on or freed everything it held, and nothing
// refers to it any more. The caller holds tc.mu.
func (tc *TapConn) recycle(c *call) {
	*c = call{}
	if tc.calls != nil && len(tc.spare) < maxSpareCalls {
		tc.spare = append(tc.spare, c)
	}
}

// onData applies one DATA frame.
func (tc *TapConn) onData(id uint32, p []byte, end, fromClient bool, at time.Time) {
	tc.update(id, func() *call {
		if fromClient {
			c := tc.calls[id]
			if c == nil {
				tc.sizeLate(id, p)
				return nil
			}
			if c.method == "" {
				return nil
			}
			c.shape.note(p)
			c.onData(p, true, tc.tap.budget)
			c.requestDone = c.requestDone || end
			return c
		}
		c := tc.calls[id]
		if c != nil {
			c.onData(p, false, tc.tap.budget)
			c.onReplyData(p, end, at)
		}
		return c
	})
}

// onReset applies one RST_STREAM frame.
func (tc *TapConn) onReset(id uint32, ec http2.ErrCode, fromClient bool, at time.Time) {
	tc.update(id, func() *call {
		c := tc.calls[id]
		if c != nil {
			c.onReset(ec, fromClient, at, tc.tap.budget)
			if c.awaitsRequest() {
				tc.boundAwaiting()
			}
		}
		return c
	})
}

// boundAwaiting gives up on the oldest call that waits for the rest of a
// request the driver reset, once more than maxAwaitingCalls wait: a client that
// got the reset sends no more, and a connection lives for days.
func (tc *TapConn) boundAwaiting() {
	var oldest uint32
	waiting := 0
	for id, c := range tc.calls {
		if c.method != "" && c.reset && c.awaitsRequest() {
			waiting++
			if oldest == 0 || id < oldest {
				oldest = id
			}
		}
	}
	if waiting > maxAwaitingCalls {
		c := tc.calls[oldest]
		c.giveUp(UndecodedTruncated, tc.tap.budget)
		delete(tc.calls, oldest)
		tc.tap.recordFinished(c)
		tc.tap.recorder.CallUndecoded(UndecodedTruncated)
	}
}

// onGoAway ends the calls the driver says it will not process: refused
// streams, which the client may retry on another connection. The caller
// holds tc.mu.
func (tc *TapConn) onGoAway(last uint32, at time.Time) {
	var refused []*call
	tc.goAway = min(tc.goAway, last)
	for id, c := range tc.calls {
		if id <= tc.goAway {
			continue
		}
		if c.method == "" || c.statusKnown {
			c.free(tc.tap.budget)
			delete(tc.calls, id)
			continue
		}
		c.refuse(at, tc.tap.budget)
		if c.complete() { // else once its request's size is known, or at close
			delete(tc.calls, id)
			refused = append(refused, c)
		}
	}
	for _, c := range refused {
		tc.publish(c)
	}
}

// publish records the call's timing and hands it on to be decoded; a
// refused call is timed only when the client did not retry it.
func (tc *TapConn) publish(c *call) {
	t := tc.tap
	if c.refused {
		// Timed if the client saw it fail; never observed: its messages
		// were let go at the refusal.
		t.retries.refused(c.attempt(), c.shape.size())
		c.free(t.budget)
		return
	}
	t.retries.answered(c.attempt())
	t.recordFinished(c)
	if c.code != codes.OK { // a failed call's reply carries nothing the tap reports
		c.resp.free(t.budget, false)
	} else if c.undecoded == "" && c.replyUndecoded != "" {
		c.giveUp(c.replyUndecoded, t.budget)
	}
	if c.buffer && c.undecoded == "" {
		c.checkMessages(t.budget)
	}
	if c.undecoded != "" {
		t.recorder.CallUndecoded(c.undecoded)
		return
	}
	if t.observer == nil || !t.wants(c.method) {
		c.free(t.budget)
		return
	}
	o := Observation{Method: c.method, Start: c.start, End: c.end, Code: c.code, Message: c.message}
	p := pending{obs: o, decode: c.buffer}
	if c.buffer {
		p.req, p.held = c.req.body, account{share: &tc.share, held: c.req.acct.held + c.resp.acct.held}
		if c.resp.started {
			p.resp = c.resp.body
		}
	}
	t.enqueue(p)
}

// checkMessages gives up on a call whose request, or reply once begun, is
// not a whole message.
func (c *call) checkMessages(b *budget) {
	if !c.req.done() || (c.resp.started && !c.resp.done()) {
		c.giveUp(UndecodedTruncated, b)
	}
}

// recordFinished times a finished call for the Recorder, once. Its start and
// end were read on the two relay goroutines, each before forwarding: a reply
// cannot be read before its request was, but the clamp keeps a histogram's
// sum from ever going down.
func (t *Tap) recordFinished(c *call) {
	t.recorder.CallFinished(c.method, c.code, max(c.end.Sub(c.start), 0))
}
