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
}

// Reasons a tap gives up on a connection. Bounded, used as metric labels.
const (
	AbandonNotHTTP2    = "not-http2"
	AbandonFraming     = "framing"
	AbandonCompression = "compression"
	AbandonOversized   = "oversized"
	AbandonPanic       = "panic"
)

// AbandonReasons lists every reason, so a metric can show each at zero
// before the first time it happens.
var AbandonReasons = []string{AbandonNotHTTP2, AbandonFraming, AbandonCompression, AbandonOversized, AbandonPanic}

// Tap turns relayed bytes into Observations. Each direction is parsed by its
// relay goroutine right after forwarding, only ever as far as the complete
// frames go, so the relay never waits for the tap; observations reach the
// Observer through a bounded queue served by a goroutine of its own.
type Tap struct {
	observer Observer
	recorder Recorder
	queue    chan Observation
	done     chan struct{}
	closeMu  sync.Once
}

// NewTap returns a tap delivering to o (may be nil) and recording to r (may
// be nil). queueSize bounds the observations waiting for o.
func NewTap(o Observer, r Recorder, queueSize int) *Tap {
	if queueSize <= 0 {
		queueSize = 1024
	}
	if r == nil {
		r = noRecorder{}
	}
	t := &Tap{observer: o, recorder: r, queue: make(chan Observation, queueSize), done: make(chan struct{})}
	go t.deliver()
	return t
}

// Close stops delivery once the queued observations are handed over. Every
// TapConn must be closed first.
func (t *Tap) Close() {
	t.closeMu.Do(func() { close(t.queue) })
	<-t.done
}

func (t *Tap) deliver() {
	defer close(t.done)
	for o := range t.queue {
		if t.observer != nil {
			t.safeObserve(o)
		}
	}
}

// safeObserve keeps a failing observer from taking the relay down with it.
func (t *Tap) safeObserve(o Observation) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("Observer panicked; observation lost", "err", fmt.Errorf("%v", p), "method", o.Method, "stack", string(debug.Stack()))
			t.recorder.ObservationDropped()
		}
	}()
	t.observer.Observe(o)
}

func (t *Tap) publish(o Observation) {
	t.recorder.CallFinished(o.Method, o.Code, o.End.Sub(o.Start))
	if t.observer == nil {
		return
	}
	select {
	case t.queue <- o:
	default:
		t.recorder.ObservationDropped()
	}
}

type noRecorder struct{}

func (noRecorder) CallFinished(string, codes.Code, time.Duration) {}
func (noRecorder) ConnectionTapped()                              {}
func (noRecorder) ConnectionAbandoned(string)                     {}
func (noRecorder) ObservationDropped()                            {}
