package sidecar

import (
	"bytes"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
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

// reasonRecorder keeps the last reason a connection was given up for.
type reasonRecorder struct {
	noRecorder
	last *string
}

func (r reasonRecorder) ConnectionAbandoned(reason string) { *r.last = reason }

func encodeFields(t *testing.T, kv ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i < len(kv); i += 2 {
		if err := enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]}); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// The tap decodes header blocks itself: a block split over CONTINUATION
// frames yields the call's method and status; an undecodable block or a
// PUSH_PROMISE (never gRPC) gives the connection up as "framing".
func TestHeaderBlocksAcrossContinuationsAndBadBlocks(t *testing.T) {
	req := encodeFields(t, ":method", "POST", ":path", MethodCreateVolume, "content-type", "application/grpc")
	trailers := encodeFields(t, ":status", "200", "content-type", "application/grpc", "grpc-status", "5", "grpc-message", "no%20such%20volume") // trailers-only
	client := bytes.Join([][]byte{
		[]byte(http2.ClientPreface),
		frame(t, func(f *http2.Framer) error {
			return f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: req[:3]})
		}),
		frame(t, func(f *http2.Framer) error { return f.WriteContinuation(1, false, req[3:7]) }),
		frame(t, func(f *http2.Framer) error { return f.WriteContinuation(1, true, req[7:]) }),
		frame(t, func(f *http2.Framer) error { return f.WriteData(1, true, []byte{0, 0, 0, 0, 0}) }), // an empty request message
	}, nil)
	driver := frame(t, func(f *http2.Framer) error {
		return f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: trailers, EndHeaders: true, EndStream: true})
	})
	var got []Observation
	var abandoned string
	tap := NewTap(ObserverFunc(func(o Observation) { got = append(got, o) }), reasonRecorder{last: &abandoned}, 8)
	tc := tap.NewConn()
	tc.FromClient().Feed(client, time.Now())
	tc.FromDriver().Feed(driver, time.Now())
	tc.Close()
	tap.Close()
	if abandoned != "" {
		t.Fatalf("abandoned as %q", abandoned)
	}
	if len(got) != 1 || got[0].Method != MethodCreateVolume || got[0].Code != codes.NotFound || got[0].Message != "no such volume" {
		t.Fatalf("observations %+v, want one CreateVolume NotFound \"no such volume\"", got)
	}

	for name, bad := range map[string][]byte{
		"index beyond the table": frame(t, func(f *http2.Framer) error {
			return f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0x80, 0x01}, EndHeaders: true})
		}),
		"push promise": frame(t, func(f *http2.Framer) error {
			return f.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: trailers, EndHeaders: true})
		}),
	} {
		abandoned = ""
		tap := NewTap(nil, reasonRecorder{last: &abandoned}, 8)
		tc := tap.NewConn()
		tc.FromDriver().Feed(bad, time.Now())
		tc.Close()
		tap.Close()
		if abandoned != AbandonFraming {
			t.Errorf("%s: abandoned as %q, want %q", name, abandoned, AbandonFraming)
		}
	}
}
