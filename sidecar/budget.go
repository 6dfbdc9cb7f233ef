package sidecar

import (
	"sync/atomic"
	"unsafe"
)

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
	// even before the tap has seen the SETTINGS that allowed it (a peer may
	// act on SETTINGS the relay has not read yet, as with any ordering of
	// two sockets' reads).
	headerTableFloorBytes = 64 << 10
	// maxHeaderTableBytes bounds a decoder table however much a peer
	// advertises; a larger size update abandons the connection's tap.
	maxHeaderTableBytes = 256 << 10
	// relayBufferBytes is the copy buffer of each relayed direction.
	relayBufferBytes = 64 << 10
	// maxCallsPerConn bounds the calls followed at once on one connection.
	// The kubernetes-csi sidecars run at most a few hundred workers.
	maxCallsPerConn = 1024
	// maxAwaitingCalls bounds the calls the driver reset whose requests are
	// still coming: a client that read the reset sends no more.
	maxAwaitingCalls = 64
	// maxSpareCalls bounds the emptied call records a connection keeps for
	// its next calls.
	maxSpareCalls = 16
	// maxLateSized bounds the refusals a connection keeps sizing after
	// they were settled (TapConn.sizeLate).
	maxLateSized = 16
	// maxStatusMessageBytes bounds the grpc-message a call record or a
	// queued observation keeps; the rest is cut off.
	maxStatusMessageBytes = 1024
	// defaultQueueSize is the observations that may wait for the Observer
	// unless configured otherwise (the sidecar's --observation-queue).
	defaultQueueSize = 1024
)

// HeldBytesBound returns the most memory, in bytes, the relay and its tap
// hold for the given number of open connections and calls in flight on each:
// per connection two relay buffers, maxSpareCalls emptied call records,
// maxLateSized refusals being sized (a few hundred bytes each) and
// the hand-off's two buffers kept between batches;
// per direction the bytes of an incomplete frame or header block (at most
// twice their limits, as a slice grows), an assembled header block and one
// HPACK table; per call a small record with at most maxStatusMessageBytes of
// status message;
// the relayed bytes waiting for or in a parser, at most
// maxHandoffTotalBytes of all connections together (twice that in capacity,
// as a slice grows); the refused first attempts waiting for their retry
// (maxPendingRetries); the observations queued for the Observer (the default
// queue of defaultQueueSize, each with its message); and every buffered
// message of all connections together, at most maxBufferedBytes. Only
// messages of the methods the tap decodes are buffered (never a ListVolumes
// reply, for instance). Against well-behaved gRPC peers (16 KiB frames,
// 4 KiB tables) a direction holds about 40 KiB, not this worst case.
func HeldBytesBound(connections, callsPerConn int) int64 {
	// A record holds its request's filter (call.filter).
	const callRecordBytes = int64(unsafe.Sizeof(call{})) + maxStatusMessageBytes
	perDirection := int64(2*(maxFrameBytes+maxHeaderBlockBytes) + maxHeaderBlockBytes + maxHeaderTableBytes)
	perConn := 2*int64(relayBufferBytes) + maxSpareCalls*callRecordBytes + 2*perDirection + 2*keptHandoffBytes +
		maxLateSized*int64(unsafe.Sizeof(lateSizing{})) +
		int64(min(callsPerConn, maxCallsPerConn))*callRecordBytes
	retries := int64(maxPendingRetries+recentAnswers) * int64(unsafe.Sizeof(attempt{})) // retries.go
	queued := int64(defaultQueueSize)*callRecordBytes + retries
	return int64(connections)*perConn + queued + maxBufferedBytes + 2*maxHandoffTotalBytes
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
