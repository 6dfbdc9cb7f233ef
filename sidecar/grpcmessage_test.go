package sidecar_test

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/rawh2"
)

// Edges of the grpc-go rules in grpcstatus.go, each reply asked of grpc-go's
// own client (the oracle) and of the tap.

// A driver's grpc-message is reported as grpc-go's client reports it
// (decodeGrpcMessage, internal/transport/http_util.go: "%" and two hex
// digits is a byte, anything else is kept, a "%" near the end too), up to
// the tap's bound: a message of exactly the bound is grpc-go's byte for
// byte, bytes that are not UTF-8 included.
func TestStatusMessagesDecodeAsGRPCGo(t *testing.T) {
	_, long := tapReply(t, trailersOnly("application/grpc", codes.Internal, strings.Repeat("x", 8<<10)))
	bound := len(long)
	if bound == 0 || bound >= 8<<10 {
		t.Fatalf("an 8 KiB message was cut to %d bytes: the tap has no bound to test", bound)
	}
	for _, sent := range []string{"plain", "50%", "x%4", "%", "%%", "%4", "%41%4", "%zz%41", "a%41b%", "%e2%82%ac", "%C3",
		strings.Repeat("%FF", bound)} {
		if tap, grpcGo := bothReport(t, trailersOnly("application/grpc", codes.Internal, sent)); tap.msg != grpcGo.msg {
			t.Errorf("grpc-message %.40q: the tap reports %.40q, grpc-go's client %.40q", sent, tap.msg, grpcGo.msg)
		}
	}
}

// A reply is gRPC when its content-type is application/grpc, alone or
// followed by '+' or ';' (grpcutil.ContentSubtype); any other is judged by
// its :status, whatever its grpc-status says.
func TestContentTypesAsGRPCGo(t *testing.T) {
	for _, ct := range []string{"application/grpc", "application/grpc+proto", "application/grpc;charset=utf-8", "application/grpc+",
		"application/grpcx", "application/grpc-web", "application/gr", "APPLICATION/GRPC", "text/html", ""} {
		if tap, grpcGo := bothReport(t, trailersOnly(ct, codes.Internal, "m")); tap.code != grpcGo.code {
			t.Errorf("content-type %q: the tap reports %v, grpc-go's client %v", ct, tap.code, grpcGo.code)
		}
	}
}

// A unary reply is exactly one message whose prefix announces at most
// grpc-go's default limit of 4 MiB (recvMsg, checkRecvPayload in
// rpc_util.go; clientStream's RecvMsg, stream.go), however its bytes are
// framed: two messages in one DATA frame are a cardinality violation; a
// message of exactly 4 MiB is within the limit (here cut short by the
// trailers), one byte more is not.
func TestReplyFramingAsGRPCGo(t *testing.T) {
	// A DeleteVolumeResponse holding one unknown field (15, varint 1): a
	// body to read past, which decodes.
	const body = "\x78\x01"
	msg := func(body string) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body))), body...)
	}
	announce := func(n uint32) []byte { return binary.BigEndian.AppendUint32([]byte{0}, n) }
	for name, data := range map[string][]byte{
		"one message":                        msg(body),
		"two messages in one DATA frame":     append(msg(body), msg(body)...),
		"a message and a prefix":             append(msg(body), 0, 0),
		"exactly 4 MiB announced, cut short": announce(4 << 20),
		"4 MiB and a byte announced":         announce(4<<20 + 1),
	} {
		reply := diffHalf{blocks: [][]hpack.HeaderField{
			{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}},
			{{Name: "grpc-status", Value: "0"}},
		}, dataAfter: 1, data: data, endOnBlock: true}
		if tap, grpcGo := bothReport(t, reply); tap.code != grpcGo.code {
			t.Errorf("%s: the tap reports %v, grpc-go's client %v", name, tap.code, grpcGo.code)
		}
	}
}

// reported is a call's status as a client sees it.
type reported struct {
	code codes.Code
	msg  string
}

// bothReport returns what the tap and grpc-go's client report of one call
// the driver answers with reply.
func bothReport(t *testing.T, reply diffHalf) (tap, grpcGo reported) {
	t.Helper()
	o, err := oracle()
	if err != nil {
		t.Fatal(err)
	}
	if grpcGo.code, grpcGo.msg, err = o.ask(reply, oracleWait); err != nil {
		t.Fatal(err)
	}
	tap.code, tap.msg = tapReply(t, reply)
	return tap, grpcGo
}

// trailersOnly is a driver's reply of one header block: the status alone.
func trailersOnly(contentType string, code codes.Code, message string) diffHalf {
	return diffHalf{blocks: [][]hpack.HeaderField{{{Name: ":status", Value: "200"}, {Name: "content-type", Value: contentType},
		{Name: "grpc-status", Value: strconv.Itoa(int(code))}, {Name: "grpc-message", Value: message}}}, endOnBlock: true}
}

// tapReply feeds a tap one DeleteVolume call the driver answers with reply,
// and returns the code and message it observes.
func tapReply(t *testing.T, reply diffHalf) (codes.Code, string) {
	t.Helper()
	c := rawh2.NewConn()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	body, err := proto.Marshal(&csi.DeleteVolumeRequest{VolumeId: "v"})
	must(err)
	must(c.Headers(true, 1, false, ":method", "POST", ":path", sidecar.MethodDeleteVolume, "content-type", "application/grpc"))
	must(c.ClientFramer.WriteData(1, true, append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body))), body...)))
	var block bytes.Buffer
	must(writeOracleReply(http2.NewFramer(&c.Driver, nil), hpack.NewEncoder(&block), &block, 1, reply))
	var got []sidecar.Observation
	tap := sidecar.NewTap(sidecar.ObserverFunc(func(o sidecar.Observation) { got = append(got, o) }), nil, 16)
	tc := tap.NewConn()
	tc.FromClient().Feed(c.Client.Bytes(), time.Now())
	tc.FromDriver().Feed(c.Driver.Bytes(), time.Now())
	tc.Close()
	tap.Close()
	if len(got) != 1 {
		t.Fatalf("observed %+v, want one call", got)
	}
	return got[0].Code, got[0].Message
}
