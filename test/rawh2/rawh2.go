// Package rawh2 writes HTTP/2 bytes as gRPC peers would, with x/net's framer
// and HPACK encoder, for tests: a request's headers alone, with any :path,
// sent to a socket and hung up on (a hostile or broken peer), and both
// directions of a connection for tests that feed a tap themselves.
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

// Conn holds both directions of one HTTP/2 connection as a gRPC client and
// server write them (x/net's framers and HPACK encoders), for tests that
// feed the bytes to the tap themselves: Client starts with the preface.
type Conn struct {
	Client, Driver             bytes.Buffer
	ClientFramer, DriverFramer *http2.Framer
	ClientHPACK, DriverHPACK   *hpack.Encoder
	block                      bytes.Buffer
}

// NewConn returns an empty connection, the client's preface written.
func NewConn() *Conn {
	c := &Conn{}
	c.Client.WriteString(http2.ClientPreface)
	c.ClientFramer, c.DriverFramer = http2.NewFramer(&c.Client, nil), http2.NewFramer(&c.Driver, nil)
	c.ClientHPACK, c.DriverHPACK = hpack.NewEncoder(&c.block), hpack.NewEncoder(&c.block)
	return c
}

// Headers writes one header block (name, value, name, value...) on stream
// id from the client or the driver, with END_STREAM if end.
func (c *Conn) Headers(fromClient bool, id uint32, end bool, kv ...string) error {
	fr, enc := c.DriverFramer, c.DriverHPACK
	if fromClient {
		fr, enc = c.ClientFramer, c.ClientHPACK
	}
	c.block.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]}); err != nil {
			return err
		}
	}
	return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block.Bytes(), EndHeaders: true, EndStream: end})
}
