package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	frameHeaderLen = 9
	// maxFrameBytes is the largest frame the tap follows. gRPC peers use
	// 16 KiB frames unless told otherwise; a peer sending larger ones is
	// relayed untapped rather than buffered without bound.
	maxFrameBytes = 1 << 20
	// maxHeaderBlockBytes bounds a HEADERS frame plus its CONTINUATIONs.
	maxHeaderBlockBytes = 1 << 20
)

var errOversized = errors.New("frame or header block larger than the tap follows")

// direction parses one way of a connection. Feed runs on that direction's
// relay goroutine right after the bytes were forwarded, so parsing adds no
// latency to the call and needs no goroutine or queue of its own; it only
// ever parses complete frames, so it never waits for bytes.
type direction struct {
	conn       *TapConn
	fromClient bool
	preface    bool // still expecting the client's connection preface
	buf        []byte
	src        bytes.Reader
	fr         *http2.Framer
	// The framer's own header decoding (ReadMetaHeaders) keeps and checks
	// every field; the tap needs three, so it decodes header blocks itself
	// into block, at a fraction of the cost.
	hdec  *hpack.Decoder
	block headerBlock
}

func newDirection(tc *TapConn, fromClient bool) *direction {
	d := &direction{conn: tc, fromClient: fromClient, preface: fromClient}
	d.fr = http2.NewFramer(nil, &d.src)
	d.fr.SetMaxReadFrameSize(maxFrameBytes)
	d.hdec = hpack.NewDecoder(hpackTableBytes, d.block.keep)
	d.hdec.SetMaxStringLength(maxHeaderBlockBytes)
	return d
}

// headerBlock is what the tap keeps of one decoded header block.
type headerBlock struct {
	streamID  uint32
	endStream bool
	// path is the request's :path (the gRPC method); status and message
	// the reply's grpc-status and grpc-message, has* telling whether they
	// were sent. (Compression is seen in each message's own flag byte.)
	path, status, message string
	hasStatus, hasMessage bool
}

func (h *headerBlock) keep(f hpack.HeaderField) {
	switch f.Name {
	case ":path":
		h.path = f.Value
	case "grpc-status":
		h.status, h.hasStatus = f.Value, true
	case "grpc-message":
		h.message, h.hasMessage = f.Value, true
	}
}

// onFrame decodes header blocks here and hands every complete block and
// every other frame to the connection. A failure names the abandon reason.
func (d *direction) onFrame(f http2.Frame, at time.Time) (string, error) {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		d.block = headerBlock{streamID: f.StreamID, endStream: f.StreamEnded()}
		return d.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded(), at)
	case *http2.ContinuationFrame:
		return d.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded(), at)
	case *http2.PushPromiseFrame:
		// gRPC never pushes; its header block would have to be decoded to
		// keep the table in step, and nothing in it is a CSI call.
		return AbandonFraming, errors.New("PUSH_PROMISE frame: not gRPC")
	}
	if err := d.conn.onFrame(f, d.fromClient, at); err != nil {
		return AbandonCompression, err
	}
	return "", nil
}

// headerFragment decodes one fragment of a header block; the framer has
// already checked that CONTINUATION frames follow their HEADERS.
func (d *direction) headerFragment(p []byte, end bool, at time.Time) (string, error) {
	if _, err := d.hdec.Write(p); err != nil {
		return AbandonFraming, err
	}
	if !end {
		return "", nil
	}
	if err := d.hdec.Close(); err != nil {
		return AbandonFraming, err
	}
	if err := d.conn.onHeaders(&d.block, d.fromClient, at); err != nil {
		return AbandonCompression, err
	}
	return "", nil
}

// Feed parses the complete frames now available; it keeps the rest for the
// next call. Any trouble abandons the connection's tap, never the relay.
func (d *direction) Feed(p []byte, at time.Time) {
	if d.conn.abandoned.Load() {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			d.conn.abandon(AbandonPanic, fmt.Errorf("%v\n%s", r, debug.Stack()))
		}
	}()
	d.buf = append(d.buf, p...)
	if d.preface && !d.consumePreface() {
		return
	}
	n, err := completeFrames(d.buf)
	if err != nil {
		d.conn.abandon(AbandonOversized, err)
		return
	}
	if n == 0 {
		return
	}
	d.src.Reset(d.buf[:n])
	for d.src.Len() > 0 && !d.conn.abandoned.Load() {
		f, err := d.fr.ReadFrame()
		if err != nil {
			d.conn.abandon(AbandonFraming, err)
			return
		}
		if reason, err := d.onFrame(f, at); err != nil {
			d.conn.abandon(reason, err)
			return
		}
	}
	d.buf = append(d.buf[:0], d.buf[n:]...)
}

// consumePreface checks the client's HTTP/2 preface once it is complete.
func (d *direction) consumePreface() bool {
	want := []byte(http2.ClientPreface)
	k := min(len(d.buf), len(want))
	if !bytes.Equal(d.buf[:k], want[:k]) {
		d.conn.abandon(AbandonNotHTTP2, errors.New("client did not send the HTTP/2 preface"))
		return false
	}
	if k < len(want) {
		return false
	}
	d.buf = append(d.buf[:0], d.buf[len(want):]...)
	d.preface = false
	return true
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
