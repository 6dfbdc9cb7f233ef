package sidecar

import "sync/atomic"

// Memory the tap may hold. Together they give HeldBytesBound; change them
// together with the README's "Memory" paragraph.
const (
	// maxMessageBytes bounds one buffered gRPC message. CSI controller
	// requests and replies the tap decodes are a few KiB; a larger one is
	// relayed and counted as undecoded, not buffered.
	maxMessageBytes = 4 << 20
	// maxBufferedBytes bounds every buffered message of every connection
	// together, including those waiting in the queue to be decoded.
	maxBufferedBytes = 32 << 20
	// maxConnBufferedBytes bounds what the messages of one connection hold
	// of it (those waiting in the queue included): two messages of the
	// largest size.
	maxConnBufferedBytes = 2 * maxMessageBytes
	// reservedBufferedBytes is the part of maxBufferedBytes kept for
	// connections holding at most smallHoldingBytes, so that any number of
	// connections stalled with large messages cannot leave the others
	// nothing: large holdings together stop at the reserve, and it takes
	// more than reservedBufferedBytes/smallHoldingBytes (64) other
	// connections stalled at their small holding to spend it.
	reservedBufferedBytes = maxBufferedBytes / 2
	// smallHoldingBytes is what a connection may hold from the reserve:
	// the CSI messages the tap decodes are a few KiB.
	smallHoldingBytes = 256 << 10
	// maxFrameBytes is the largest frame the tap follows. gRPC peers send
	// 16 KiB frames; a peer sending larger ones than this is relayed
	// untapped rather than buffered.
	maxFrameBytes = 256 << 10
	// maxHeaderBlockBytes bounds a HEADERS frame plus its CONTINUATIONs
	// (gRPC metadata of a CSI call is well under 1 KiB).
	maxHeaderBlockBytes = 256 << 10
	// defaultHeaderTableBytes is HTTP/2's initial SETTINGS_HEADER_TABLE_SIZE:
	// the size of every HPACK table until a peer says otherwise.
	defaultHeaderTableBytes = 4096
	// headerTableFloorBytes is the size an encoder's size update may name
	// even before the tap has seen the SETTINGS that allowed it: the
	// SETTINGS travel the other way, parsed by another goroutine, and may
	// reach the tap after the header block that relies on them.
	headerTableFloorBytes = 64 << 10
	// maxHeaderTableBytes bounds a decoder table however much a peer
	// advertises; a larger size update abandons the connection's tap.
	maxHeaderTableBytes = 256 << 10
	// relayBufferBytes is the copy buffer of each relayed direction.
	relayBufferBytes = 64 << 10
	// maxCallsPerConn bounds the calls followed at once on one connection.
	// The kubernetes-csi sidecars run at most a few hundred workers.
	maxCallsPerConn = 1024
	// maxEarlyCalls bounds the calls the tap follows from the driver's side
	// before it has parsed the client's request headers (the two directions
	// are parsed by two goroutines, so a fast reply can overtake them).
	maxEarlyCalls = 64
	// maxSpareCalls bounds the emptied call records a connection keeps for
	// its next calls.
	maxSpareCalls = 16
	// maxLostReplies bounds the streams whose early driver frames found no
	// record (tapconn.go): a relay read of 64 KiB holds at most about 7,000
	// request HEADERS frames the driver may answer before the tap parsed
	// them, so more means a driver speaking of streams nobody opened.
	maxLostReplies = 8192
	// maxStatusMessageBytes bounds the grpc-message a call record or a
	// queued observation keeps; the rest is cut off.
	maxStatusMessageBytes = 1024
	// defaultQueueSize is the observations that may wait for the Observer
	// unless configured otherwise (the sidecar's --observation-queue).
	defaultQueueSize = 1024
)

// HeldBytesBound returns the most memory, in bytes, the relay and its tap
// hold for the given number of open connections and calls in flight on each:
// per connection two relay buffers and maxSpareCalls emptied call records;
// per direction the bytes of an incomplete frame or header block (at most
// twice their limits, as a slice grows), an assembled header block and one
// HPACK table; per call a small record with at most maxStatusMessageBytes of
// status message;
// the numbers of the streams whose early replies found no record (at most
// maxLostReplies); the observations queued for the Observer (the default
// queue of defaultQueueSize, each with its message); and every buffered
// message of all connections together, at most maxBufferedBytes. Only
// messages of the methods the tap decodes are buffered (never a ListVolumes
// reply, for instance). Against well-behaved gRPC peers (16 KiB frames,
// 4 KiB tables) a direction holds about 40 KiB, not this worst case.
func HeldBytesBound(connections, callsPerConn int) int64 {
	const callRecordBytes = 512 + maxStatusMessageBytes
	const lostStreamBytes = 16 // a map entry of a uint32
	perDirection := int64(2*(maxFrameBytes+maxHeaderBlockBytes) + maxHeaderBlockBytes + maxHeaderTableBytes)
	perConn := 2*int64(relayBufferBytes) + maxSpareCalls*callRecordBytes + 2*perDirection + maxLostReplies*lostStreamBytes +
		int64(min(callsPerConn, maxCallsPerConn+maxEarlyCalls))*callRecordBytes
	queued := int64(defaultQueueSize) * callRecordBytes
	return int64(connections)*perConn + queued + maxBufferedBytes
}

// budget is the shared allowance of buffered message bytes.
type budget struct{ left atomic.Int64 }

func newBudget(n int64) *budget {
	b := &budget{}
	b.left.Store(n)
	return b
}

// share is what one connection's messages hold of the budget.
type share struct{ held atomic.Int64 }

// take reserves n bytes for a message of the connection s, or reports
// that they are not available: the budget is spent (down to its reserve
// for a connection holding more than smallHoldingBytes), or the connection
// holds its most already.
func (b *budget) take(s *share, n int64) bool {
	held := s.held.Add(n)
	if held > maxConnBufferedBytes {
		s.held.Add(-n)
		return false
	}
	var floor int64
	if held > smallHoldingBytes {
		floor = reservedBufferedBytes
	}
	if b.left.Add(-n) >= floor {
		return true
	}
	b.left.Add(n)
	s.held.Add(-n)
	return false
}

// give returns n bytes taken earlier for a message of s.
func (b *budget) give(s *share, n int64) {
	if n != 0 {
		s.held.Add(-n)
		b.left.Add(n)
	}
}

// account is what one message holds of the budget, reserved as its bytes
// arrive (a message prefix alone holds nothing), and its connection's share.
type account struct {
	share *share
	held  int64
}

// grow reserves n more bytes, or reports that they are not available.
func (a *account) grow(b *budget, n int64) bool {
	if !b.take(a.share, n) {
		return false
	}
	a.held += n
	return true
}

// release gives back everything the message held.
func (a *account) release(b *budget) {
	b.give(a.share, a.held)
	a.held = 0
}
