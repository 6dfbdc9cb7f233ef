package sidecar

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
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

// call is one gRPC stream; whichever half's frame completes it publishes it.
type call struct {
	method      string // canonical; "" until the request headers were parsed
	buffer      bool   // the messages are kept for decoding
	start, end  time.Time
	req, resp   message
	requestDone bool // the client sent END_STREAM
	reset       bool // either side reset the stream
	clientReset bool // the client reset it: nothing more comes from the client
	refused     bool // the driver refused it (retries.go says whether the client retries it)
	shape       requestShape
	statusKnown bool
	code        codes.Code
	message     string
	undecoded   string // why the messages cannot be decoded, "" while they can
	// replyUndecoded is why the reply cannot be decoded: the call's reason
	// only if it succeeds.
	replyUndecoded string
	// What grpc-go's client keeps of the call to judge its status
	// (grpcstatus.go): from the request's grpc-timeout, when a cancel is
	// the deadline's; whether response headers came and their
	// grpc-encoding, and the reply's gRPC messages.
	deadlineAfter time.Duration
	hasDeadline   bool
	replyStarted  bool
	encoding      string
	reply         replyFraming
	// filter is the request's (message.filter), part of the record, which
	// a connection recycles: a call allocates none.
	filter fieldFilter
}

// complete tells whether everything needed to publish the call is known.
func (c *call) complete() bool {
	if c.method == "" || !(c.statusKnown || c.refused) {
		return false
	}
	if c.refused { // whether grpc-go retries it depends on the request's size
		return c.shape.known() || c.requestDone || c.clientReset
	}
	return c.requestDone || c.clientReset || (c.reset && !c.awaitsRequest())
}

// awaitsRequest tells whether a call the driver reset still waits for its
// request: the client sends on until it reads the reset, so the relay may
// read the rest of the request after it.
func (c *call) awaitsRequest() bool {
	return c.buffer && c.undecoded == "" && !c.req.done()
}

// open applies the request headers; wanted tells whether the observer
// takes the method's calls.
func (c *call) open(h *headerBlock, at time.Time, b *budget, wanted func(string) bool) {
	c.method, c.start = CanonicalMethod(h.path), at
	c.setDeadline(h.timeout)
	c.req.method = c.method
	c.requestDone = c.requestDone || h.endStream
	if !decodes(c.method) || !wanted(c.method) {
		c.buffer = false
		c.resp.free(b, false)
	}
}

// onResponseHeaders handles both the response headers and the trailers as
// grpc-go's client does (operateHeaders, http2_client.go): once the stream
// has a status nothing changes it; a second block without END_STREAM is an
// error; a malformed grpc-status is Unknown; a first block without a gRPC
// content-type is judged by its :status; a "-bin" field that is not base64
// is Internal; the status is that of the block that ends the stream.
func (c *call) onResponseHeaders(h *headerBlock, at time.Time) {
	switch {
	case c.statusKnown:
	case c.replyStarted && !h.endStream:
		c.fail(codes.Internal, "a HEADERS frame cannot appear in the middle of a stream", at)
	case h.badStatus:
		c.fail(codes.Unknown, "malformed grpc-status", at)
	case !c.replyStarted && !h.grpcContent:
		c.notGRPC(h, at)
	case h.badMetadata:
		c.fail(codes.Internal, "malformed metadata", at)
	case !h.endStream:
		c.replyStarted, c.encoding = true, h.encoding
	default:
		c.finalStatus(h, at)
	}
}

// finalStatus applies the block that ends the stream: its grpc-status
// (Unknown without one) and grpc-message; an OK status also needs exactly
// one whole reply message (csAttempt.recvMsg, stream.go).
func (c *call) finalStatus(h *headerBlock, at time.Time) {
	code, msg := codes.Unknown, decodeGRPCMessage(h.message)
	if h.hasStatus {
		code = h.status
	}
	if code == codes.OK {
		code, msg = c.reply.atEnd()
	}
	c.fail(code, msg, at)
}

// notGRPC judges a reply whose first header block has no gRPC content-type
// by its :status (operateHeaders' !isGRPC branch); an informational one
// without END_STREAM is skipped. A reply that goes on gets its code now
// (grpc-go gives the same one when the stream ends).
func (c *call) notGRPC(h *headerBlock, at time.Time) {
	if !h.hasHTTPStatus {
		c.fail(codes.Internal, "malformed header: missing HTTP status", at)
		return
	}
	st, err := strconv.Atoi(h.httpStatus)
	switch {
	case err != nil:
		c.fail(codes.Internal, "malformed http-status", at)
	case st >= 100 && st < 200:
		if h.endStream {
			c.fail(codes.Internal, "informational header with END_STREAM", at)
		}
	default:
		c.fail(httpStatusCode(st), fmt.Sprintf("unexpected HTTP status code received from server: %d", st), at)
	}
}

// fail ends the call with code and message unless its status is known. A
// message is kept to maxStatusMessageBytes (a driver may send 256 KiB of
// it, and every call record of every connection may hold one).
func (c *call) fail(code codes.Code, msg string, at time.Time) {
	if !c.statusKnown {
		c.setStatus(code, at)
		if len(msg) > maxStatusMessageBytes {
			msg = strings.ToValidUTF8(msg[:maxStatusMessageBytes], "")
		}
		c.message = msg
	}
}

// refuse marks a stream the driver did not process; the messages are let
// go at once, whether or not the client retries it.
func (c *call) refuse(at time.Time, b *budget) {
	c.refused, c.buffer, c.end = true, false, at
	c.free(b)
}

// attempt is the call as grpc-go's retry rule sees it (retries.go).
func (c *call) attempt() attempt {
	return attempt{method: c.method, sig: c.shape.signature(), start: c.start, end: c.end}
}

func (c *call) setStatus(code codes.Code, at time.Time) {
	if !c.statusKnown {
		c.code, c.statusKnown, c.end = code, true, at
	}
}

// onReplyData follows the reply's messages as grpc-go's client reads them,
// and a DATA frame that ends the stream, which must end with trailers
// (handleData, http2_client.go).
func (c *call) onReplyData(p []byte, end bool, at time.Time) {
	if c.statusKnown {
		return
	}
	if code, msg, ok := c.reply.feed(p, c.encoding); !ok {
		c.fail(code, msg, at)
	}
	if end {
		c.fail(codes.Internal, "server closed the stream without sending trailers", at)
	}
}

// onData buffers a message's bytes when the call's method is decoded.
func (c *call) onData(p []byte, fromClient bool, b *budget) {
	if !c.buffer || c.undecoded != "" {
		return
	}
	if fromClient {
		if reason := c.req.feed(p, b); reason != "" {
			c.giveUp(reason, b)
		}
		return
	}
	if c.replyUndecoded != "" {
		return
	}
	// A reply that cannot be decoded matters only if the call succeeds (a
	// failed call's reply is never decoded): the request is still kept.
	if reason := c.resp.feed(p, b); reason != "" {
		c.replyUndecoded = reason
		c.resp.free(b, false)
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

// onReset ends the call with the code grpc-go reports to a caller whose
// stream was reset, unless the status had already arrived. A cancel at the
// call's deadline is DeadlineExceeded: grpc-go's client cancels its stream
// when the deadline fires, and reports a server's cancel after it so
// (handleRSTStream). The driver's REFUSED_STREAM makes the call no call:
// grpc-go retries it transparently; nothing of it is kept.
func (c *call) onReset(ec http2.ErrCode, fromClient bool, at time.Time, b *budget) {
	c.reset, c.clientReset = true, c.clientReset || fromClient
	if c.statusKnown {
		return
	}
	if ec == http2.ErrCodeRefusedStream && !fromClient {
		c.refuse(at, b)
		return
	}
	code := resetCode(ec)
	if code == codes.Canceled && c.deadlinePassed(at) {
		code = codes.DeadlineExceeded
	}
	c.fail(code, "stream terminated by RST_STREAM with error code: "+ec.String(), at)
}

// decodeGRPCMessage undoes gRPC's percent-encoding of grpc-message as
// grpc-go does (decodeGrpcMessage, http_util.go): a '%' followed by two hex
// digits is a byte, anything else stays as it is.
func decodeGRPCMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// message buffers the first gRPC message of one half of a call: the 5-byte
// prefix, then the body it announces, reserved from the budget as it
// arrives (a prefix announcing 4 MiB holds nothing until they come); later
// bytes of the stream are not kept.
type message struct {
	prefix  [5]byte
	np      int
	started bool
	body    []byte
	got     int // body bytes taken, kept or not
	want    int
	acct    account
	// filter, set for a request, keeps only the fields the tap decodes;
	// body is what it kept once the message is whole. It is space, the
	// record's filter (nil when the record has none).
	filter *fieldFilter
	space  *fieldFilter
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
			if m.filter.overBudget {
				return UndecodedBudget
			}
		} else {
			if !m.room(k, b) {
				return UndecodedBudget
			}
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
	*m.filter = fieldFilter{}
	m.filter = nil
	if err != nil {
		return UndecodedMalformed
	}
	m.body = body
	return ""
}

// room makes room in the body for k more bytes, growing it (at least
// twice, at most to the message's size) with budget.
func (m *message) room(k int, b *budget) bool {
	need := len(m.body) + k
	if need <= cap(m.body) {
		return true
	}
	size := bufferSize(min(max(need, 2*cap(m.body)), m.want))
	if !m.acct.grow(b, int64(size-cap(m.body))) {
		return false
	}
	grown := append(getBuffer(size), m.body...)
	putBuffer(m.body, true)
	m.body = grown
	return true
}

// reserve checks the prefix and prepares for the body; its bytes are taken
// from the budget as they come.
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
	m.want = int(n)
	if dec, ok := decoders[m.method]; ok {
		if m.filter = m.space; m.filter == nil {
			m.filter = new(fieldFilter)
		}
		m.filter.init(dec, int(n), &m.acct, b)
		if m.filter.overBudget {
			return UndecodedBudget
		}
	}
	return ""
}

// free returns the message's bytes to the budget and its buffer to the
// pool; wipe clears it first (a request's secrets).
func (m *message) free(b *budget, wipe bool) {
	m.acct.release(b)
	putBuffer(m.body, wipe)
	if m.filter != nil {
		putBuffer(m.filter.out, wipe)
		*m.filter = fieldFilter{}
	}
	*m = message{acct: account{share: m.acct.share}, space: m.space}
}
