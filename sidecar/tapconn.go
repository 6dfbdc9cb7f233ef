package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

const (
	// maxMessageBytes bounds what is buffered for one call's message; CSI
	// controller messages are tiny, larger ones are relayed but not decoded.
	maxMessageBytes = 4 << 20
	// hpackTableBytes is deliberately larger than any table size a peer can
	// negotiate by default: entries are indexed newest first, so a decoder
	// with a larger table resolves every index the encoder can send.
	hpackTableBytes = 1 << 20
)

// TapConn follows one relayed connection: one parser per direction, each
// run by that direction's relay goroutine, sharing the calls in flight.
type TapConn struct {
	tap       *Tap
	abandoned atomic.Bool
	client    *direction
	driver    *direction

	mu    sync.Mutex
	calls map[uint32]*call
}

// call is one gRPC stream. Its two halves are parsed by two goroutines that
// may get to it in either order, so whichever half completes it publishes it.
type call struct {
	method      string
	start, end  time.Time
	req, resp   []byte
	tooLarge    bool
	requestDone bool // the client sent END_STREAM
	reset       bool // either side reset the stream
	statusKnown bool
	code        codes.Code
	message     string
}

// complete tells whether everything needed to publish the call is known.
func (c *call) complete() bool {
	return c.statusKnown && c.method != "" && (c.requestDone || c.reset)
}

// NewConn starts following a new relayed connection.
func (t *Tap) NewConn() *TapConn {
	tc := &TapConn{tap: t, calls: map[uint32]*call{}}
	tc.client = newDirection(tc, true)
	tc.driver = newDirection(tc, false)
	t.recorder.ConnectionTapped()
	return tc
}

// FromClient is the sink for bytes the client sent to the driver.
func (tc *TapConn) FromClient() byteSink { return tc.client }

// FromDriver is the sink for bytes the driver sent to the client.
func (tc *TapConn) FromDriver() byteSink { return tc.driver }

// Close ends the connection's parsing; both sinks must no longer be fed.
// Calls still open when a connection ends are reported as Unavailable:
// that is what the client got.
func (tc *TapConn) Close() {
	if tc.abandoned.Load() {
		return
	}
	tc.mu.Lock()
	open := tc.calls
	tc.calls = nil
	tc.mu.Unlock()
	now := time.Now()
	for _, c := range open {
		if c.method == "" {
			continue // only a stray response half: nothing to report
		}
		if !c.statusKnown {
			c.code, c.message, c.end = codes.Unavailable, "connection closed before the call finished", now
		}
		tc.publish(c)
	}
}

// abandon stops following the connection for good; the relay is unaffected.
func (tc *TapConn) abandon(reason string, err error) {
	if tc.abandoned.Swap(true) {
		return
	}
	slog.Info("Tap gave up on a connection; relaying continues untapped", "reason", reason, "err", err)
	tc.tap.recorder.ConnectionAbandoned(reason)
}

// onFrame applies one DATA or RST_STREAM frame to the calls in flight and
// publishes the call it completes, if any.
func (tc *TapConn) onFrame(f http2.Frame, fromClient bool, at time.Time) error {
	return tc.update(f.Header().StreamID, func(c *call) {
		switch f := f.(type) {
		case *http2.DataFrame:
			c.onData(f, fromClient)
		case *http2.RSTStreamFrame:
			c.onReset(f.ErrCode, fromClient, at)
		}
	})
}

// onHeaders applies one decoded header block, as onFrame does a frame.
func (tc *TapConn) onHeaders(h *headerBlock, fromClient bool, at time.Time) error {
	return tc.update(h.streamID, func(c *call) {
		if fromClient {
			c.onRequestHeaders(h, at)
		} else {
			c.onResponseHeaders(h, at)
		}
	})
}

// update applies apply to stream id's call and publishes the call if that
// completed it.
func (tc *TapConn) update(id uint32, apply func(*call)) error {
	if id == 0 {
		return nil
	}
	tc.mu.Lock()
	c := tc.calls[id]
	if c == nil {
		c = &call{}
		tc.calls[id] = c
	}
	apply(c)
	done := c.complete()
	if done {
		delete(tc.calls, id)
	}
	tc.mu.Unlock()
	if !done {
		return nil
	}
	return tc.publish(c)
}

func (c *call) onRequestHeaders(h *headerBlock, at time.Time) {
	c.method, c.start = h.path, at
	c.requestDone = c.requestDone || h.endStream
}

// onResponseHeaders handles both the response headers and the trailers; the
// status is known when grpc-status arrives (trailers, or a trailers-only reply).
func (c *call) onResponseHeaders(h *headerBlock, at time.Time) {
	if h.hasStatus {
		code, err := strconv.ParseUint(h.status, 10, 32)
		if err != nil {
			code = uint64(codes.Unknown)
		}
		c.code, c.statusKnown, c.end = codes.Code(code), true, at
	}
	if h.hasMessage {
		c.message = decodeGRPCMessage(h.message)
	}
}

func (c *call) onData(f *http2.DataFrame, fromClient bool) {
	dst := &c.resp
	if fromClient {
		dst = &c.req
		c.requestDone = c.requestDone || f.StreamEnded()
	}
	data := f.Data()
	if len(*dst)+len(data) > maxMessageBytes {
		c.tooLarge = true
		return
	}
	*dst = append(*dst, data...)
}

// onReset ends the call with the code grpc-go reports to a caller whose
// stream was reset, unless the status had already arrived.
func (c *call) onReset(ec http2.ErrCode, fromClient bool, at time.Time) {
	c.reset = true
	if c.statusKnown {
		return
	}
	code, who := codes.Internal, "driver"
	if fromClient {
		who = "client"
	}
	switch ec {
	case http2.ErrCodeCancel:
		code = codes.Canceled
	case http2.ErrCodeRefusedStream:
		code = codes.Unavailable
	}
	c.code, c.statusKnown, c.end = code, true, at
	c.message = fmt.Sprintf("stream reset by %s: %v", who, ec)
}

// publish decodes the call's messages and hands the observation to the tap.
// Compression cannot be followed, so it ends tapping rather than publish a
// guess; other decoding trouble publishes the call without its fields.
func (tc *TapConn) publish(c *call) error {
	o := Observation{Method: c.method, Start: c.start, End: c.end, Code: c.code, Message: c.message}
	if !c.tooLarge {
		if err := decodeCall(&o, c.req, c.resp); err != nil {
			if errors.Is(err, errCompressed) {
				return err
			}
			slog.Debug("Tap could not decode a call; publishing it without fields", "method", c.method, "err", err)
		}
	}
	tc.tap.publish(o)
	return nil
}

// decodeGRPCMessage undoes gRPC's percent-encoding of grpc-message.
func decodeGRPCMessage(s string) string {
	if m, err := url.PathUnescape(s); err == nil {
		return m
	}
	return s
}
