package sidecar

import (
	"encoding/base64"
	"math"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// How a grpc-go client (google.golang.org/grpc v1.85) reports a unary call
// for the bytes its server sent: the one place the tap re-states grpc-go's
// rules. Each rule names the grpc-go function it follows;
// TestTapDifferential compares the tap with grpc-go's own client over
// generated replies, and TestResetCodesAsGRPCGoMapsThem covers every
// RST_STREAM code.

// resetCode is the code grpc-go's client reports for a stream reset before
// its status: http2ErrConvTab (internal/transport/http_util.go) as
// handleRSTStream (internal/transport/http2_client.go) applies it, a code
// outside the table being Unknown. REFUSED_STREAM never gets here: grpc-go
// retries such a stream transparently, so it is no call (see call.onReset).
func resetCode(ec http2.ErrCode) codes.Code {
	switch ec {
	case http2.ErrCodeNo, http2.ErrCodeProtocol, http2.ErrCodeInternal, http2.ErrCodeSettingsTimeout,
		http2.ErrCodeStreamClosed, http2.ErrCodeFrameSize, http2.ErrCodeCompression, http2.ErrCodeConnect,
		http2.ErrCodeHTTP11Required:
		return codes.Internal
	case http2.ErrCodeFlowControl, http2.ErrCodeEnhanceYourCalm:
		return codes.ResourceExhausted
	case http2.ErrCodeRefusedStream:
		return codes.Unavailable
	case http2.ErrCodeCancel:
		return codes.Canceled
	case http2.ErrCodeInadequateSecurity:
		return codes.PermissionDenied
	}
	return codes.Unknown
}

// httpStatusCode is the code of a reply that is not gRPC (no gRPC
// content-type in its first header block): HTTPStatusConvTab
// (internal/transport/http_util.go) as operateHeaders applies it.
func httpStatusCode(status int) codes.Code {
	switch status {
	case 400:
		return codes.Internal
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.Unimplemented
	case 429, 502, 503, 504:
		return codes.Unavailable
	}
	return codes.Unknown
}

// validGRPCContentType is grpcutil.ContentSubtype's test: application/grpc,
// alone or followed by '+' or ';'.
func validGRPCContentType(v string) bool {
	const base = "application/grpc"
	return v == base || strings.HasPrefix(v, base) && (v[len(base)] == '+' || v[len(base)] == ';')
}

// validMetadata is decodeMetadataHeader's test (internal/transport/
// http_util.go): a "-bin" field must be base64, padded or not. gRPC's
// reserved fields are not metadata (isReservedHeader).
func validMetadata(name, value string) bool {
	if !strings.HasSuffix(name, "-bin") || reservedHeader(name) {
		return true
	}
	var err error
	if len(value)%4 == 0 {
		_, err = base64.StdEncoding.DecodeString(value)
	} else {
		_, err = base64.RawStdEncoding.DecodeString(value)
	}
	return err == nil
}

func reservedHeader(name string) bool {
	switch name {
	case "content-type", "user-agent", "grpc-message-type", "grpc-encoding", "grpc-message", "grpc-status", "grpc-timeout", "te":
		return true
	}
	return strings.HasPrefix(name, ":")
}

// grpcTimeout reads a grpc-timeout value as decodeTimeout does: 1 to 8
// digits and a unit, hours beyond what a Duration holds clamped to the
// longest one; ok is false for anything else (grpc-go's server would refuse
// the call; the tap then knows no deadline). unit is the value's unit, the
// precision the client wrote it with.
func grpcTimeout(s string) (d, unit time.Duration, ok bool) {
	if len(s) < 2 || len(s) > 9 {
		return 0, 0, false
	}
	if unit = timeoutUnit(s[len(s)-1]); unit == 0 {
		return 0, 0, false
	}
	var n uint64 // at most 8 digits: no overflow
	for i := 0; i < len(s)-1; i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, 0, false
		}
		n = n*10 + uint64(s[i]-'0')
	}
	if n > uint64(math.MaxInt64/unit) { // only hours get here: 8 digits of any other unit fit
		return math.MaxInt64, unit, true
	}
	return time.Duration(n) * unit, unit, true
}

// timeoutUnit is the duration of one of grpc-timeout's six units, 0 for
// any other byte.
func timeoutUnit(b byte) time.Duration {
	switch b {
	case 'H':
		return time.Hour
	case 'M':
		return time.Minute
	case 'S':
		return time.Second
	case 'm':
		return time.Millisecond
	case 'u':
		return time.Microsecond
	case 'n':
		return time.Nanosecond
	}
	return 0
}

// deadlineTransit is how long the tap allows between grpc-go's client
// reading its clock to write grpc-timeout and the request headers crossing
// the relay: the deadline the tap dates from those headers is at most this
// much later than the client's.
const deadlineTransit = time.Millisecond

// setDeadline keeps what deadlinePassed needs of a request's grpc-timeout.
// grpc-go's client writes the time left rounded up to its unit
// (encodeTimeout, http_util.go), and the tap dates it from when the headers
// crossed the relay, up to deadlineTransit after the client read its clock:
// a cancel earlier than one unit and that transit before the deadline so
// dated was the caller's, not the deadline's. The slack does not grow with
// the timeout: a cancel seconds before a long deadline stays Canceled.
func (c *call) setDeadline(grpcTimeoutHeader string) {
	timeout, unit, ok := grpcTimeout(grpcTimeoutHeader)
	c.hasDeadline = ok
	c.deadlineAfter = max(0, timeout-unit-deadlineTransit)
}

// deadlinePassed tells whether a stream cancelled at `at` was cancelled at
// its deadline, which grpc-go's client reports as DeadlineExceeded (its own
// RST_STREAM(CANCEL) when the deadline fires, handleRSTStream for the
// server's).
func (c *call) deadlinePassed(at time.Time) bool {
	return c.hasDeadline && !at.Before(c.start.Add(c.deadlineAfter))
}

// maxReceiveMessageBytes is grpc-go's default client limit on a received
// message (defaultClientMaxReceiveMessageSize); the kubernetes-csi sidecars
// keep it.
const maxReceiveMessageBytes = 4 << 20

// replyFraming follows the gRPC messages of a reply, for every call, as
// grpc-go's client reads a unary reply (parser.recvMsg, checkRecvPayload in
// rpc_util.go; clientStream's RecvMsg twice, stream.go): exactly one message,
// whose prefix announces at most maxReceiveMessageBytes and whose compressed
// flag matches the reply's grpc-encoding.
type replyFraming struct {
	prefix   [5]byte
	np       int
	left     uint32 // body bytes of the current message still to come
	messages int    // messages begun
}

// feed follows the next reply bytes; it returns the code and message of a
// violation grpc-go's client reports at once, or ok.
func (f *replyFraming) feed(p []byte, encoding string) (codes.Code, string, bool) {
	for len(p) > 0 {
		if f.left > 0 {
			k := min(uint32(len(p)), f.left)
			f.left, p = f.left-k, p[k:]
			continue
		}
		k := copy(f.prefix[f.np:], p)
		f.np, p = f.np+k, p[k:]
		if f.np < len(f.prefix) {
			break
		}
		f.np, f.messages = 0, f.messages+1
		f.left = uint32(f.prefix[1])<<24 | uint32(f.prefix[2])<<16 | uint32(f.prefix[3])<<8 | uint32(f.prefix[4])
		if f.left > maxReceiveMessageBytes {
			return codes.ResourceExhausted, "received message larger than max", false
		}
		if f.messages > 1 { // whole or cut short by the end, it is an error
			return codes.Internal, "cardinality violation: expected <EOF> for non server-streaming RPCs, but received another message", false
		}
		if code, msg, ok := checkPayloadFormat(f.prefix[0], encoding); !ok {
			return code, msg, false
		}
	}
	return codes.OK, "", true
}

// checkPayloadFormat is checkRecvPayload: 0 is plain, 1 compressed with the
// reply's grpc-encoding (which the client is taken to support: the tap
// cannot know what it registered), anything else an error.
func checkPayloadFormat(flag byte, encoding string) (codes.Code, string, bool) {
	switch flag {
	case 0:
		return codes.OK, "", true
	case 1:
		if encoding == "" || encoding == "identity" {
			return codes.Internal, "compressed flag set with identity or empty encoding", false
		}
		return codes.OK, "", true
	}
	return codes.Internal, "received unexpected payload format", false
}

// atEnd is the code a reply that ended with an OK status gets: Internal
// unless exactly one whole message came (recvMsg's cardinality check, or
// io.ErrUnexpectedEOF inside a message).
func (f *replyFraming) atEnd() (codes.Code, string) {
	switch {
	case f.np > 0 || f.left > 0:
		return codes.Internal, "unexpected EOF"
	case f.messages == 0:
		return codes.Internal, "cardinality violation: received no response message from non-server-streaming RPC"
	case f.messages > 1:
		return codes.Internal, "cardinality violation: expected <EOF> for non server-streaming RPCs, but received another message"
	}
	return codes.OK, ""
}
