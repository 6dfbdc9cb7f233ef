package sidecar

import (
	"encoding/binary"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// Reasons a call is counted but not handed to the Observer. Bounded, used as
// metric labels.
const (
	UndecodedTooLarge   = "too-large"  // a message over the tap's limit
	UndecodedCompressed = "compressed" // gRPC compression the tap cannot undo
	UndecodedMalformed  = "malformed"  // not a valid gRPC message or protobuf
	UndecodedTruncated  = "truncated"  // the stream ended inside a message
	UndecodedBudget     = "budget"     // the tap's shared buffer allowance was spent
	UndecodedStreams    = "streams"    // more calls at once on a connection than the tap follows
	UndecodedPanic      = "panic"      // decoding panicked
)

// UndecodedReasons lists every reason, so a metric can show each at zero.
var UndecodedReasons = []string{UndecodedTooLarge, UndecodedCompressed, UndecodedMalformed,
	UndecodedTruncated, UndecodedBudget, UndecodedStreams, UndecodedPanic}

// call is one gRPC stream. Its two halves are parsed by two goroutines that
// may get to it in either order, so whichever half completes it publishes it.
type call struct {
	method      string // canonical; "" until the request headers were parsed
	early       bool   // created by the driver's half before the request headers
	buffer      bool   // the messages are kept for decoding
	start, end  time.Time
	req, resp   message
	requestDone bool // the client sent END_STREAM
	reset       bool // either side reset the stream
	clientReset bool // the client reset it: nothing more comes from the client
	refused     bool // the driver refused it: the client retries it elsewhere
	statusKnown bool
	code        codes.Code
	message     string
	undecoded   string // why the messages cannot be decoded, "" while they can
}

// complete tells whether everything needed to publish the call is known.
func (c *call) complete() bool {
	if c.method == "" || !(c.statusKnown || c.refused) {
		return false
	}
	return c.requestDone || c.clientReset || (c.reset && !c.awaitsRequest())
}

// awaitsRequest tells whether a call the driver reset still waits for its
// request: the client's bytes sent before the reset are parsed by the other
// goroutine and may reach the tap after it.
func (c *call) awaitsRequest() bool {
	return c.buffer && c.undecoded == "" && !c.req.done()
}

// open applies the request headers; wanted tells whether the observer
// takes the method's calls.
func (c *call) open(h *headerBlock, at time.Time, b *budget, wanted func(string) bool) {
	c.method, c.start, c.early = CanonicalMethod(h.path), at, false
	c.req.method = c.method
	c.requestDone = c.requestDone || h.endStream
	if !decodes(c.method) || !wanted(c.method) {
		c.buffer = false
		c.resp.free(b, false)
	}
}

// onResponseHeaders handles both the response headers and the trailers, as
// grpc-go reads them: the status is known when grpc-status arrives; a reply
// that ends without one is Unknown, an unparsable one Internal.
func (c *call) onResponseHeaders(h *headerBlock, at time.Time) {
	if h.hasMessage {
		c.message = decodeGRPCMessage(h.message)
	}
	if !h.hasStatus && !h.endStream {
		return
	}
	code := codes.Unknown
	if h.hasStatus {
		if v, err := strconv.ParseInt(h.status, 10, 32); err == nil {
			code = codes.Code(v)
		} else {
			code, c.message = codes.Internal, fmt.Sprintf("malformed grpc-status %q", h.status)
		}
	}
	c.setStatus(code, at)
}

func (c *call) setStatus(code codes.Code, at time.Time) {
	if !c.statusKnown {
		c.code, c.statusKnown, c.end = code, true, at
	}
}

// onData buffers a message's bytes when the call's method is decoded.
func (c *call) onData(p []byte, fromClient bool, b *budget) {
	if !c.buffer || c.undecoded != "" {
		return
	}
	m := &c.resp
	if fromClient {
		m = &c.req
	}
	if reason := m.feed(p, b); reason != "" {
		c.giveUp(reason, b)
	}
}

// giveUp stops buffering the call's messages and says why.
func (c *call) giveUp(reason string, b *budget) {
	c.undecoded, c.buffer = reason, false
	c.free(b)
}

func (c *call) free(b *budget) {
	c.req.free(b, true)
	c.resp.free(b, false)
}

// rstCodes is how grpc-go reports a stream reset to its caller
// (http2ErrConvTab in its transport); REFUSED_STREAM is absent on purpose:
// grpc-go retries such a call transparently, so it is no driver's answer.
var rstCodes = map[http2.ErrCode]codes.Code{
	http2.ErrCodeCancel:             codes.Canceled,
	http2.ErrCodeFlowControl:        codes.ResourceExhausted,
	http2.ErrCodeEnhanceYourCalm:    codes.ResourceExhausted,
	http2.ErrCodeInadequateSecurity: codes.PermissionDenied,
}

// onReset ends the call with the code grpc-go reports to a caller whose
// stream was reset, unless the status had already arrived.
func (c *call) onReset(ec http2.ErrCode, fromClient bool, at time.Time) {
	c.reset, c.clientReset = true, c.clientReset || fromClient
	if c.statusKnown {
		return
	}
	if ec == http2.ErrCodeRefusedStream && !fromClient {
		c.refused = true
		return
	}
	code, ok := rstCodes[ec]
	if !ok {
		code = codes.Internal
	}
	who := "driver"
	if fromClient {
		who = "client"
	}
	c.setStatus(code, at)
	c.message = fmt.Sprintf("stream reset by %s: %v", who, ec)
}

// decodeGRPCMessage undoes gRPC's percent-encoding of grpc-message.
func decodeGRPCMessage(s string) string {
	if m, err := url.PathUnescape(s); err == nil {
		return m
	}
	return s
}

// message buffers the first gRPC message of one half of a call: the 5-byte
// prefix, then exactly the body it announces (reserved from the budget in
// one piece); later bytes of the stream are not kept.
type message struct {
	prefix  [5]byte
	np      int
	started bool
	body    []byte
	got     int // body bytes taken, kept or not
	want    int
	held    int64
	// filter, set for a request, keeps only the fields the tap decodes;
	// body is what it kept once the message is whole.
	filter *fieldFilter
	method string // a request's method, which chooses its filter
}

func (m *message) done() bool { return m.np == len(m.prefix) && m.got == m.want }

// feed takes the next bytes of the stream; it returns an undecoded reason
// when the message cannot be kept.
func (m *message) feed(p []byte, b *budget) string {
	m.started = m.started || len(p) > 0
	for len(p) > 0 && !m.done() {
		if m.np < len(m.prefix) {
			k := copy(m.prefix[m.np:], p)
			m.np, p = m.np+k, p[k:]
			if m.np == len(m.prefix) {
				if reason := m.reserve(b); reason != "" {
					return reason
				}
			}
			continue
		}
		k := min(len(p), m.want-m.got)
		if m.filter != nil {
			m.filter.write(p[:k])
		} else {
			m.body = append(m.body, p[:k]...)
		}
		m.got, p = m.got+k, p[k:]
	}
	if m.filter != nil && m.done() {
		return m.filtered()
	}
	return ""
}

// filtered takes the filter's message as the body.
func (m *message) filtered() string {
	body, err := m.filter.finish()
	m.filter = nil
	if err != nil {
		return UndecodedMalformed
	}
	m.body = body
	return ""
}

// reserve checks the prefix and takes the body's bytes from the budget.
func (m *message) reserve(b *budget) string {
	switch m.prefix[0] {
	case 0:
	case 1:
		return UndecodedCompressed
	default:
		return UndecodedMalformed
	}
	n := binary.BigEndian.Uint32(m.prefix[1:])
	if n > maxMessageBytes {
		return UndecodedTooLarge
	}
	size := bufferSize(int(n))
	if !b.take(int64(size)) {
		return UndecodedBudget
	}
	m.want, m.held = int(n), int64(size)
	if dec, ok := decoders[m.method]; ok {
		m.filter = newFieldFilter(dec, int(n))
	} else {
		m.body = getBuffer(int(n))
	}
	return ""
}

// free returns the message's bytes to the budget and its buffer to the
// pool; wipe clears it first (a request's secrets).
func (m *message) free(b *budget, wipe bool) {
	b.give(m.held)
	putBuffer(m.body, wipe)
	if m.filter != nil {
		putBuffer(m.filter.out, wipe)
	}
	*m = message{}
}
