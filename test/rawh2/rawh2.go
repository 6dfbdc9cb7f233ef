// Package rawh2 writes HTTP/2 bytes as a gRPC client would, for tests that
// play a hostile or broken peer on a socket: a request's headers alone,
// with any :path, and nothing after.
package rawh2

import (
	"bytes"
	"net"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// RequestHeaders returns a client's preface, SETTINGS and the HEADERS of one
// request on stream 1 with the given :path, written by x/net's framer and
// HPACK encoder; no DATA and no END_STREAM follow.
func RequestHeaders(path string) ([]byte, error) {
	var out, block bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: "localhost"}, {Name: "content-type", Value: "application/grpc"}} {
		if err := enc.WriteField(f); err != nil {
			return nil, err
		}
	}
	if err := fr.WriteSettings(); err != nil {
		return nil, err
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// SendAndHangUp connects to the unix socket sock, writes b and closes the
// connection without waiting for an answer.
func SendAndHangUp(sock string, b []byte) error {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write(b)
	return err
}
