package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

const frameHeaderLen = 9

var errOversized = errors.New("frame or header block larger than the tap follows")

// direction parses one way of a connection. Feed runs on that direction's
// relay goroutine right after the bytes were forwarded, so parsing adds no
// latency to the call and needs no goroutine or queue of its own; it only
// ever parses complete frames, so it never waits for bytes.
type direction struct {
	conn       *TapConn
	fromClient bool

	// mu is held by Feed; abandon takes it (without waiting) to free the
	// state of a direction that is not feeding.
	mu       sync.Mutex
	released bool
	preface  bool // still expecting the client's connection preface
	buf      []byte
	src      bytes.Reader
	fr       *http2.Framer
	headers  *headerDecoder
	// block assembles a header block split over CONTINUATION frames.
	block       []byte
	blockStream uint32
	blockEnd    bool
}

func newDirection(tc *TapConn, fromClient bool) *direction {
	d := &direction{conn: tc, fromClient: fromClient, preface: fromClient}
	d.fr = http2.NewFramer(nil, &d.src)
	d.fr.SetMaxReadFrameSize(maxFrameBytes)
	d.headers = newHeaderDecoder()
	return d
}

// Feed parses the complete frames now available and keeps only an
// incomplete one for the next call: whole frames are parsed straight from p,
// so a large message is not copied into a buffer of the tap's first. Any
// trouble, a panic included, abandons the connection's tap, never the relay.
func (d *direction) Feed(p []byte, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn.abandoned.Load() {
		d.release()
		return
	}
	defer func() {
		if r := recover(); r != nil {
			d.conn.abandon(AbandonPanic, fmt.Errorf("%v\n%s", r, debug.Stack()))
		}
		if d.conn.abandoned.Load() {
			d.release()
		}
	}()
	d.conn.sawBytes()
	if d.preface {
		if p = d.consumePreface(p); d.preface {
			return
		}
	}
	p = d.completePending(p, at)
	if len(d.buf) > 0 || d.conn.abandoned.Load() {
		return
	}
	n := d.parse(p, at)
	if n >= 0 && !d.conn.abandoned.Load() {
		d.buf = append(d.buf, p[n:]...)
	}
}

// completePending adds to the kept incomplete frame only the bytes of p it
// still misses, parses it once whole, and returns the rest of p.
func (d *direction) completePending(p []byte, at time.Time) []byte {
	for len(d.buf) > 0 && len(p) > 0 && !d.conn.abandoned.Load() {
		k := min(missingBytes(d.buf), len(p))
		d.buf, p = append(d.buf, p[:k]...), p[k:]
		n := d.parse(d.buf, at)
		if n < 0 {
			return nil
		}
		d.compact(n)
	}
	return p
}

// parse reads the whole frames at the start of b and returns how many bytes
// they took, or -1 when the connection's tap was given up.
func (d *direction) parse(b []byte, at time.Time) int {
	n, err := completeFrames(b)
	if err != nil {
		d.conn.abandon(AbandonOversized, err)
		return -1
	}
	d.src.Reset(b[:n])
	for d.src.Len() > 0 {
		f, err := d.fr.ReadFrame()
		if err != nil {
			d.conn.abandon(AbandonFraming, err)
			return -1
		}
		if reason, err := d.onFrame(f, at); err != nil {
			d.conn.abandon(reason, err)
			return -1
		}
	}
	return n
}

// missingBytes is how many more bytes b needs before its last frame (or,
// for a 9-byte frame header still incomplete, that header) is whole. A
// header block waiting for its CONTINUATION gets the next frame header.
func missingBytes(b []byte) int {
	off := 0
	for len(b)-off >= frameHeaderLen {
		end := off + frameHeaderLen + (int(b[off])<<16 | int(b[off+1])<<8 | int(b[off+2]))
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
// The caller holds d.mu.
func (d *direction) release() {
	if d.released {
		return
	}
	d.released = true
	// headers itself stays: the other direction may still tell it a SETTINGS
	// value (an atomic store); the decoder and its table go.
	d.buf, d.block, d.fr, d.headers.dec = nil, nil, nil, nil
	d.src.Reset(nil)
}

// onFrame decodes header blocks and hands every frame that matters to the
// connection. A failure names the abandon reason.
func (d *direction) onFrame(f http2.Frame, at time.Time) (string, error) {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		d.block, d.blockStream, d.blockEnd = d.block[:0], f.StreamID, f.StreamEnded()
		return d.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded(), at)
	case *http2.ContinuationFrame:
		return d.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded(), at)
	case *http2.PushPromiseFrame:
		// gRPC never pushes; its header block would have to be decoded to
		// keep the table in step, and nothing in it is a CSI call.
		return AbandonFraming, errors.New("PUSH_PROMISE frame: not gRPC")
	case *http2.SettingsFrame:
		if v, ok := f.Value(http2.SettingHeaderTableSize); ok && !f.IsAck() {
			d.conn.peerOf(d).headers.allow(v)
		}
	case *http2.DataFrame:
		d.conn.onData(f.StreamID, f.Data(), f.StreamEnded(), d.fromClient, at)
	case *http2.RSTStreamFrame:
		d.conn.onReset(f.StreamID, f.ErrCode, d.fromClient, at)
	case *http2.GoAwayFrame:
		if !d.fromClient {
			d.conn.onGoAway(f.LastStreamID)
		}
	}
	return "", nil
}

// headerFragment collects one fragment of a header block and decodes the
// block once it is whole; the framer has already checked that CONTINUATION
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
// CONTINUATION frames are there, because the framer reads them together.
func completeFrames(b []byte) (int, error) {
	done, blockStart := 0, -1
	for off := 0; len(b)-off >= frameHeaderLen; {
		length := int(b[off])<<16 | int(b[off+1])<<8 | int(b[off+2])
		typ, flags := http2.FrameType(b[off+3]), http2.Flags(b[off+4])
		if length > maxFrameBytes {
			return 0, errOversized
		}
		end := off + frameHeaderLen + length
		if end > len(b) {
			break
		}
		inBlock := blockStart >= 0
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
