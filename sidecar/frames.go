package sidecar

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"golang.org/x/net/http2"
)

const frameHeaderLen = 9

var (
	errOversized   = errors.New("frame or header block larger than the tap follows")
	errInterleaved = errors.New("a frame other than CONTINUATION inside a header block")
)

// direction parses one way of a connection. Feed runs on the connection's
// parser goroutine (handoff), off the relay's path; it only ever parses
// complete frames, so it never waits for bytes.
type direction struct {
	conn       *TapConn
	fromClient bool

	// The state below is guarded by conn.mu, which Feed holds.
	released bool
	preface  bool // still expecting the client's connection preface
	buf      []byte
	wire     wireReader
	headers  *headerDecoder
	data     dataState
	// block assembles a header block split over CONTINUATION frames.
	block       []byte
	blockStream uint32
	blockEnd    bool
}

func newDirection(tc *TapConn, fromClient bool) *direction {
	d := &direction{conn: tc, fromClient: fromClient, preface: fromClient}
	d.headers = newHeaderDecoder()
	return d
}

// Feed parses the complete frames now available and keeps only an
// incomplete one for the next call: whole frames are parsed straight from p,
// and a DATA frame cut by the end of p is followed as its bytes arrive, so
// message bytes are never copied into a buffer of the tap's first. Any
// trouble, a panic included, abandons the connection's tap, never the relay.
func (d *direction) Feed(p []byte, at time.Time) {
	d.conn.mu.Lock()
	defer d.conn.unlock() // which frees everything once abandoned
	if d.conn.abandoned.Load() {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			d.conn.abandon(AbandonPanic, fmt.Errorf("%v\n%s", r, debug.Stack()))
		}
	}()
	d.conn.sawBytes()
	if d.preface {
		if p = d.consumePreface(p); d.preface {
			return
		}
	}
	for len(p) > 0 && !d.conn.abandoned.Load() {
		switch {
		case d.data.left > 0:
			p = d.streamData(p, at)
		case len(d.buf) > 0:
			p = d.completePending(p, at)
		default:
			n := d.parse(p, at)
			if n < 0 {
				return
			}
			// What is left is one incomplete frame: followed as it comes
			// if it is DATA, kept otherwise.
			if p = p[n:]; len(p) > 0 && !d.startData(p, at) {
				d.buf = append(d.buf, p...)
			}
			p = nil
		}
	}
}

// completePending adds to the kept incomplete frame only the bytes of p it
// still misses (for a DATA frame, only its header), parses it once whole,
// and returns the rest of p.
func (d *direction) completePending(p []byte, at time.Time) []byte {
	for len(d.buf) > 0 && len(p) > 0 && !d.conn.abandoned.Load() {
		want := missingBytes(d.buf)
		if h, ok := dataHeaderLen(d.buf); ok {
			want = max(h-len(d.buf), 0)
		}
		k := min(want, len(p))
		d.buf, p = append(d.buf, p[:k]...), p[k:]
		if d.startData(d.buf, at) {
			d.buf = d.buf[:0]
			return p
		}
		n := d.parse(d.buf, at)
		if n < 0 {
			return nil
		}
		d.compact(n)
	}
	return p
}

// dataState follows a DATA frame whose payload arrives over several reads.
type dataState struct {
	stream uint32
	end    bool
	left   int // payload bytes still to come, padding included
	pad    int // padding bytes at the end of the payload
}

// dataHeaderLen is the length of the header of the DATA frame b starts
// with (9 bytes, one more for the pad length), ok false when b does not
// start with one (or does not show it yet).
func dataHeaderLen(b []byte) (int, bool) {
	if len(b) < 5 || http2.FrameType(b[3]) != http2.FrameData {
		return 0, false
	}
	if http2.Flags(b[4]).Has(http2.FlagDataPadded) {
		return frameHeaderLen + 1, true
	}
	return frameHeaderLen, true
}

// startData begins following the incomplete DATA frame b starts with, once
// its header is there, and applies the payload bytes b already holds. It
// reports false (b is kept as an incomplete frame) for anything else.
func (d *direction) startData(b []byte, at time.Time) bool {
	if _, ok := dataHeaderLen(b); !ok {
		return false
	}
	st, n, reason, err := dataHeader(b)
	switch {
	case err != nil:
		d.conn.abandon(reason, err)
	case n == 0:
		return false
	default:
		d.data = st
		d.streamData(b[n:], at)
	}
	return true
}

// dataHeader reads the header of the DATA frame b starts with, refusing
// what the framer would (stream 0, padding longer than the payload) and a
// frame larger than the tap follows; n is the header's length, 0 while b
// does not hold all of it yet.
func dataHeader(b []byte) (st dataState, n int, reason string, err error) {
	n, _ = dataHeaderLen(b)
	length, flags := frameLength(b), http2.Flags(b[4])
	padded := n > frameHeaderLen
	switch {
	case length > maxFrameBytes:
		return st, 0, AbandonOversized, errOversized
	case padded && length == 0:
		return st, 0, AbandonFraming, errPadding
	case len(b) < n:
		return st, 0, "", nil
	}
	st = dataState{stream: binary.BigEndian.Uint32(b[5:9]) & (1<<31 - 1), end: flags.Has(http2.FlagDataEndStream), left: length}
	if padded {
		st.pad, st.left = int(b[frameHeaderLen]), length-1
	}
	switch {
	case st.stream == 0:
		return st, 0, AbandonFraming, errors.New("DATA frame on stream 0")
	case padded && st.pad >= length:
		return st, 0, AbandonFraming, errPadding
	}
	return st, n, "", nil
}

var errPadding = errors.New("DATA frame with more padding than payload")

// streamData applies the next payload bytes of the DATA frame in progress,
// less its padding, and returns what follows the frame in p.
func (d *direction) streamData(p []byte, at time.Time) []byte {
	k := min(len(p), d.data.left)
	if payload := min(k, d.data.left-d.data.pad); payload > 0 {
		d.conn.onData(d.data.stream, p[:payload], false, d.fromClient, at)
	}
	d.data.left -= k
	if d.data.left == 0 && d.data.end {
		d.conn.onData(d.data.stream, nil, true, d.fromClient, at)
	}
	return p[k:]
}

// parse reads the whole frames at the start of b and returns how many bytes
// they took, or -1 when the connection's tap was given up.
func (d *direction) parse(b []byte, at time.Time) int {
	n, err := completeFrames(b)
	if errors.Is(err, errInterleaved) {
		d.conn.abandon(AbandonFraming, err)
		return -1
	}
	if err != nil {
		d.conn.abandon(AbandonOversized, err)
		return -1
	}
	for off := 0; off < n && !d.conn.abandoned.Load(); {
		end := off + frameHeaderLen + frameLength(b[off:])
		reason, err := d.parseFrame(b[off:end], at)
		if err != nil {
			d.conn.abandon(reason, err)
			return -1
		}
		off = end
	}
	return n
}

// parseFrame reads one whole frame. DATA frames, which carry every message
// byte, are read here: x/net's framer would copy each payload into a buffer
// of its own first. Every other frame goes through wireReader, which checks
// it as x/net's framer does (and, across calls, that CONTINUATIONs follow
// their HEADERS; completeFrames already refuses anything in between)
// without allocating a frame for it.
func (d *direction) parseFrame(b []byte, at time.Time) (string, error) {
	switch http2.FrameType(b[3]) {
	case http2.FrameData:
		return d.dataFrame(b, at)
	case http2.FramePing, http2.FrameWindowUpdate, http2.FramePriority:
		// Nothing in them concerns a call, and grpc-go sends a PING and
		// WINDOW_UPDATEs around nearly every call.
		return "", nil
	}
	f, err := d.wire.read(b)
	if err != nil {
		return AbandonFraming, err
	}
	return d.onFrame(&f, at)
}

// dataFrame applies a whole DATA frame: its payload less its padding
// (RFC 9113 6.1), then its END_STREAM.
func (d *direction) dataFrame(b []byte, at time.Time) (string, error) {
	st, n, reason, err := dataHeader(b)
	if err != nil {
		return reason, err
	}
	d.data = st
	d.streamData(b[n:], at)
	return "", nil
}

// frameLength reads the payload length from a frame header.
func frameLength(h []byte) int { return int(h[0])<<16 | int(h[1])<<8 | int(h[2]) }

// missingBytes is how many more bytes b needs before its last frame (or,
// for a 9-byte frame header still incomplete, that header) is whole. A
// header block waiting for its CONTINUATION gets the next frame header.
func missingBytes(b []byte) int {
	off := 0
	for len(b)-off >= frameHeaderLen {
		end := off + frameHeaderLen + frameLength(b[off:])
		if end > len(b) {
			return end - len(b)
		}
		off = end
	}
	return frameHeaderLen - (len(b) - off)
}

// compact drops the n parsed bytes; an emptied buffer that grew for a large
// frame is let go, so an idle connection holds little.
func (d *direction) compact(n int) {
	if n == len(d.buf) && cap(d.buf) > relayBufferBytes {
		d.buf = nil
		return
	}
	d.buf = append(d.buf[:0], d.buf[n:]...)
}

// release frees everything the direction holds; it follows nothing after.
// The caller holds conn.mu.
func (d *direction) release() {
	if d.released {
		return
	}
	d.released = true
	// headers itself stays: the other direction may still tell it a SETTINGS
	// value (an atomic store); the decoder and its table go.
	d.buf, d.block, d.headers.dec = nil, nil, nil
}

// onFrame decodes header blocks and hands every frame that matters to the
// connection. A failure names the abandon reason.
func (d *direction) onFrame(f *wireFrame, at time.Time) (string, error) {
	switch f.typ {
	case http2.FrameHeaders:
		d.block, d.blockStream, d.blockEnd = d.block[:0], f.stream, f.endStream()
		return d.headerFragment(f.fragment, f.endHeaders(), at)
	case http2.FrameContinuation:
		return d.headerFragment(f.fragment, f.endHeaders(), at)
	case http2.FramePushPromise:
		// gRPC never pushes; its header block would have to be decoded to
		// keep the table in step, and nothing in it is a CSI call.
		return AbandonFraming, errors.New("PUSH_PROMISE frame: not gRPC")
	case http2.FrameSettings:
		if f.hasTableSize && !f.ack() {
			d.conn.peerOf(d).headers.allow(f.tableSize)
		}
	case http2.FrameRSTStream:
		d.conn.onReset(f.stream, f.code, d.fromClient, at)
	case http2.FrameGoAway:
		if !d.fromClient {
			d.conn.onGoAway(f.last, at)
		}
	}
	return "", nil
}

// headerFragment collects one fragment of a header block and decodes the
// block once it is whole; wireReader has already checked that CONTINUATION
// frames follow their HEADERS without anything in between.
func (d *direction) headerFragment(p []byte, end bool, at time.Time) (string, error) {
	if !end || len(d.block) > 0 {
		d.block = append(d.block, p...)
		p = d.block
	}
	if !end {
		return "", nil
	}
	err := d.headers.decode(d.blockStream, d.blockEnd, p)
	if cap(d.block) > relayBufferBytes {
		d.block = nil
	} else {
		d.block = d.block[:0]
	}
	if errors.Is(err, errTableTooLarge) {
		return AbandonOversized, err
	}
	if err != nil {
		return AbandonFraming, err
	}
	d.conn.onHeaders(&d.headers.block, d.fromClient, at)
	return "", nil
}

// consumePreface checks the client's HTTP/2 preface and returns what
// follows it; until the preface is complete it is kept in d.buf.
func (d *direction) consumePreface(p []byte) []byte {
	want := []byte(http2.ClientPreface)
	k := min(len(want)-len(d.buf), len(p))
	d.buf, p = append(d.buf, p[:k]...), p[k:]
	if !bytes.Equal(d.buf, want[:len(d.buf)]) {
		d.conn.abandon(AbandonNotHTTP2, errors.New("client did not send the HTTP/2 preface"))
		return nil
	}
	if len(d.buf) == len(want) {
		d.buf, d.preface = d.buf[:0], false
	}
	return p
}

// completeFrames returns how many leading bytes of b are whole frames that
// can be read without waiting: a header block counts only once all of its
// CONTINUATION frames are there, because the tap decodes them together.
func completeFrames(b []byte) (int, error) {
	done, blockStart := 0, -1
	for off := 0; len(b)-off >= frameHeaderLen; {
		length := frameLength(b[off:])
		typ, flags := http2.FrameType(b[off+3]), http2.Flags(b[off+4])
		if length > maxFrameBytes {
			return 0, errOversized
		}
		end := off + frameHeaderLen + length
		if end > len(b) {
			break
		}
		inBlock := blockStart >= 0
		if inBlock && typ != http2.FrameContinuation {
			return 0, errInterleaved
		}
		startsBlock := (typ == http2.FrameHeaders || typ == http2.FramePushPromise) && !inBlock
		if startsBlock && flags&http2.FlagHeadersEndHeaders == 0 {
			blockStart = off
		} else if inBlock && typ == http2.FrameContinuation && flags&http2.FlagContinuationEndHeaders != 0 {
			blockStart = -1
		}
		if blockStart >= 0 && end-blockStart > maxHeaderBlockBytes {
			return 0, errOversized
		}
		if blockStart < 0 {
			done = end
		}
		off = end
	}
	return done, nil
}
