package sidecar_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// diffProcs are the GOMAXPROCS the differential's sessions run at in turn:
// the sidecar has no CPU limit, so in production it is the node's cores.
var diffProcs = []int{2, 4, 8}

// TestTapDifferential feeds random sessions (differential_gen_test.go) to a
// tap and checks that it reports exactly the calls that were made. It runs
// for CSI_CLONE_DIFF_TIME (a Go duration, 3s by default); each session is
// a function of its seed, printed on failure: CSI_CLONE_DIFF_SEED=<seed>
// replays from that session on. Sessions of odd seeds are fed by two
// goroutines, one per direction, as the relay feeds them; their replay has
// the same bytes in the same chunks, not necessarily in the same order.
// Sessions run at each of diffProcs in turn.
func TestTapDifferential(t *testing.T) {
	budget := diffEnvDuration(t, "CSI_CLONE_DIFF_TIME", 3*time.Second)
	seed := diffEnvSeed(t)
	var sessions, calls, failing int
	tags := map[string]int{}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for deadline := time.Now().Add(budget); time.Now().Before(deadline); sessions++ {
		s := generateDiffSession(seed+uint64(sessions), nil)
		calls += len(s.calls)
		concurrent := s.seed%2 == 1
		procs := diffProcs[s.seed/2%uint64(len(diffProcs))]
		runtime.GOMAXPROCS(procs)
		problems := runDiffSession(s, concurrent)
		if len(problems) == 0 {
			continue
		}
		failing++
		for _, p := range problems {
			if p.call != nil {
				for _, tag := range p.call.tags {
					tags[tag]++
				}
			}
		}
		if failing <= 3 {
			t.Errorf("session with seed %d (CSI_CLONE_DIFF_SEED=%d to replay; fed concurrently: %v, GOMAXPROCS %d): %d mismatches\n%s",
				s.seed, s.seed, concurrent, procs, len(problems), describeDiffSession(s, problems))
		}
	}
	t.Logf("checked %d sessions, %d calls, in %v (seed %d)", sessions, calls, budget, seed)
	if failing > 0 {
		t.Errorf("%d of %d sessions mismatched; tags of the calls concerned: %v", failing, sessions, tags)
	}
}

// TestDifferentialGeneratorIsSound decodes generated sessions with x/net's
// Framer and HPACK decoder and checks that they carry exactly the calls the
// generator meant, in valid HTTP/2: otherwise a mismatch of the differential
// test could be the generator's fault.
func TestDifferentialGeneratorIsSound(t *testing.T) {
	seed := diffEnvSeed(t)
	for i := range uint64(100) {
		s := generateDiffSession(seed+i, nil)
		if err := diffCheckWire(s); err != nil {
			t.Fatalf("seed %d: %v", s.seed, err)
		}
	}
}

// The comparison is not vacuous: the same sessions, each with a deliberate
// defect in the tap's input, must be reported as mismatches, and the call
// concerned must be among them.
func TestDifferentialFindsDefects(t *testing.T) {
	defects := map[string]func() diffDefect{
		"reply headers dropped":   func() diffDefect { return &diffDropReplyHeaders{} },
		"request byte corrupted":  func() diffDefect { return &diffCorruptRequest{} },
		"response DATA truncated": func() diffDefect { return &diffTruncateResponse{} },
	}
	seed := diffEnvSeed(t)
	for name, newDefect := range defects {
		t.Run(name, func(t *testing.T) {
			applied := 0
			for i := range uint64(100) {
				d := newDefect()
				s := generateDiffSession(seed+i, d)
				if !slices.ContainsFunc(s.calls, func(c *diffCall) bool { return c.defected }) {
					continue
				}
				applied++
				problems := runDiffSession(s, false)
				for _, c := range s.calls {
					// Calls expected to report the same are interchangeable:
					// the mismatch may name any of them.
					if c.defected && !slices.ContainsFunc(problems, func(p diffProblem) bool { return p.call != nil && p.call.reportsAs(c) }) {
						t.Fatalf("seed %d: the defect in the call on stream %d went unnoticed (%d other mismatches)", s.seed, c.id, len(problems))
					}
				}
			}
			if applied < 25 {
				t.Fatalf("defect applied to only %d of 100 sessions", applied)
			}
		})
	}
}

func diffEnvDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func diffEnvSeed(t *testing.T) uint64 {
	v := os.Getenv("CSI_CLONE_DIFF_SEED")
	if v == "" {
		return uint64(time.Now().UnixNano())
	}
	s, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("CSI_CLONE_DIFF_SEED=%q: %v", v, err)
	}
	return s
}

// diffRecorder keeps everything the tap records.
type diffRecorder struct {
	mu                   sync.Mutex
	finished             []string // method and code of each finished call
	undecoded, abandoned []string
	dropped, tapped      int
}

func (r *diffRecorder) CallFinished(m string, c codes.Code, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished = append(r.finished, m+" "+c.String())
}

// CallUndecoded is the Recorder method the rewritten tap calls for a call
// of a decoded method whose messages it could not decode.
func (r *diffRecorder) CallUndecoded(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.undecoded = append(r.undecoded, reason)
}

func (r *diffRecorder) ConnectionTapped() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tapped++
}

func (r *diffRecorder) ConnectionAbandoned(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.abandoned = append(r.abandoned, reason)
}

func (r *diffRecorder) ObservationDropped() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropped++
}

// runDiffSession feeds a session to a fresh tap and compares.
func runDiffSession(s *diffSession, concurrent bool) []diffProblem {
	rec := &diffRecorder{}
	var mu sync.Mutex
	var got []sidecar.Observation
	tap := sidecar.NewTap(sidecar.ObserverFunc(func(o sidecar.Observation) {
		mu.Lock()
		got = append(got, o)
		mu.Unlock()
	}), rec, len(s.calls)+64)
	tc := tap.NewConn()
	if concurrent {
		feedDiffConcurrently(newDiffGen(^s.seed), s, tc)
	} else {
		feedDiffSession(newDiffGen(^s.seed), s, tc)
	}
	tc.Close()
	tap.Close()
	return compareDiffSession(s, got, rec)
}

// feedDiffSession hands both directions to the tap in chunks of 1 byte to
// 64 KiB, switching direction at random, so either side of a stream may
// arrive first; only the protocol's own causality (diffDep) is kept. Each
// chunk goes through one reused buffer, as the relay's reads do, so a tap
// that keeps a fed slice instead of copying it reads garbage.
func feedDiffSession(g diffGen, s *diffSession, tc *sidecar.TapConn) {
	streams := [2][]byte{s.client, s.driver}
	sinks := [2]interface{ Feed([]byte, time.Time) }{tc.FromClient(), tc.FromDriver()}
	var fed, next [2]int
	scratch := make([]byte, 64<<10)
	at := time.Unix(1700000000, 0)
	for fed[0] < len(streams[0]) || fed[1] < len(streams[1]) {
		d := g.IntN(2)
		end := diffFeedLimit(s, streams, fed, next[:], d)
		if end == fed[d] {
			d = 1 - d
			end = diffFeedLimit(s, streams, fed, next[:], d)
		}
		n := min(1+g.IntN(1<<g.IntN(17)), end-fed[d])
		if n == 0 {
			panic("feeder: both directions wait for each other")
		}
		copy(scratch, streams[d][fed[d]:fed[d]+n])
		at = at.Add(time.Duration(g.IntN(1000)) * time.Microsecond)
		sinks[d].Feed(scratch[:n], at)
		clear(scratch[:n])
		fed[d] += n
	}
}

// feedDiffConcurrently feeds each direction from a goroutine of its own,
// as the relay does, in chunks of 1 byte to 64 KiB; a direction waits at
// its diffDep points for the other one.
func feedDiffConcurrently(g diffGen, s *diffSession, tc *sidecar.TapConn) {
	streams := [2][]byte{s.client, s.driver}
	sinks := [2]interface{ Feed([]byte, time.Time) }{tc.FromClient(), tc.FromDriver()}
	var mu sync.Mutex
	progress := sync.NewCond(&mu)
	var fed [2]int
	var wg sync.WaitGroup
	for d := range 2 {
		g := newDiffGen(g.Uint64())
		wg.Go(func() {
			scratch := make([]byte, 64<<10)
			from := 0
			for _, dep := range append(slices.Clip(s.deps[d]), diffDep{at: len(streams[d])}) {
				for from < dep.at {
					n := min(1+g.IntN(1<<g.IntN(17)), dep.at-from)
					copy(scratch, streams[d][from:from+n])
					sinks[d].Feed(scratch[:n], time.Now())
					clear(scratch[:n])
					from += n
					mu.Lock()
					fed[d] = from
					progress.Broadcast()
					mu.Unlock()
				}
				mu.Lock()
				for fed[1-d] < dep.need {
					progress.Wait()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// diffFeedLimit is how far direction d may be fed now: to its end, or to the
// next point that waits for the other direction.
func diffFeedLimit(s *diffSession, streams [2][]byte, fed [2]int, next []int, d int) int {
	for next[d] < len(s.deps[d]) {
		dep := s.deps[d][next[d]]
		if fed[1-d] < dep.need {
			return dep.at
		}
		next[d]++
	}
	return len(streams[d])
}

// diffProblem is one mismatch; call is the expected call concerned, nil
// for an unexpected observation or a recorder mismatch.
type diffProblem struct {
	call *diffCall
	text string
}

// compareDiffSession checks the observations and the recorder against the
// calls: as multisets, since calls without a key (undecoded methods) can
// be told apart only by what they report, ignoring Start and End.
func compareDiffSession(s *diffSession, got []sidecar.Observation, rec *diffRecorder) []diffProblem {
	var problems []diffProblem
	byKey := map[string][]sidecar.Observation{}
	for _, o := range got {
		if strings.Contains(fmt.Sprintf("%#v", o), diffSecret) {
			problems = append(problems, diffProblem{text: "observation holds a secret: " + diffObsString(o)})
		}
		byKey[diffObsKey(o)] = append(byKey[diffObsKey(o)], o)
	}
	// Calls whose message is given first, so that a call whose message
	// the contract leaves open cannot take their observation.
	want := slices.Clone(s.calls)
	slices.SortStableFunc(want, func(a, b *diffCall) int { return diffBool(a.anyMessage) - diffBool(b.anyMessage) })
	for _, c := range want {
		if !c.published {
			continue
		}
		k := diffObsKey(c.want)
		i := slices.IndexFunc(byKey[k], func(o sidecar.Observation) bool { return c.anyMessage || o.Message == c.want.Message })
		if i < 0 {
			problems = append(problems, diffProblem{call: c, text: "missing: " + diffObsString(c.want)})
			continue
		}
		byKey[k] = slices.Delete(byKey[k], i, i+1)
	}
	for _, rest := range byKey {
		for _, o := range rest {
			problems = append(problems, diffProblem{text: "unexpected: " + diffObsString(o)})
		}
	}
	return append(problems, compareDiffRecorder(s, rec)...)
}

// reportsAs tells whether c and o may be reported alike, so that the
// comparison may take one for the other.
func (c *diffCall) reportsAs(o *diffCall) bool {
	sameMessage := c.want.Message == o.want.Message || c.anyMessage || o.anyMessage
	return c == o || diffObsKey(c.want) == diffObsKey(o.want) && sameMessage && c.finished == o.finished
}

func diffBool(b bool) int {
	if b {
		return 1
	}
	return 0
}

// diffObsKey is everything compared but Message and the times.
func diffObsKey(o sidecar.Observation) string {
	return fmt.Sprintf("%q %v %#v %#v", o.Method, o.Code, o.Request, o.Response)
}

func diffObsString(o sidecar.Observation) string {
	return fmt.Sprintf("%q %v %q %+v %+v", o.Method, o.Code, o.Message, o.Request, o.Response)
}

// compareDiffRecorder checks what the recorder got: every finished call
// (refused and GOAWAY ones excepted) once, each undecodable one counted,
// the connection never abandoned and no observation dropped.
func compareDiffRecorder(s *diffSession, rec *diffRecorder) []diffProblem {
	var problems []diffProblem
	finished := slices.Clone(rec.finished)
	undecodable := 0
	for _, c := range s.calls {
		if c.undecodable {
			undecodable++
		}
		if !c.finished {
			continue
		}
		want := c.want.Method + " " + c.want.Code.String()
		if i := slices.Index(finished, want); i >= 0 {
			finished = slices.Delete(finished, i, i+1)
		} else {
			problems = append(problems, diffProblem{call: c, text: "not reported to CallFinished: " + want})
		}
	}
	for _, f := range finished {
		problems = append(problems, diffProblem{text: "unexpected CallFinished: " + f})
	}
	if len(rec.undecoded) != undecodable || slices.Contains(rec.undecoded, "") {
		problems = append(problems, diffProblem{text: fmt.Sprintf("CallUndecoded %q, want %d undecodable calls", rec.undecoded, undecodable)})
	}
	if len(rec.abandoned) > 0 || rec.dropped > 0 || rec.tapped != 1 {
		problems = append(problems, diffProblem{text: fmt.Sprintf("connection abandoned %q, %d observations dropped, tapped %d times",
			rec.abandoned, rec.dropped, rec.tapped)})
	}
	return problems
}

// describeDiffSession lists the calls and the mismatches, and whether x/net
// reads the session as generated (if not, suspect the generator first).
func describeDiffSession(s *diffSession, problems []diffProblem) string {
	var b strings.Builder
	selfCheck := "ok"
	if err := diffCheckWire(s); err != nil {
		selfCheck = err.Error()
	}
	fmt.Fprintf(&b, "  generator self-check: %s; GOAWAY %v (last stream %d); %d+%d bytes\n", selfCheck, s.goaway, s.lastID, len(s.client), len(s.driver))
	for _, c := range s.calls {
		fmt.Fprintf(&b, "  stream %d %v published=%v: %s\n", c.id, c.tags, c.published, diffObsString(c.want))
	}
	for _, p := range problems {
		where := ""
		if p.call != nil {
			where = fmt.Sprintf("stream %d %v: ", p.call.id, p.call.tags)
		}
		fmt.Fprintf(&b, "  MISMATCH %s%s\n", where, p.text)
	}
	return b.String()
}

// diffCheckWire reads both directions back with x/net and compares every
// stream with the calls, the size updates with what the peer allowed, and
// the GOAWAY with the calls it refuses.
func diffCheckWire(s *diffSession) error {
	if !bytes.HasPrefix(s.client, []byte(http2.ClientPreface)) {
		return errors.New("client bytes do not start with the preface")
	}
	dirs := [2][]byte{s.client[len(http2.ClientPreface):], s.driver}
	var read [2]*diffRead
	for d := range 2 {
		advertised, err := diffAdvertisedTables(dirs[1-d])
		if err != nil {
			return err
		}
		if read[d], err = diffReadDirection(dirs[d], advertised); err != nil {
			return fmt.Errorf("direction %d: %w", d, err)
		}
	}
	for _, c := range s.calls {
		client := c.client
		if c.reaction != 0 {
			client.reset, client.code = true, c.reaction
		}
		if err := diffSameHalf(client, read[0].streams[c.id]); err != nil {
			return fmt.Errorf("client side of stream %d: %w", c.id, err)
		}
		if err := diffSameHalf(c.driver, read[1].streams[c.id]); err != nil {
			return fmt.Errorf("driver side of stream %d: %w", c.id, err)
		}
		delete(read[0].streams, c.id)
		delete(read[1].streams, c.id)
	}
	if len(read[0].streams)+len(read[1].streams) > 0 {
		return errors.New("frames on streams of no call")
	}
	return diffCheckGoaway(s, read[1].goaways)
}

func diffCheckGoaway(s *diffSession, goaways []uint32) error {
	if !s.goaway {
		if len(goaways) > 0 {
			return errors.New("unplanned GOAWAY")
		}
		return nil
	}
	if len(goaways) == 0 || goaways[len(goaways)-1] != s.lastID {
		return fmt.Errorf("GOAWAYs %v, want last stream %d", goaways, s.lastID)
	}
	for _, c := range s.calls {
		refused := c.id > s.lastID
		if refused != (c.outcome == outGoaway) || (refused && len(c.driver.blocks)+len(c.driver.data) > 0) {
			return fmt.Errorf("stream %d on the wrong side of GOAWAY %d", c.id, s.lastID)
		}
	}
	return nil
}

// diffAdvertisedTables lists the SETTINGS_HEADER_TABLE_SIZE of each SETTINGS
// frame of a direction, -1 for a frame without one.
func diffAdvertisedTables(b []byte) ([]int64, error) {
	fr := http2.NewFramer(nil, bytes.NewReader(b))
	var out []int64
	for {
		f, err := fr.ReadFrame()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		table := int64(-1)
		if v, ok := sf.Value(http2.SettingHeaderTableSize); ok {
			table = int64(v)
		}
		out = append(out, table)
	}
}

// diffRead is one direction as x/net reads it.
type diffRead struct {
	streams map[uint32]*diffHalf
	goaways []uint32
	dec     *hpack.Decoder
	// limit is the table size the peer allows, from its SETTINGS as this
	// side acknowledged them; table the size in use. mustUpdate is set when
	// the limit shrank below it: the next block must start with an update.
	limit, table uint32
	mustUpdate   bool
	block        []byte
}

func diffReadDirection(b []byte, advertised []int64) (*diffRead, error) {
	fr := http2.NewFramer(nil, bytes.NewReader(b))
	fr.SetMaxReadFrameSize(diffMaxFrame)
	r := &diffRead{streams: map[uint32]*diffHalf{}, dec: hpack.NewDecoder(4096, nil), limit: 4096, table: 4096}
	acks := 0
	for {
		f, err := fr.ReadFrame()
		if err == io.EOF {
			return r, nil
		}
		if err != nil {
			return nil, err
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && sf.IsAck() {
			if acks >= len(advertised) {
				return nil, errors.New("SETTINGS ACK of no SETTINGS")
			}
			r.acknowledged(advertised[acks])
			acks++
		}
		if err := r.frame(f); err != nil {
			return nil, fmt.Errorf("%v: %w", f.Header(), err)
		}
	}
}

func (r *diffRead) acknowledged(table int64) {
	if table < 0 {
		return
	}
	r.limit = uint32(table)
	r.mustUpdate = r.limit < r.table
	r.dec.SetAllowedMaxDynamicTableSize(r.limit)
}

func (r *diffRead) half(id uint32) *diffHalf {
	if r.streams[id] == nil {
		r.streams[id] = &diffHalf{}
	}
	return r.streams[id]
}

func (r *diffRead) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		r.block = append(r.block[:0], f.HeaderBlockFragment()...)
		r.half(f.StreamID).endOnBlock = f.StreamEnded()
		if f.HeadersEnded() {
			return r.endBlock(f.StreamID)
		}
	case *http2.ContinuationFrame:
		r.block = append(r.block, f.HeaderBlockFragment()...)
		if f.HeadersEnded() {
			return r.endBlock(f.StreamID)
		}
	case *http2.DataFrame:
		h := r.half(f.StreamID)
		h.data = append(h.data, f.Data()...)
		h.endOnData = h.endOnData || f.StreamEnded()
	case *http2.RSTStreamFrame:
		h := r.half(f.StreamID)
		h.reset, h.code = true, f.ErrCode
	case *http2.GoAwayFrame:
		r.goaways = append(r.goaways, f.LastStreamID)
	}
	return nil
}

// endBlock decodes a complete header block. Its leading table size updates
// are applied here, checked against the peer's allowance: x/net's decoder
// refuses RFC 7541's pair of updates (smallest, then final) that its own
// encoder sends whenever the first leaves entries in the table.
func (r *diffRead) endBlock(id uint32) error {
	block := r.block
	for len(block) > 0 && block[0]&0xe0 == 0x20 {
		size, n, err := diffHPACKInteger(block, 5)
		if err != nil {
			return err
		}
		if size > uint64(r.limit) {
			return fmt.Errorf("table size update to %d beyond the %d allowed", size, r.limit)
		}
		r.dec.SetMaxDynamicTableSize(uint32(size))
		r.table, r.mustUpdate, block = uint32(size), false, block[n:]
	}
	if r.mustUpdate {
		return errors.New("no table size update after the allowance shrank")
	}
	fields, err := r.dec.DecodeFull(block)
	if err != nil {
		return err
	}
	if err := diffValidFields(fields); err != nil {
		return err
	}
	h := r.half(id)
	if h.data == nil {
		h.dataAfter++
	}
	h.blocks = append(h.blocks, fields)
	return nil
}

// diffHPACKInteger reads an RFC 7541 section 5.1 integer with an n-bit prefix.
func diffHPACKInteger(b []byte, n uint) (uint64, int, error) {
	limit := uint64(1)<<n - 1
	v := uint64(b[0]) & limit
	if v < limit {
		return v, 1, nil
	}
	for i, shift := 1, uint(0); i < len(b) && shift < 63; i, shift = i+1, shift+7 {
		v += uint64(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("HPACK integer cut short")
}

// diffValidFields checks a header list as HTTP/2 requires it: lowercase valid
// names, pseudo-header fields first, valid values.
func diffValidFields(fields []hpack.HeaderField) error {
	regular := false
	for _, f := range fields {
		pseudo := strings.HasPrefix(f.Name, ":")
		name := strings.TrimPrefix(f.Name, ":")
		switch {
		case pseudo && regular:
			return fmt.Errorf("pseudo-header %s after a regular field", f.Name)
		case !httpguts.ValidHeaderFieldName(name) || strings.ToLower(name) != name:
			return fmt.Errorf("invalid field name %q", f.Name)
		case !httpguts.ValidHeaderFieldValue(f.Value):
			return fmt.Errorf("invalid value of %s", f.Name)
		}
		regular = regular || !pseudo
	}
	return nil
}

// diffSameHalf compares what was read of one side of a stream with the plan.
func diffSameHalf(want diffHalf, got *diffHalf) error {
	if got == nil {
		got = &diffHalf{}
	}
	if len(want.data) > 0 && got.dataAfter != want.dataAfter {
		return fmt.Errorf("%d header blocks before the data, want %d", got.dataAfter, want.dataAfter)
	}
	switch {
	case !slices.EqualFunc(want.blocks, got.blocks, slices.Equal):
		return fmt.Errorf("header blocks %q, want %q", got.blocks, want.blocks)
	case !bytes.Equal(want.data, got.data):
		return fmt.Errorf("%d data bytes differ from the %d sent", len(got.data), len(want.data))
	case want.endOnData != got.endOnData || want.endOnBlock != got.endOnBlock:
		return fmt.Errorf("END_STREAM on data %v, on headers %v; want %v, %v", got.endOnData, got.endOnBlock, want.endOnData, want.endOnBlock)
	case want.reset != got.reset || want.code != got.code:
		return fmt.Errorf("reset %v %v, want %v %v", got.reset, got.code, want.reset, want.code)
	}
	return nil
}

// diffDropReplyHeaders never sends the driver's header blocks (its status
// among them) of one call, so that it looks open at close; HPACK stays
// consistent, since the blocks are never encoded.
type diffDropReplyHeaders struct{}

func (*diffDropReplyHeaders) beforeEncoding(s *diffSession) {
	for _, c := range s.calls {
		if len(c.driver.blocks) > 0 && c.published && !c.client.reset && !c.driver.reset && c.reaction == 0 && c.want.Code != codes.Unavailable {
			c.driver.blocks, c.driver.dataAfter, c.driver.endOnBlock = nil, 0, false
			c.defected = true
			return
		}
	}
}

func (*diffDropReplyHeaders) afterEncoding(*diffSession) {}

// diffCorruptRequest changes one byte of a decoded call's unique key inside a
// request DATA frame: framing and protobuf stay valid, the field does not.
type diffCorruptRequest struct{}

func (*diffCorruptRequest) beforeEncoding(*diffSession) {}

func (*diffCorruptRequest) afterEncoding(s *diffSession) {
	for _, c := range s.calls {
		if !c.published || c.keyField == "" {
			continue
		}
		if i := bytes.Index(s.client, []byte(c.keyField)); i >= 0 {
			j := i + strings.Index(c.keyField, c.key)
			s.client[j] = 'K' // the key starts with 'k'
			c.defected = true
			return
		}
	}
}

// diffTruncateResponse sends only part of a successful decoded call's response
// message (the frames stay whole, the gRPC message does not).
type diffTruncateResponse struct{}

func (*diffTruncateResponse) beforeEncoding(s *diffSession) {
	for _, c := range s.calls {
		if c.published && c.key != "" && c.want.Code == codes.OK && len(c.driver.data) > 5 {
			c.driver.data = c.driver.data[:len(c.driver.data)-1]
			c.defected = true
			return
		}
	}
}

func (*diffTruncateResponse) afterEncoding(*diffSession) {}
