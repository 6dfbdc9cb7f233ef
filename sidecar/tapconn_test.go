package sidecar

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/csi-clone-sidecar/test/rawh2"
)

// countingRecorder keeps what the tap recorded.
type countingRecorder struct {
	mu        sync.Mutex
	finished  []codes.Code
	undecoded []string
	abandoned []string
}

func (r *countingRecorder) CallFinished(_ string, c codes.Code, _ time.Duration) {
	r.mu.Lock()
	r.finished = append(r.finished, c)
	r.mu.Unlock()
}
func (r *countingRecorder) ConnectionTapped()   {}
func (r *countingRecorder) ObservationDropped() {}
func (r *countingRecorder) ConnectionAbandoned(reason string) {
	r.mu.Lock()
	r.abandoned = append(r.abandoned, reason)
	r.mu.Unlock()
}
func (r *countingRecorder) CallUndecoded(reason string) {
	r.mu.Lock()
	r.undecoded = append(r.undecoded, reason)
	r.mu.Unlock()
}

// wire writes both sides of one HTTP/2 connection with x/net's framer and
// HPACK encoder, as a gRPC client and server would (rawh2.Conn).
type wire struct {
	t              *testing.T
	conn           *rawh2.Conn
	client, driver *bytes.Buffer
	cfr, dfr       *http2.Framer
	cenc           *hpack.Encoder
}

func newWire(t *testing.T) *wire {
	c := rawh2.NewConn()
	return &wire{t: t, conn: c, client: &c.Client, driver: &c.Driver, cfr: c.ClientFramer, dfr: c.DriverFramer, cenc: c.ClientHPACK}
}

func (w *wire) check(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

// headers writes one header block on stream id from the client or driver.
func (w *wire) headers(fromClient bool, id uint32, end bool, kv ...string) {
	w.t.Helper()
	w.check(w.conn.Headers(fromClient, id, end, kv...))
}

// grpcMessage frames m as one uncompressed gRPC message.
func grpcMessage(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
}

// request writes a whole unary request.
func (w *wire) request(id uint32, method string, m proto.Message) {
	w.headers(true, id, false, ":method", "POST", ":path", method, "content-type", "application/grpc",
		"grpc-timeout", strconv.Itoa(int(id))+"m")
	w.check(w.cfr.WriteData(id, true, grpcMessage(w.t, m)))
}

// reply writes a whole unary reply: headers, the message unless nil, trailers.
func (w *wire) reply(id uint32, m proto.Message, code codes.Code) {
	w.headers(false, id, false, ":status", "200", "content-type", "application/grpc")
	if m != nil {
		w.check(w.dfr.WriteData(id, false, grpcMessage(w.t, m)))
	}
	w.headers(false, id, true, "grpc-status", strconv.Itoa(int(code)))
}

type tapUnderTest struct {
	tap *Tap
	tc  *TapConn
	rec *countingRecorder
	obs []Observation
	mu  sync.Mutex
}

func newTapUnderTest() *tapUnderTest {
	u := &tapUnderTest{rec: &countingRecorder{}}
	u.tap = NewTap(ObserverFunc(func(o Observation) { u.mu.Lock(); u.obs = append(u.obs, o); u.mu.Unlock() }), u.rec, 4096)
	u.tc = u.tap.NewConn()
	return u
}

// feed hands what the wire holds to the tap, client side first, and empties
// it; it returns once the tap has parsed it all.
func (u *tapUnderTest) feed(w *wire) {
	feedParsed(u.tc, u.tc.FromClient(), w.client.Bytes())
	feedParsed(u.tc, u.tc.FromDriver(), w.driver.Bytes())
	w.client.Reset()
	w.driver.Reset()
}

// feedDriverFirst is feed with the driver's bytes parsed first.
func (u *tapUnderTest) feedDriverFirst(w *wire) {
	feedParsed(u.tc, u.tc.FromDriver(), w.driver.Bytes())
	w.driver.Reset()
	u.feed(w)
}

// feedParsed feeds b to sink in the relay's reads (relayBufferBytes at
// most), each parsed before the next is fed, as a relay whose parser keeps
// up would.
func feedParsed(tc *TapConn, sink byteSink, b []byte) { feedParsedAt(tc, sink, b, time.Now()) }

// feedParsedAt is feedParsed with every read at the time at.
func feedParsedAt(tc *TapConn, sink byteSink, b []byte, at time.Time) {
	for len(b) > 0 {
		n := min(len(b), relayBufferBytes)
		sink.Feed(b[:n], at)
		tc.handoff.drain()
		b = b[n:]
	}
}

func (u *tapUnderTest) records() int {
	u.tc.mu.Lock()
	defer u.tc.mu.Unlock()
	return len(u.tc.calls)
}

func (u *tapUnderTest) close() []Observation {
	u.tc.Close()
	u.tap.Close()
	return u.obs
}

// Only request headers open a call: WINDOW_UPDATE, PRIORITY, a client's DATA
// without headers, and any frame of a finished stream keep nothing; a
// thousand finished calls leave no record behind.
func TestOnlyRequestHeadersOpenCalls(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.check(w.cfr.WriteSettings())
	w.check(w.cfr.WriteWindowUpdate(1, 100))
	w.check(w.cfr.WritePriority(3, http2.PriorityParam{Weight: 1}))
	w.check(w.cfr.WriteData(5, false, []byte("x")))
	w.check(w.dfr.WriteWindowUpdate(7, 100))
	w.check(w.dfr.WritePriority(9, http2.PriorityParam{Weight: 1}))
	u.feed(w)
	if n := u.records(); n != 0 {
		t.Fatalf("%d call records from frames that open no call", n)
	}
	for id := uint32(11); id < 11+2*1000; id += 2 {
		w.request(id, MethodDeleteVolume, &csi.DeleteVolumeRequest{VolumeId: "v"})
		w.reply(id, &csi.DeleteVolumeResponse{}, codes.OK)
		w.check(w.dfr.WriteWindowUpdate(id, 10))
		w.check(w.cfr.WriteRSTStream(id, http2.ErrCodeCancel))
		w.check(w.dfr.WriteData(id, true, []byte("late")))
	}
	u.feed(w)
	if n := u.records(); n != 0 {
		t.Fatalf("%d call records held after 1000 finished calls", n)
	}
	if obs := u.close(); len(obs) != 1000 {
		t.Fatalf("%d observations, want 1000", len(obs))
	}
}

// Read in the relay's order a reply never comes before its request, so a
// driver frame of a stream the client has not opened is a driver speaking
// of nothing: however many such frames, they open no record, hold nothing
// and give up nothing; a stream the client opens later is followed whole.
func TestDriverFramesOfUnopenedStreamsKeepNothing(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	for id := uint32(101); id < 101+2*20000; id += 2 {
		w.reply(id, &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v"}}, codes.OK)
		w.check(w.dfr.WriteRSTStream(id, http2.ErrCodeCancel))
	}
	u.feed(w)
	if n := u.records(); n != 0 || len(u.rec.abandoned) > 0 || len(u.rec.finished) > 0 {
		t.Fatalf("%d records, abandoned %v, finished %v from frames of streams nobody opened", n, u.rec.abandoned, u.rec.finished)
	}
	w.request(1001, MethodCreateVolume, &csi.CreateVolumeRequest{Name: "n"})
	w.reply(1001, &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "later"}}, codes.OK)
	u.feed(w)
	obs := u.close()
	if len(obs) != 1 || obs[0].Response.VolumeID != "later" || obs[0].Request.Name != "n" {
		t.Fatalf("observations %+v, want the later CreateVolume whole", obs)
	}
}

const MethodProbe = "/csi.v1.Identity/Probe"

// A decoded method whose message cannot be decoded is counted by reason and
// never published with empty fields; its timing is still recorded.
func TestUndecodableCallsAreCountedNotPublished(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	send := func(id uint32, body []byte) {
		w.headers(true, id, false, ":path", MethodCreateVolume)
		w.check(w.cfr.WriteData(id, true, body))
		w.reply(id, nil, codes.Internal)
	}
	send(1, []byte{1, 0, 0, 0, 1, 0})                                    // compressed
	send(3, []byte{0, 0, 0, 0, 3, 0x0a, 0x05, 'x'})                      // name field cut short
	send(5, binary.BigEndian.AppendUint32([]byte{0}, maxMessageBytes+1)) // too large
	w.headers(true, 7, false, ":path", MethodCreateVolume)
	w.check(w.cfr.WriteData(7, false, []byte{0, 0, 0, 0, 9, 1})) // ends inside the message
	w.check(w.cfr.WriteRSTStream(7, http2.ErrCodeCancel))
	u.feed(w)
	if obs := u.close(); len(obs) != 0 {
		t.Fatalf("published %+v", obs)
	}
	want := []string{UndecodedCompressed, UndecodedMalformed, UndecodedTooLarge, UndecodedTruncated}
	if !equalSets(u.rec.undecoded, want) || len(u.rec.finished) != 4 {
		t.Fatalf("undecoded %v (want %v), %d timings recorded (want 4)", u.rec.undecoded, want, len(u.rec.finished))
	}
}

func equalSets(a, b []string) bool {
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

// selectingObserver takes only the decoded methods' calls.
type selectingObserver struct{ got []Observation }

func (s *selectingObserver) Observe(o Observation)       { s.got = append(s.got, o) }
func (s *selectingObserver) Observes(method string) bool { return DecodedMethod(method) }

// An Observer that selects methods gets only those; every call is still
// timed for the Recorder.
func TestObserverSelectsMethods(t *testing.T) {
	obs, rec := &selectingObserver{}, &countingRecorder{}
	tap := NewTap(Observers{obs}, rec, 16)
	tc := tap.NewConn()
	w := newWire(t)
	w.request(1, MethodProbe, &csi.ProbeRequest{})
	w.reply(1, &csi.ProbeResponse{}, codes.OK)
	w.request(3, MethodDeleteVolume, &csi.DeleteVolumeRequest{VolumeId: "v"})
	w.reply(3, &csi.DeleteVolumeResponse{}, codes.OK)
	tc.FromClient().Feed(w.client.Bytes(), time.Now())
	tc.FromDriver().Feed(w.driver.Bytes(), time.Now())
	tc.Close()
	tap.Close()
	if len(obs.got) != 1 || obs.got[0].Method != MethodDeleteVolume || len(rec.finished) != 2 {
		t.Fatalf("observed %+v with %d calls timed; want only the DeleteVolume, both timed", obs.got, len(rec.finished))
	}
}

// Many calls in flight on one long connection: each round the client
// opens 100 streams and the driver then answers them all. Every call is
// followed whole (issue 38: with the two directions parsed apart, more than
// 64 replies ahead of their requests were only counted as undecoded); no
// call outlives its stream and no budget stays held.
func TestManyRepliesInFlightAreAllFollowed(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	const rounds, perRound = 40, 100
	id := uint32(1)
	for range rounds {
		first := id
		for range perRound {
			w.request(id, MethodCreateVolume, &csi.CreateVolumeRequest{Name: "n"})
			id += 2
		}
		for s := first; s < id; s += 2 {
			w.reply(s, &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v"}}, codes.OK)
		}
		u.feed(w)
		if n := u.records(); n != 0 {
			t.Fatalf("%d call records outlive their streams", n)
		}
	}
	obs := u.close()
	if left := u.tap.budget.left.Load(); left != maxBufferedBytes {
		t.Fatalf("budget %d left of %d after every stream ended", left, maxBufferedBytes)
	}
	for _, o := range obs {
		if o.Code != codes.OK || o.Response.VolumeID != "v" || o.Request.Name != "n" {
			t.Fatalf("observation %+v, want every call whole and OK", o)
		}
	}
	if len(obs) != rounds*perRound || len(u.rec.undecoded) > 0 || len(u.rec.abandoned) > 0 {
		t.Fatalf("%d observations, undecoded %v, abandoned %v; want %d, none, none",
			len(obs), u.rec.undecoded, u.rec.abandoned, rounds*perRound)
	}
}

// A driver's grpc-message may fill a whole header block (256 KiB); a call
// record keeps at most maxStatusMessageBytes of it, still valid UTF-8.
func TestStatusMessagesAreBounded(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.request(1, MethodDeleteVolume, &csi.DeleteVolumeRequest{VolumeId: "v"})
	w.headers(false, 1, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "13",
		"grpc-message", strings.Repeat("%C3%A9", 40000))
	u.feed(w)
	obs := u.close()
	if len(obs) != 1 || len(obs[0].Message) > maxStatusMessageBytes || !utf8.ValidString(obs[0].Message) ||
		!strings.HasPrefix(obs[0].Message, "éé") {
		t.Fatalf("observations %+v: want one, its message cut to at most %d bytes of valid UTF-8", obs, maxStatusMessageBytes)
	}
}

// Request bytes copied in the filter's verbatim mode (a field header it
// cannot parse) are wiped when the message is let go, whatever size the
// buffer grew to.
func TestVerbatimRequestBytesAreWiped(t *testing.T) {
	b := newBudget(maxBufferedBytes)
	body := append([]byte{0x0f}, bytes.Repeat([]byte("s3cr3t"), 830)...) // wire type 7: copied verbatim
	m := message{method: MethodCreateVolume, acct: account{share: &share{}}}
	if reason := m.feed(append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body))), body...), b); reason != "" {
		t.Fatalf("feed: %s", reason)
	}
	kept := m.body[:cap(m.body)]
	if !bytes.Contains(kept, []byte("s3cr3t")) {
		t.Fatal("the verbatim copy holds no request bytes: the test shows nothing")
	}
	m.free(b, true)
	if i := slices.IndexFunc(kept, func(c byte) bool { return c != 0 }); i >= 0 {
		t.Fatalf("byte %d of the request's %d-byte buffer not wiped", i, len(kept))
	}
}

// A refused stream whose request had not begun to cross is settled when
// the client opens another stream of its method, as if that were its
// retry; but the client may have opened that stream before it read the
// refusal, and go on sending the refused request after it. grpc-go had
// committed that call if the request is over its replay buffer: the
// client saw Unavailable, whatever the order the relay read the frames in
// (TestTapDifferential found it: CSI_CLONE_DIFF_SEED=1796574929956383537).
func TestRefusedRequestSizedAfterAnotherStreamOpenedFailsOnce(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	big := grpcMessage(t, &csi.CreateVolumeRequest{Name: "big", Parameters: map[string]string{"p": strings.Repeat("x", maxRetryReplayBytes)}})
	w.headers(true, 7, false, ":method", "POST", ":path", MethodCreateVolume, "content-type", "application/grpc")
	u.feed(w)
	w.check(w.dfr.WriteRSTStream(7, http2.ErrCodeRefusedStream))
	u.feed(w)
	w.request(9, MethodCreateVolume, &csi.CreateVolumeRequest{Name: "other"})
	for len(big) > 0 {
		n := min(len(big), 16<<10)
		w.check(w.cfr.WriteData(7, n == len(big), big[:n]))
		big = big[n:]
	}
	u.feed(w)
	w.reply(9, &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v"}}, codes.OK)
	u.feed(w)
	u.close()
	slices.Sort(u.rec.finished)
	if want := []codes.Code{codes.OK, codes.Unavailable}; !slices.Equal(u.rec.finished, want) {
		t.Fatalf("recorded %v, want %v: the refused request over the replay buffer is the Unavailable call the client saw", u.rec.finished, want)
	}
}
