package sidecar_test

// grpc-go's own client as the differential test's oracle for statuses: a
// raw HTTP/2 server (x/net's Framer and HPACK encoder) answers each call of
// a real grpc-go v1.85 client with the frames a generated driver sends, and
// whatever the client then reports is what the tap must report.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the client takes the gzip replies its requests accept
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// oracleAction is what the client does besides waiting for the reply.
type oracleAction int

const (
	oracleWait     oracleAction = iota
	oracleCancel                // cancels its context once the reply's headers (if any) came
	oracleDeadline              // its deadline passes while the reply is incomplete
	oracleHangUp                // the server closes the connection after the reply
)

// oracleDeadlineTimeout is the deadline of an oracleDeadline call.
const oracleDeadlineTimeout = 20 * time.Millisecond

// oracleTokenField names a call's plan in its request metadata.
const oracleTokenField = "x-oracle-call"

// grpcOracle is the raw server and a grpc-go client connected to it.
type grpcOracle struct {
	addr   string
	shared *grpc.ClientConn
	plans  sync.Map // token -> *oraclePlan
	next   atomic.Uint64
}

type oraclePlan struct {
	reply  diffHalf
	hangUp bool
	// refuse is how many attempts of the call the driver refuses before
	// it answers one: with RST_STREAM(REFUSED_STREAM), or with a GOAWAY
	// naming the stream before it (and closing the connection) if goAway;
	// once the request's first DATA came, or at its headers (RST_STREAM
	// only) if refuseAtHeaders.
	refuse          atomic.Int32
	goAway          bool
	refuseAtHeaders bool
	// afterRequest answers once the whole request came, as a CSI driver
	// does, rather than at its headers.
	afterRequest bool
}

var oracle = sync.OnceValues(startGRPCOracle)

func startGRPCOracle() (*grpcOracle, error) {
	o := &grpcOracle{addr: fmt.Sprintf("@csi-clone-sidecar-oracle-%d", os.Getpid())} // abstract: no file left
	lis, err := net.Listen("unix", o.addr)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go o.serve(c)
		}
	}()
	o.shared, err = o.dial()
	return o, err
}

// dial connects a grpc-go client with windows large enough that the raw
// server, which keeps no flow-control accounts, never overruns them.
func (o *grpcOracle) dial() (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///oracle",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", o.addr)
		}),
		grpc.WithInitialWindowSize(1<<30), grpc.WithInitialConnWindowSize(1<<30),
		grpc.WithDisableRetry())
}

// ask returns what grpc-go's client reports for a call answered with reply.
func (o *grpcOracle) ask(reply diffHalf, action oracleAction) (codes.Code, string, error) {
	token := strconv.FormatUint(o.next.Add(1), 10)
	o.plans.Store(token, &oraclePlan{reply: reply, hangUp: action == oracleHangUp})
	defer o.plans.Delete(token)
	conn := o.shared
	if action == oracleHangUp {
		c, err := o.dial()
		if err != nil {
			return 0, "", err
		}
		defer c.Close()
		conn = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if action == oracleDeadline {
		ctx, cancel = context.WithTimeout(ctx, oracleDeadlineTimeout)
		defer cancel()
	}
	ctx = metadata.AppendToOutgoingContext(ctx, oracleTokenField, token)
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{}, "/oracle.Oracle/Call", grpc.ForceCodec(rawCodec{}))
	if err == nil {
		err = cs.SendMsg([]byte("request"))
	}
	if err == nil && action == oracleCancel {
		if len(reply.blocks) > 0 {
			cs.Header() // the reply's headers, or the stream's end
		}
		cancel()
	}
	if err == nil {
		var resp []byte
		err = cs.RecvMsg(&resp)
	}
	if ctx.Err() != nil && action != oracleCancel && action != oracleDeadline {
		return 0, "", fmt.Errorf("the oracle's call timed out: %w", err)
	}
	st := status.Convert(err)
	return st.Code(), st.Message(), nil
}

// serve plays the driver on one connection: SETTINGS and their ACKs, PING
// ACKs, and for each request the planned frames of its call.
func (o *grpcOracle) serve(c net.Conn) {
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 16 << 20
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	if fr.WriteSettings() != nil {
		return
	}
	var drainAt uint32            // the stream whose first DATA ends the connection with a GOAWAY
	refuseAt := map[uint32]bool{} // streams refused at their first DATA
	waiting := map[uint32]*oraclePlan{}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() && fr.WritePing(true, f.Data) != nil {
				return
			}
		case *http2.MetaHeadersFrame:
			token := ""
			for _, hf := range f.RegularFields() {
				if hf.Name == oracleTokenField {
					token = hf.Value
				}
			}
			plan, ok := o.plans.Load(token)
			if !ok { // a call that ended (cancelled) before its request was read here
				continue
			}
			p := plan.(*oraclePlan)
			if p.refuse.Add(-1) >= 0 {
				if p.goAway {
					// Once the request's first bytes came: a stream whose
					// request never crossed cannot be sized by the tap.
					drainAt = f.StreamID
					continue
				}
				if !p.refuseAtHeaders {
					refuseAt[f.StreamID] = true
					continue
				}
				if fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream) != nil {
					return
				}
				continue
			}
			if p.afterRequest && !f.StreamEnded() {
				waiting[f.StreamID] = p
				continue
			}
			if writeOracleReply(fr, enc, &block, f.StreamID, p.reply) != nil || p.hangUp {
				return
			}
		case *http2.DataFrame:
			if p := waiting[f.StreamID]; p != nil && f.StreamEnded() {
				delete(waiting, f.StreamID)
				if writeOracleReply(fr, enc, &block, f.StreamID, p.reply) != nil {
					return
				}
			}
			if refuseAt[f.StreamID] {
				delete(refuseAt, f.StreamID)
				if fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream) != nil {
					return
				}
			}
			if drainAt != 0 && f.StreamID == drainAt {
				fr.WriteGoAway(max(drainAt, 2)-2, http2.ErrCodeNo, nil) // the last stream processed: odd, or 0
				return
			}
			// Large requests flow: the connection's window comes back at
			// once (a refused stream's bytes included), and the stream's
			// while it is open.
			if n := uint32(len(f.Data())); n > 0 {
				if fr.WriteWindowUpdate(0, n) != nil {
					return
				}
				if !f.StreamEnded() && fr.WriteWindowUpdate(f.StreamID, n) != nil {
					return
				}
			}
		}
	}
}

// writeOracleReply writes one side of a stream as the generator planned it
// (diffHalf's order), encoded by this connection's framer and encoder.
func writeOracleReply(fr *http2.Framer, enc *hpack.Encoder, block *bytes.Buffer, id uint32, h diffHalf) error {
	headers := func(i int) error {
		block.Reset()
		for _, f := range h.blocks[i] {
			if err := enc.WriteField(f); err != nil {
				return err
			}
		}
		return writeOracleBlock(fr, id, block.Bytes(), h.endOnBlock && i == len(h.blocks)-1)
	}
	for i := range h.dataAfter {
		if err := headers(i); err != nil {
			return err
		}
	}
	data := h.data
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), diffMaxFrame)
		if len(data) == 0 && !h.endOnData {
			break
		}
		if err := fr.WriteData(id, h.endOnData && n == len(data), data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	for i := h.dataAfter; i < len(h.blocks); i++ {
		if err := headers(i); err != nil {
			return err
		}
	}
	if h.reset {
		return fr.WriteRSTStream(id, h.code)
	}
	return nil
}

func writeOracleBlock(fr *http2.Framer, id uint32, b []byte, end bool) error {
	n := min(len(b), diffMaxFrame)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:n], EndStream: end, EndHeaders: n == len(b)}); err != nil {
		return err
	}
	for b = b[n:]; len(b) > 0; b = b[n:] {
		n = min(len(b), diffMaxFrame)
		if err := fr.WriteContinuation(id, n == len(b), b[:n]); err != nil {
			return err
		}
	}
	return nil
}

// rawCodec sends and takes gRPC message bodies as they are: the oracle
// judges the transport and the stream, not the protobuf inside.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return errors.New("rawCodec: not a *[]byte")
	}
	*p = append((*p)[:0], b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }
