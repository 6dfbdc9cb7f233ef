package sidecar

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
)

func frame(t *testing.T, write func(*http2.Framer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := write(http2.NewFramer(&b, nil)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A header block is only complete with its last CONTINUATION: the framer
// reads them together and must never be handed half of one.
func TestCompleteFramesWaitsForTheWholeHeaderBlock(t *testing.T) {
	ping := frame(t, func(f *http2.Framer) error { return f.WritePing(false, [8]byte{}) })
	headers := frame(t, func(f *http2.Framer) error {
		return f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}})
	})
	cont := frame(t, func(f *http2.Framer) error { return f.WriteContinuation(1, true, []byte{0x84}) })
	all := bytes.Join([][]byte{ping, headers, cont}, nil)

	cases := []struct {
		name string
		b    []byte
		want int
	}{
		{"empty", nil, 0},
		{"partial frame header", ping[:5], 0},
		{"one frame", ping, len(ping)},
		{"headers without their continuation", all[:len(ping)+len(headers)], len(ping)},
		{"continuation cut short", all[:len(all)-1], len(ping)},
		{"whole block", all, len(all)},
	}
	for _, c := range cases {
		got, err := completeFrames(c.b)
		if err != nil || got != c.want {
			t.Errorf("%s: got %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

func TestCompleteFramesRefusesOversizedFrames(t *testing.T) {
	huge := []byte{0x7f, 0xff, 0xff, byte(http2.FrameData), 0, 0, 0, 0, 1}
	if _, err := completeFrames(huge); err != errOversized {
		t.Errorf("err = %v, want errOversized", err)
	}
}
