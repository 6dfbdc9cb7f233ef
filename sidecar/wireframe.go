package sidecar

// The tap's reader of the frames it parses other than DATA: HEADERS,
// CONTINUATION, RST_STREAM, SETTINGS and GOAWAY, and the checks x/net makes
// of any other frame given to it (PRIORITY_UPDATE's fields, every frame's
// order).
//
// A deliberate exception to "read frames with x/net's Framer, do not
// hand-parse HTTP/2" (style.md): issue 38 asks the tap's CPU per call to fall
// by 40 %, and the Framer allocates a frame for every HEADERS (three per
// unary call), a sixth of the tap's time with its reading and copying. The
// exception is guarded by a differential, not by reading RFC 9113 again:
// TestWireFramesMatchXNetFramer (every frame type and flag, padding,
// priority, malformed lengths and streams, frame order) and
// FuzzWireFramesMatchXNetFramer compare read's every result, its errors to
// the value, with what x/net/http2's Framer (the version in go.mod) returns
// for the same bytes. A newer x/net that changes its checks shows up there.

import (
	"encoding/binary"
	"io"

	"golang.org/x/net/http2"
)

// wireFrame is what the tap reads of one frame.
type wireFrame struct {
	typ    http2.FrameType
	flags  http2.Flags
	stream uint32
	// fragment is a HEADERS or CONTINUATION frame's header block fragment,
	// without padding and priority; it points into the frame's bytes.
	fragment []byte
	// code is RST_STREAM's or GOAWAY's error code, last GOAWAY's last
	// stream.
	code http2.ErrCode
	last uint32
	// tableSize is a SETTINGS frame's first SETTINGS_HEADER_TABLE_SIZE, as
	// SettingsFrame.Value finds it.
	tableSize    uint32
	hasTableSize bool
}

// endStream and endHeaders are HEADERS' END_STREAM and HEADERS' or
// CONTINUATION's END_HEADERS; ack is SETTINGS' ACK.
func (f *wireFrame) endStream() bool  { return f.flags.Has(http2.FlagHeadersEndStream) }
func (f *wireFrame) endHeaders() bool { return f.flags.Has(http2.FlagHeadersEndHeaders) }
func (f *wireFrame) ack() bool        { return f.flags.Has(http2.FlagSettingsAck) }

// wireReader reads one direction's frames in order, as Framer.ReadFrame
// does: it keeps the stream of a header block still waiting for its
// CONTINUATION (Framer.checkFrameOrder).
type wireReader struct {
	headerStream uint32
}

// read reads the whole frame b (its 9-byte header and its payload, the
// length the header gives, which the caller checked against the tap's
// maximum). Its error is the value Framer.ReadFrame returns for the same
// bytes: ConnectionError, StreamError or io.ErrUnexpectedEOF. A PUSH_PROMISE
// is returned unread (the tap gives the connection up on any) and a type
// the tap does not read with its type, flags and stream only.
func (r *wireReader) read(b []byte) (wireFrame, error) {
	f := wireFrame{
		typ:    http2.FrameType(b[3]),
		flags:  http2.Flags(b[4]),
		stream: binary.BigEndian.Uint32(b[5:frameHeaderLen]) & (1<<31 - 1),
	}
	if err := r.checkOrder(&f); err != nil {
		return f, err
	}
	p := b[frameHeaderLen:]
	var err error
	switch f.typ {
	case http2.FrameHeaders:
		err = f.headers(p)
	case http2.FrameContinuation:
		if f.stream == 0 {
			return f, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		f.fragment = p
	case http2.FrameRSTStream:
		if len(p) != 4 {
			return f, http2.ConnectionError(http2.ErrCodeFrameSize)
		}
		if f.stream == 0 {
			return f, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		f.code = http2.ErrCode(binary.BigEndian.Uint32(p))
	case http2.FrameSettings:
		err = f.settings(p)
	case http2.FrameGoAway:
		if f.stream != 0 {
			return f, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if len(p) < 8 {
			return f, http2.ConnectionError(http2.ErrCodeFrameSize)
		}
		f.last = binary.BigEndian.Uint32(p) & (1<<31 - 1)
		f.code = http2.ErrCode(binary.BigEndian.Uint32(p[4:]))
	case http2.FramePriorityUpdate:
		// RFC 9218's; nothing in it concerns a call, but x/net refuses a
		// malformed one (parsePriorityUpdateFrame).
		switch {
		case f.stream != 0:
			return f, http2.ConnectionError(http2.ErrCodeProtocol)
		case len(p) < 4:
			return f, http2.ConnectionError(http2.ErrCodeFrameSize)
		case binary.BigEndian.Uint32(p)&(1<<31-1) == 0:
			return f, http2.ConnectionError(http2.ErrCodeProtocol)
		}
	}
	return f, err
}

// checkOrder is Framer.checkFrameOrder: a header block's CONTINUATION
// frames follow it at once, on its stream, and only then.
func (r *wireReader) checkOrder(f *wireFrame) error {
	if r.headerStream != 0 {
		if f.typ != http2.FrameContinuation || f.stream != r.headerStream {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
	} else if f.typ == http2.FrameContinuation {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if f.typ == http2.FrameHeaders || f.typ == http2.FrameContinuation {
		r.headerStream = 0
		if !f.endHeaders() {
			r.headerStream = f.stream
		}
	}
	return nil
}

// headers reads a HEADERS payload as parseHeadersFrame does: the pad
// length, the priority (skipped), the fragment less the padding.
func (f *wireFrame) headers(p []byte) error {
	if f.stream == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	pad := 0
	if f.flags.Has(http2.FlagHeadersPadded) {
		if len(p) < 1 {
			return io.ErrUnexpectedEOF
		}
		pad, p = int(p[0]), p[1:]
	}
	if f.flags.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 { // stream dependency, weight
			return io.ErrUnexpectedEOF
		}
		p = p[5:]
	}
	if len(p) < pad {
		return http2.StreamError{StreamID: f.stream, Code: http2.ErrCodeProtocol}
	}
	f.fragment = p[:len(p)-pad]
	return nil
}

// settings reads a SETTINGS payload as parseSettingsFrame does, and the
// first SETTINGS_HEADER_TABLE_SIZE in it.
func (f *wireFrame) settings(p []byte) error {
	switch {
	case f.ack() && len(p) > 0:
		return http2.ConnectionError(http2.ErrCodeFrameSize)
	case f.stream != 0:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	case len(p)%6 != 0:
		return http2.ConnectionError(http2.ErrCodeFrameSize)
	}
	windowChecked := false
	for ; len(p) > 0; p = p[6:] {
		id, v := http2.SettingID(binary.BigEndian.Uint16(p)), binary.BigEndian.Uint32(p[2:6])
		switch {
		case id == http2.SettingHeaderTableSize && !f.hasTableSize:
			f.tableSize, f.hasTableSize = v, true
		case id == http2.SettingInitialWindowSize && !windowChecked:
			// Only the first counts, as SettingsFrame.Value finds it.
			windowChecked = true
			if v > 1<<31-1 {
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
		}
	}
	return nil
}
