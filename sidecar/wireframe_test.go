package sidecar

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/net/http2"
)

// The frames the tap reads without x/net (wireframe.go) read as x/net's
// Framer reads them: for every frame type the tap gives wireReader, every
// flag, stream 0, 1 and one with the reserved bit, and payloads with
// padding, priority, both, too much padding, short and long lengths,
// repeated and out-of-range settings, alone and after a header block that
// waits for its CONTINUATION, read returns what ReadFrame returns: the same
// fields the tap uses or the same error value.
func TestWireFramesMatchXNetFramer(t *testing.T) {
	types := []http2.FrameType{http2.FrameHeaders, http2.FrameContinuation, http2.FrameRSTStream,
		http2.FrameSettings, http2.FrameGoAway, http2.FramePushPromise, http2.FramePriorityUpdate, 10, 0xff}
	payloads := [][]byte{
		{},
		{5},
		{0, 0, 0, 8},
		{0, 0, 0, 1, 16},
		{0x80, 0, 0, 3, 16, 0x82, 0x86},       // priority (exclusive), a fragment
		{3, 'a', 'b', 'c', 0, 0, 0},           // padding
		{4, 1, 2, 3, 4},                       // padding takes the rest
		{5, 1, 2, 3, 4},                       // padding over the payload
		{2, 0, 0, 0, 3, 16, 0x82, 0x86, 0, 0}, // padding and priority
		{1, 0, 0, 0, 3},                       // padding, priority cut short
		settings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 1 << 16}),
		settings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 100}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 200}),
		settings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31}),
		settings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}),
		settings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31}),
		settings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14}, http2.Setting{ID: 0xffff, Val: 7})[:11],
		{0x80, 0, 0, 5, 0, 0, 0, 8},             // GOAWAY: last stream with the reserved bit
		{0, 0, 0, 5, 0, 0, 0, 2, 'd', 'b', 'g'}, // GOAWAY with debug data
		{0, 0, 0, 5, 0, 0, 0},                   // GOAWAY cut short
		{0x80, 0, 0, 0, 'u', '=', '1'},          // PRIORITY_UPDATE of stream 0, reserved bit set
	}
	streams := []uint32{0, 1, 1<<31 | 3}
	cases := 0
	for _, typ := range types {
		for flags := 0; flags < 256; flags++ {
			for _, p := range payloads {
				for _, stream := range streams {
					f := rawFrame(typ, http2.Flags(flags), stream, p)
					compareWire(t, fmt.Sprintf("%v flags %#x stream %#x payload %x", typ, flags, stream, p), f)
					open := rawFrame(http2.FrameHeaders, 0, 1, []byte{0x82})
					compareWire(t, fmt.Sprintf("after an open block: %v flags %#x stream %#x payload %x", typ, flags, stream, p), open, f)
					cases += 2
				}
			}
		}
	}
	for name, seq := range wireSequences() {
		compareWire(t, name, seq...)
		cases++
	}
	t.Logf("%d sequences compared", cases)
}

// wireSequences are frame orders the table above does not make.
func wireSequences() map[string][][]byte {
	h := func(flags http2.Flags, stream uint32, p ...byte) []byte {
		return rawFrame(http2.FrameHeaders, flags, stream, p)
	}
	c := func(flags http2.Flags, stream uint32, p ...byte) []byte {
		return rawFrame(http2.FrameContinuation, flags, stream, p)
	}
	end := http2.FlagHeadersEndHeaders
	return map[string][][]byte{
		"block over two CONTINUATIONs":          {h(0, 1, 0x82), c(0, 1, 0x86), c(end, 1, 0x84), h(end, 3, 0x82)},
		"CONTINUATION on another stream":        {h(0, 1, 0x82), c(end, 3, 0x86)},
		"CONTINUATION after a finished block":   {h(end, 1, 0x82), c(end, 1, 0x86)},
		"stray CONTINUATION":                    {c(end, 1, 0x86)},
		"RST_STREAM inside a block":             {h(0, 1, 0x82), rawFrame(http2.FrameRSTStream, 0, 1, []byte{0, 0, 0, 8})},
		"PUSH_PROMISE does not open a block":    {rawFrame(http2.FramePushPromise, 0, 1, []byte{0, 0, 0, 2, 0x82}), c(end, 1, 0x86)},
		"unknown frame inside a block":          {h(0, 1, 0x82), rawFrame(0x20, 0, 1, nil)},
		"blocks on the reserved bit's stream":   {h(0, 1<<31|5, 0x82), c(end, 5, 0x86)},
		"END_STREAM without END_HEADERS, twice": {h(http2.FlagHeadersEndStream, 1, 0x82), c(0, 1), c(end, 1, 0x86)},
	}
}

func settings(s ...http2.Setting) []byte {
	var p []byte
	for _, v := range s {
		p = binary.BigEndian.AppendUint16(p, uint16(v.ID))
		p = binary.BigEndian.AppendUint32(p, v.Val)
	}
	return p
}

func rawFrame(typ http2.FrameType, flags http2.Flags, stream uint32, p []byte) []byte {
	b := []byte{byte(len(p) >> 16), byte(len(p) >> 8), byte(len(p)), byte(typ), byte(flags)}
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, p...)
}

// FuzzWireFramesMatchXNetFramer reads any byte stream's frames, the ones the
// tap gives wireReader, with it and with x/net's Framer and compares them as
// TestWireFramesMatchXNetFramer does.
func FuzzWireFramesMatchXNetFramer(f *testing.F) {
	for _, seq := range wireSequences() {
		f.Add(bytes.Join(seq, nil))
	}
	f.Add(rawFrame(http2.FrameHeaders, http2.FlagHeadersPadded|http2.FlagHeadersPriority, 1, []byte{2, 0, 0, 0, 3, 16, 0x82, 0, 0}))
	f.Add(rawFrame(http2.FrameSettings, 0, 0, settings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 1})))
	f.Fuzz(func(t *testing.T, b []byte) {
		var frames [][]byte
		for len(b) >= frameHeaderLen {
			n := min(frameHeaderLen+frameLength(b), len(b))
			if n-frameHeaderLen == frameLength(b) && frameLength(b) <= maxFrameBytes && givenToWireReader(http2.FrameType(b[3])) {
				frames = append(frames, b[:n])
			}
			b = b[n:]
		}
		compareWire(t, "fuzz", frames...)
	})
}

// givenToWireReader tells whether parseFrame reads a frame of type typ
// with wireReader: DATA, PING, WINDOW_UPDATE and PRIORITY never get there.
func givenToWireReader(typ http2.FrameType) bool {
	switch typ {
	case http2.FrameData, http2.FramePing, http2.FrameWindowUpdate, http2.FramePriority:
		return false
	}
	return true
}

// compareWire reads frames in order with wireReader and with x/net's
// Framer, until the first that gives the connection up (an error, or a
// PUSH_PROMISE, on which the tap gives up whatever x/net says of it).
func compareWire(t *testing.T, name string, frames ...[]byte) {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(bytes.Join(frames, nil)))
	fr.SetMaxReadFrameSize(maxFrameBytes)
	var r wireReader
	for i, b := range frames {
		got, gotErr := r.read(b)
		xf, wantErr := fr.ReadFrame()
		gotEnds := gotErr != nil || got.typ == http2.FramePushPromise
		wantEnds := wantErr != nil || http2.FrameType(b[3]) == http2.FramePushPromise
		switch {
		case gotEnds != wantEnds:
			t.Fatalf("%s, frame %d: wireReader %+v, %v; x/net %v, %v", name, i, got, gotErr, xf, wantErr)
		case gotErr != nil && wantErr != nil && gotErr != wantErr:
			t.Fatalf("%s, frame %d: wireReader's error %#v, x/net's %#v", name, i, gotErr, wantErr)
		}
		if gotEnds {
			return
		}
		if want := fromXNet(xf); !sameWireFrame(got, want) {
			t.Fatalf("%s, frame %d: wireReader %+v, x/net %+v", name, i, got, want)
		}
	}
}

// fromXNet is what wireReader should read of the frame x/net read.
func fromXNet(f http2.Frame) wireFrame {
	h := f.Header()
	w := wireFrame{typ: h.Type, flags: h.Flags, stream: h.StreamID}
	switch f := f.(type) {
	case *http2.HeadersFrame:
		w.fragment = f.HeaderBlockFragment()
	case *http2.ContinuationFrame:
		w.fragment = f.HeaderBlockFragment()
	case *http2.RSTStreamFrame:
		w.code = f.ErrCode
	case *http2.SettingsFrame:
		w.tableSize, w.hasTableSize = f.Value(http2.SettingHeaderTableSize)
	case *http2.GoAwayFrame:
		w.last, w.code = f.LastStreamID, f.ErrCode
	}
	return w
}

func sameWireFrame(a, b wireFrame) bool {
	return a.typ == b.typ && a.flags == b.flags && a.stream == b.stream && bytes.Equal(a.fragment, b.fragment) &&
		a.code == b.code && a.last == b.last && a.tableSize == b.tableSize && a.hasTableSize == b.hasTableSize
}
