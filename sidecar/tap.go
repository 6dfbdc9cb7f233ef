package sidecar

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// Recorder receives what the tap measures, for metrics. Every method must be
// fast and must not block: it runs on the relay's goroutines, after the
// bytes were forwarded.
type Recorder interface {
	// CallFinished records one finished CSI call of any method.
	CallFinished(method string, code codes.Code, d time.Duration)
	// ConnectionTapped records a relayed connection the tap started to follow.
	ConnectionTapped()
	// ConnectionAbandoned records a connection the tap stopped following
	// (the relay goes on); reason is a short bounded word.
	ConnectionAbandoned(reason string)
	// ObservationDropped records an observation lost because the queue to the
	// Observer was full.
	ObservationDropped()
	// CallUndecoded records a finished call of a decoded method whose
	// messages could not be decoded (reason is one of UndecodedReasons);
	// it is not handed to the Observer.
	CallUndecoded(reason string)
}

// Reasons a tap gives up on a connection. Bounded, used as metric labels.
const (
	AbandonNotHTTP2  = "not-http2"
	AbandonFraming   = "framing"
	AbandonOversized = "oversized"
	AbandonPanic     = "panic"
	AbandonBacklog   = "backlog"
)

// AbandonReasons lists every reason, so a metric can show each at zero
// before the first time it happens.
var AbandonReasons = []string{AbandonNotHTTP2, AbandonFraming, AbandonOversized, AbandonPanic, AbandonBacklog}

// Tap turns relayed bytes into Observations. Each relayed connection has
// one parser goroutine of its own, fed by both relay goroutines in the
// order they read (handoff), only ever as far as the complete frames go,
// so the relay never waits for the tap. Finished calls reach a goroutine
// of the tap's own through a bounded queue; it decodes their messages and
// hands them to the Observer, so neither a large message nor a slow
// Observer holds up a relayed byte.
type Tap struct {
	observer Observer
	recorder Recorder
	// buffers is false when nobody reads the decoded fields: then no
	// message is kept at all.
	buffers bool
	// wants tells which methods' calls the observer takes.
	wants  func(string) bool
	budget *budget
	// handoffBytes is what every connection's relayed bytes waiting for
	// their parser may hold together.
	handoffBytes *allowance
	// retries are the refused first attempts waiting for grpc-go's retry.
	retries retryBook
	queue   chan pending
	done    chan struct{}
	closeMu sync.Once

	// abandonLog keeps a client that opens connection after connection
	// the tap cannot follow from writing a log line each.
	abandonLog *logThrottle
}

// pending is a finished call on its way to the Observer, with the raw
// messages still to decode (and the budget bytes they hold).
type pending struct {
	obs       Observation
	decode    bool
	req, resp []byte
	held      account // both messages' budget bytes
	reqWiped  bool    // the request's secrets were zeroed in place
}

// release returns the raw messages' buffers (the request's wiped) and
// budget; a second call does nothing.
func (p *pending) release(b *budget) {
	putBuffer(p.req, !p.reqWiped)
	putBuffer(p.resp, false)
	p.held.release(b)
	p.req, p.resp = nil, nil
}

// NewTap returns a tap delivering to o (may be nil) and recording to r (may
// be nil). queueSize bounds the observations waiting for o.
func NewTap(o Observer, r Recorder, queueSize int) *Tap {
	if queueSize <= 0 {
		queueSize = defaultQueueSize
	}
	if r == nil {
		r = noRecorder{}
	}
	t := &Tap{observer: o, recorder: r, buffers: hasObserver(o), wants: observes(o), budget: newBudget(maxBufferedBytes), handoffBytes: newAllowance(maxHandoffTotalBytes),
		queue: make(chan pending, queueSize), done: make(chan struct{}), abandonLog: newLogThrottle(abandonLogInterval)}
	t.retries.failed = func(a attempt) {
		t.recorder.CallFinished(a.method, codes.Unavailable, max(a.end.Sub(a.start), 0))
	}
	go t.deliver()
	return t
}

// Close stops delivery once the queued observations are handed over. Every
// TapConn must be closed first.
func (t *Tap) Close() {
	t.retries.close()
	t.closeMu.Do(func() { close(t.queue) })
	<-t.done
}

func hasObserver(o Observer) bool {
	if os, ok := o.(Observers); ok {
		return len(os) > 0
	}
	return o != nil
}

func (t *Tap) deliver() {
	defer close(t.done)
	for p := range t.queue {
		t.handOver(p)
	}
}

// handOver decodes one call and gives it to the Observer.
func (t *Tap) handOver(p pending) {
	defer p.release(t.budget)
	if p.decode && !t.safeDecode(&p) {
		return
	}
	if t.observer != nil {
		t.safeObserve(p.obs)
	}
}

// safeDecode fills the observation's fields from the raw messages; a
// failure, even a panic, loses that one observation, counted.
func (t *Tap) safeDecode(p *pending) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			slog.Error("Tap panicked decoding a call; observation lost",
				"err", fmt.Errorf("%v", r), "method", p.obs.Method, "stack", string(debug.Stack()))
			t.recorder.CallUndecoded(UndecodedPanic)
			ok = false
		}
	}()
	wiped, err := decodeCall(&p.obs, p.req, p.resp)
	p.reqWiped = wiped
	p.release(t.budget) // the raw request, secrets included, goes now
	if err != nil {
		slog.Debug("Tap could not decode a call", "method", p.obs.Method, "err", err)
		t.recorder.CallUndecoded(UndecodedMalformed)
		return false
	}
	return true
}

// enqueue queues a finished call for decoding, or drops it (counted) when
// the queue is full: the relay never waits for the Observer.
func (t *Tap) enqueue(p pending) {
	select {
	case t.queue <- p:
	default:
		p.release(t.budget)
		t.recorder.ObservationDropped()
	}
}

type noRecorder struct{}

func (noRecorder) CallFinished(string, codes.Code, time.Duration) {}
func (noRecorder) ConnectionTapped()                              {}
func (noRecorder) ConnectionAbandoned(string)                     {}
func (noRecorder) ObservationDropped()                            {}
func (noRecorder) CallUndecoded(string)                           {}

// safeObserve keeps a failing observer from taking the tap down with it.
func (t *Tap) safeObserve(o Observation) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("Observer panicked; observation lost", "err", fmt.Errorf("%v", p), "method", o.Method, "stack", string(debug.Stack()))
			t.recorder.ObservationDropped()
		}
	}()
	t.observer.Observe(o)
}
