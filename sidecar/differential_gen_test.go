package sidecar_test

// The differential test's generator: random CSI call sessions, the bytes
// each side of a connection puts on the wire for them, and what the tap must
// make of them. Every frame is written by x/net's http2.Framer and every
// header block by its hpack.Encoder (never by hand), so the tap is checked
// against the encoder gRPC peers actually use, including its choices of
// Huffman or raw literals, indexing and table size updates.

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

const (
	// diffSecret starts every generated secret; no observation may hold it.
	diffSecret = "s3cr3t-diff"
	// diffPVCPrefix is the only parameter prefix an observation keeps.
	diffPVCPrefix = "csi.storage.k8s.io/pvc/"
	// diffMaxFrame is HTTP/2's default SETTINGS_MAX_FRAME_SIZE, the largest
	// frame payload a gRPC peer sends unless told otherwise.
	diffMaxFrame = 16384
	// diffMaxPiece leaves room in a frame for the largest padding (1 length
	// byte + 255) and a HEADERS frame's 5 priority bytes.
	diffMaxPiece = diffMaxFrame - 256 - 5
	// diffOverLimit is beyond the largest message the tap decodes (4 MiB).
	diffOverLimit = 4<<20 + 1024
)

// diffGen is one session's source of randomness; a session is a pure
// function of its seed, so a failure reproduces from the seed alone.
type diffGen struct{ *rand.Rand }

func newDiffGen(seed uint64) diffGen {
	return diffGen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g diffGen) chance(p float64) bool { return g.Float64() < p }

func (g diffGen) pick(s ...string) string { return s[g.IntN(len(s))] }

// token is lowercase text, which Huffman coding shortens.
func (g diffGen) token(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.IntN(len(alphabet))]
	}
	return string(b)
}

// rawText is a valid header field value that Huffman coding makes longer
// (rare symbols and bytes above 0x7f), so x/net writes it as a raw literal.
func (g diffGen) rawText(n int) string {
	const rare = "{}~^|\\`<>#$@"
	b := make([]byte, n)
	for i := range b {
		if g.chance(0.5) {
			b[i] = rare[g.IntN(len(rare))]
		} else {
			b[i] = byte(0x80 + g.IntN(0x80))
		}
	}
	return string(b)
}

// text is valid UTF-8 (as protobuf strings must be) of n runes, mixing
// ASCII with longer encodings.
func (g diffGen) text(n int) string {
	runes := []rune("aZ9 ._/-éü日本🙂")
	b := make([]rune, n)
	for i := range b {
		b[i] = runes[g.IntN(len(runes))]
	}
	return string(b)
}

func (g diffGen) randBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.Uint32())
	}
	return b
}

// key is unique within a run; it names the call's volume or snapshot so
// that its observation can be told from every other one.
func (g diffGen) key() string { return fmt.Sprintf("k%016x", g.Uint64()) }

// diffGRPCFrame is gRPC's length-prefixed message: compressed flag, length.
func diffGRPCFrame(compressed bool, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	if compressed {
		b[0] = 1
	}
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

func diffGzip(p []byte) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(p)
	w.Close()
	return b.Bytes()
}

func diffMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// diffPVCOnly is what an observation keeps of a parameters map.
func diffPVCOnly(params map[string]string) map[string]string {
	var out map[string]string
	for k, v := range params {
		if strings.HasPrefix(k, diffPVCPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// parameters is a StorageClass-like map: the keys external-provisioner
// adds, near misses of the kept prefix, driver keys, sometimes a large value.
func (g diffGen) parameters() map[string]string {
	p := map[string]string{}
	for _, k := range []string{"csi.storage.k8s.io/pvc/name", "csi.storage.k8s.io/pvc/namespace", "csi.storage.k8s.io/pv/name"} {
		if g.chance(0.7) {
			p[k] = g.token(1 + g.IntN(40))
		}
	}
	for range g.IntN(5) {
		k := g.pick("linstor.csi.linbit.com/", "csi.storage.k8s.io/pvcx/", "csi.storage.k8s.io/pvc", "csi.storage.k8s.io/provisioner-secret-", "") + g.token(1+g.IntN(20))
		p[k] = g.pick(g.token(g.IntN(30)), g.text(g.IntN(30)))
	}
	if g.chance(0.02) { // large, but within what the tap decodes
		p["big"] = strings.Repeat(g.text(256), 64+g.IntN(1024))
	}
	return p
}

func (g diffGen) secrets() map[string]string {
	if g.chance(0.2) {
		return nil
	}
	return map[string]string{"password": diffSecret + g.token(8), "user": g.token(5)}
}

func (g diffGen) capacity() *csi.CapacityRange {
	if g.chance(0.15) {
		return nil
	}
	c := &csi.CapacityRange{RequiredBytes: g.Int64N(1 << 42)}
	if g.chance(0.5) {
		c.LimitBytes = c.RequiredBytes + g.Int64N(1<<40)
	}
	return c
}

func (g diffGen) capability(block bool) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_Mode(1 + g.IntN(7))}}
	if block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: g.pick("", "ext4", "xfs"), MountFlags: []string{g.token(4)}}}
	}
	return c
}

func (g diffGen) contentSource() (src *csi.VolumeContentSource, volume, snapshot string) {
	switch g.IntN(3) {
	case 0:
		volume = "vol-" + g.token(12)
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: volume}}}, volume, ""
	case 1:
		snapshot = "snap-" + g.token(12)
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot}}}, "", snapshot
	}
	return nil, "", ""
}

func (g diffGen) topology() []*csi.Topology {
	if g.chance(0.6) {
		return nil
	}
	return []*csi.Topology{{Segments: map[string]string{"topology.kubernetes.io/zone": g.token(6)}}}
}

// diffMessages are a decoded method's request and response and the fields
// the tap must take from them.
type diffMessages struct {
	req, resp         proto.Message
	reqWant           sidecar.Request
	respWant          sidecar.Response
	reqKey, reqKeyFld string // the unique key and the request field carrying it
}

func diffCreateVolume(g diffGen, key string) diffMessages {
	params := g.parameters()
	src, srcVol, srcSnap := g.contentSource()
	req := &csi.CreateVolumeRequest{Name: "pvc-" + key, CapacityRange: g.capacity(), Parameters: params,
		Secrets: g.secrets(), VolumeContentSource: src}
	want := sidecar.Request{Name: req.Name, Parameters: diffPVCOnly(params), RequiredBytes: req.CapacityRange.GetRequiredBytes(),
		LimitBytes: req.CapacityRange.GetLimitBytes(), SourceVolumeID: srcVol, SourceSnapshotID: srcSnap}
	for range 1 + g.IntN(2) {
		c := g.capability(g.chance(0.5))
		want.Block = want.Block || c.GetBlock() != nil
		req.VolumeCapabilities = append(req.VolumeCapabilities, c)
	}
	if g.chance(0.3) {
		req.AccessibilityRequirements = &csi.TopologyRequirement{Preferred: g.topology()}
		req.MutableParameters = map[string]string{"iops": strconv.Itoa(g.IntN(10000))}
	}
	vol := &csi.Volume{VolumeId: "vol-" + key, CapacityBytes: g.Int64N(1 << 42), AccessibleTopology: g.topology(),
		VolumeContext: map[string]string{"ctx": g.token(8)}}
	if g.chance(0.8) {
		vol.ContentSource = src // a driver may leave it out
	}
	respVol, respSnap := vol.GetContentSource().GetVolume().GetVolumeId(), vol.GetContentSource().GetSnapshot().GetSnapshotId()
	return diffMessages{req: req, reqWant: want, reqKey: key, reqKeyFld: req.Name,
		resp: &csi.CreateVolumeResponse{Volume: vol}, respWant: sidecar.Response{VolumeID: vol.VolumeId,
			CapacityBytes: vol.CapacityBytes, SourceVolumeID: respVol, SourceSnapshotID: respSnap}}
}

func diffExpandVolume(g diffGen, key string) diffMessages {
	req := &csi.ControllerExpandVolumeRequest{VolumeId: "vol-" + key, CapacityRange: g.capacity(), Secrets: g.secrets()}
	if g.chance(0.7) {
		req.VolumeCapability = g.capability(g.chance(0.5))
	}
	resp := &csi.ControllerExpandVolumeResponse{CapacityBytes: g.Int64N(1 << 42), NodeExpansionRequired: g.chance(0.5)}
	return diffMessages{req: req, resp: resp, reqKey: key, reqKeyFld: req.VolumeId,
		reqWant: sidecar.Request{VolumeID: req.VolumeId, RequiredBytes: req.CapacityRange.GetRequiredBytes(),
			LimitBytes: req.CapacityRange.GetLimitBytes(), Block: req.VolumeCapability.GetBlock() != nil},
		respWant: sidecar.Response{VolumeID: req.VolumeId, CapacityBytes: resp.CapacityBytes, NodeExpansionRequired: resp.NodeExpansionRequired}}
}

func diffCreateSnapshot(g diffGen, key string) diffMessages {
	params := map[string]string{"csi.storage.k8s.io/volumesnapshot/name": g.token(10)}
	if g.chance(0.3) {
		params = g.parameters()
	}
	req := &csi.CreateSnapshotRequest{SourceVolumeId: "vol-" + g.token(12), Name: "snapshot-" + key, Secrets: g.secrets(), Parameters: params}
	snap := &csi.Snapshot{SizeBytes: g.Int64N(1 << 42), SnapshotId: "snap-" + key, SourceVolumeId: req.SourceVolumeId,
		CreationTime: timestamppb.New(time.Unix(g.Int64N(1<<32), 0)), ReadyToUse: g.chance(0.5)}
	return diffMessages{req: req, reqKey: key, reqKeyFld: req.Name,
		reqWant: sidecar.Request{Name: req.Name, Parameters: diffPVCOnly(params), SourceVolumeID: req.SourceVolumeId},
		resp:    &csi.CreateSnapshotResponse{Snapshot: snap},
		respWant: sidecar.Response{SnapshotID: snap.SnapshotId, SnapshotSizeBytes: snap.SizeBytes,
			SourceVolumeID: snap.SourceVolumeId}}
}

func diffDeleteVolume(g diffGen, key string) diffMessages {
	req := &csi.DeleteVolumeRequest{VolumeId: "vol-" + key, Secrets: g.secrets()}
	return diffMessages{req: req, resp: &csi.DeleteVolumeResponse{}, reqKey: key, reqKeyFld: req.VolumeId,
		reqWant: sidecar.Request{VolumeID: req.VolumeId}}
}

func diffDeleteSnapshot(g diffGen, key string) diffMessages {
	req := &csi.DeleteSnapshotRequest{SnapshotId: "snap-" + key, Secrets: g.secrets()}
	return diffMessages{req: req, resp: &csi.DeleteSnapshotResponse{}, reqKey: key, reqKeyFld: req.SnapshotId,
		reqWant: sidecar.Request{SnapshotID: req.SnapshotId}}
}

// diffDecoded are the methods whose fields the tap decodes, with weights:
// mostly CreateVolume, as on a cluster that clones worker disks.
type diffMethod struct {
	path   string
	weight int
	gen    func(diffGen, string) diffMessages
}

var diffDecoded = []diffMethod{
	{sidecar.MethodCreateVolume, 40, diffCreateVolume},
	{sidecar.MethodControllerExpandVolume, 12, diffExpandVolume},
	{sidecar.MethodCreateSnapshot, 10, diffCreateSnapshot},
	{sidecar.MethodDeleteVolume, 8, diffDeleteVolume},
	{sidecar.MethodDeleteSnapshot, 6, diffDeleteSnapshot},
}

// diffCSIMethods is every method of every service in csi.proto, read from
// the spec's descriptors; diffUndecoded those the tap does not decode.
var diffCSIMethods, diffUndecoded = func() (map[string]bool, []string) {
	all := map[string]bool{}
	var undecoded []string
	services := csi.File_csi_proto.Services()
	for i := range services.Len() {
		s := services.Get(i)
		for j := range s.Methods().Len() {
			m := "/" + string(s.FullName()) + "/" + string(s.Methods().Get(j).Name())
			all[m] = true
			if !slices.ContainsFunc(diffDecoded, func(d diffMethod) bool { return d.path == m }) {
				undecoded = append(undecoded, m)
			}
		}
	}
	slices.Sort(undecoded)
	return all, undecoded
}()

func diffCanonical(path string) string {
	if diffCSIMethods[path] {
		return path
	}
	return sidecar.MethodUnknown
}

// strangePath is a :path that is no CSI method: near misses, other gRPC
// services, and bytes that are not UTF-8 (still a valid field value).
func (g diffGen) strangePath() string {
	switch g.IntN(4) {
	case 0:
		return g.pick(sidecar.MethodCreateVolume+"/", "/csi.v1.controller/CreateVolume", "/csi.v0.Controller/CreateVolume",
			"/csi.v1.Controller/createVolume", "/grpc.health.v1.Health/Check", sidecar.MethodCreateVolume+"\xff", "/")
	case 1:
		return "/csi.v1.Controller/\xc3\x28" + g.token(3)
	}
	b := make([]byte, 1+g.IntN(40))
	for i := range b {
		b[i] = byte(0x20 + g.IntN(0xe0))
		if b[i] == 0x7f {
			b[i] = '/'
		}
	}
	return string(b)
}

// diffOutcome is how a call ends on the wire.
type diffOutcome int

const (
	outOK              diffOutcome = iota // response headers, the message, trailers with grpc-status 0
	outError                              // an error status: trailers-only, or after response headers
	outBadStatus                          // a grpc-status that is not a number
	outStatusThenReset                    // a status, then RST_STREAM(NO_ERROR) as servers end a stream the client never half-closed
	outDriverReset                        // the driver resets the stream before any status
	outClientReset                        // the client resets it (mostly a cancel) before any status
	outOpen                               // no status yet when the connection closes
	outRefused                            // RST_STREAM(REFUSED_STREAM): grpc-go retries it on its own
	outDeadline                           // the client's deadline passes before any status: it cancels
	outGoaway                             // beyond the last stream of the driver's GOAWAY: the client retries it
)

var diffOutcomeNames = [...]string{"ok", "error", "bad-status", "status-then-reset", "driver-reset",
	"client-reset", "open-at-close", "refused", "deadline", "goaway"}

func (g diffGen) outcome() diffOutcome {
	weights := [...]int{45, 20, 4, 5, 7, 7, 6, 3, 4} // every outcome but outGoaway, decided per session
	n := g.IntN(101)
	for o, w := range weights {
		if n < w {
			return diffOutcome(o)
		}
		n -= w
	}
	panic("weights do not add up")
}

// diffBody is a call's path and gRPC payloads (length-prefixed, as sent)
// and, for a decoded method, the fields the tap must take from them.
type diffBody struct {
	path              string
	decoded           bool
	msgs              diffMessages
	req, resp         []byte
	reqGzip, respGzip bool
	spoiled           string // why the tap cannot decode it; "" when it can
}

// body picks the call's method: 76% decoded methods, 14% other CSI
// methods, 10% paths that are no CSI method.
func (g diffGen) body(o diffOutcome) diffBody {
	n := g.IntN(100)
	for _, m := range diffDecoded {
		if n < m.weight {
			return g.decodedBody(m, o)
		}
		n -= m.weight
	}
	if n < 14 {
		return g.opaqueBody(diffUndecoded[g.IntN(len(diffUndecoded))])
	}
	return g.opaqueBody(g.strangePath())
}

// opaqueBody is a call the tap must not decode: random payloads, sometimes
// compressed, sometimes a long ListVolumes-like reply, and under a strange
// path sometimes a real CreateVolume request (with secrets).
func (g diffGen) opaqueBody(path string) diffBody {
	b := diffBody{path: path, reqGzip: g.chance(0.1)}
	payload := g.randBytes(g.IntN(300))
	if !diffCSIMethods[path] && g.chance(0.3) {
		payload = diffMarshal(diffCreateVolume(g, g.key()).req)
	}
	if b.reqGzip {
		payload = diffGzip(payload)
	}
	b.req = diffGRPCFrame(b.reqGzip, payload)
	size := g.IntN(500)
	if g.chance(0.03) {
		size = 64<<10 + g.IntN(1<<20)
	}
	b.resp = diffGRPCFrame(false, g.randBytes(size))
	return b
}

func (g diffGen) decodedBody(m diffMethod, o diffOutcome) diffBody {
	msgs := m.gen(g, g.key())
	b := diffBody{path: m.path, decoded: true, msgs: msgs}
	req, resp := diffMarshal(msgs.req), diffMarshal(msgs.resp)
	b.req, b.resp = diffGRPCFrame(false, req), diffGRPCFrame(false, resp)
	if o != outRefused && o != outGoaway && g.chance(0.08) {
		g.spoil(&b, req, resp, o == outOK)
	}
	return b
}

// spoil makes one of a decoded call's messages undecodable in one of the
// ways the contract names. A response is spoiled only in a successful call:
// a failed call's response is never decoded.
func (g diffGen) spoil(b *diffBody, req, resp []byte, ok bool) {
	if ok && g.chance(0.3) {
		if g.chance(0.5) {
			b.respGzip, b.resp, b.spoiled = true, diffGRPCFrame(true, diffGzip(resp)), "compressed-response"
		} else {
			b.resp, b.spoiled = diffGRPCFrame(false, g.malformed(b.msgs.resp, resp)), "malformed-response"
		}
		return
	}
	switch n := g.IntN(10); {
	case n < 3:
		b.reqGzip, b.req, b.spoiled = true, diffGRPCFrame(true, diffGzip(req)), "compressed-request"
	case n < 6:
		b.req, b.spoiled = diffGRPCFrame(false, g.malformed(b.msgs.req, req)), "malformed-request"
	case n < 9: // the gRPC length prefix promises more than the stream carries
		missing := 1 + g.IntN(10)
		f := diffGRPCFrame(false, append(slices.Clip(req), make([]byte, missing)...))
		b.req, b.spoiled = f[:len(f)-missing], "truncated-request"
	default: // valid protobuf (an unknown field), but over the tap's limit; costly, so rarer
		huge := bytes.Repeat(g.randBytes(1024), diffOverLimit/1024)
		b.req = diffGRPCFrame(false, protowire.AppendBytes(protowire.AppendTag(slices.Clip(req), 999, protowire.BytesType), huge))
		b.spoiled = "request-over-4MiB"
	}
}

// malformed appends bytes protobuf cannot parse, and checks that it cannot.
func (g diffGen) malformed(m proto.Message, msg []byte) []byte {
	bad := [][]byte{
		{0x0f},       // field 1, wire type 7, which does not exist
		{0x0a, 0x7f}, // field 1, 127 bytes that are not there
		{0x08, 0xff}, // a varint cut short
	}[g.IntN(3)]
	out := append(slices.Clip(msg), bad...)
	if proto.Unmarshal(out, m.ProtoReflect().New().Interface()) == nil {
		panic(fmt.Sprintf("generator: %x is valid protobuf", out))
	}
	return out
}

func (g diffGen) field(name, value string) hpack.HeaderField {
	return hpack.HeaderField{Name: name, Value: value, Sensitive: g.chance(0.08)}
}

// metadata is 0-3 custom fields, valued so that Huffman coding sometimes
// shortens them and sometimes does not.
func (g diffGen) metadata() []hpack.HeaderField {
	var out []hpack.HeaderField
	for range g.IntN(4) {
		v := g.token(g.IntN(20))
		if g.chance(0.5) {
			v = g.rawText(1 + g.IntN(20))
		}
		out = append(out, g.field("x-"+g.token(1+g.IntN(10)), v))
	}
	if g.chance(0.02) { // binary metadata must be base64, padded or not
		v := g.pick("AAEC", "AAE", "AA==", "", g.token(1+g.IntN(8)), g.rawText(3))
		out = append(out, g.field("x-"+g.token(1+g.IntN(5))+"-bin", v))
	}
	return out
}

// withPseudo puts the pseudo-header fields first, each list in random
// order, as HTTP/2 requires and allows.
func (g diffGen) withPseudo(pseudo, regular []hpack.HeaderField) []hpack.HeaderField {
	g.Shuffle(len(pseudo), func(i, j int) { pseudo[i], pseudo[j] = pseudo[j], pseudo[i] })
	g.Shuffle(len(regular), func(i, j int) { regular[i], regular[j] = regular[j], regular[i] })
	return append(pseudo, regular...)
}

// requestHeaders are a gRPC client's; grpc-timeout differs on every call,
// as csi-provisioner's per-call deadlines make it, or is absent.
func (g diffGen) requestHeaders(path string, gz bool, timeout string) []hpack.HeaderField {
	pseudo := []hpack.HeaderField{g.field(":method", "POST"), g.field(":scheme", "http"), g.field(":path", path),
		g.field(":authority", g.pick("localhost", "csi.sock"))}
	regular := append([]hpack.HeaderField{
		g.field("content-type", g.pick("application/grpc", "application/grpc+proto")),
		g.field("user-agent", g.pick("grpc-go/1.85.0", "csi-provisioner/v5.3.0 grpc-go/1.72.2", g.rawText(8))),
		g.field("te", "trailers"),
	}, g.metadata()...)
	if timeout != "" {
		regular = append(regular, g.field("grpc-timeout", timeout))
	}
	if gz {
		regular = append(regular, g.field("grpc-encoding", "gzip"))
	}
	if g.chance(0.5) {
		regular = append(regular, g.field("grpc-accept-encoding", "gzip"))
	}
	return g.withPseudo(pseudo, regular)
}

// timeout is a grpc-timeout that no session outlives (an hour or more, in
// every unit grpc-go writes), or none.
func (g diffGen) timeout() string {
	switch g.IntN(5) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("%dH", 1+g.IntN(99999999))
	case 2:
		return fmt.Sprintf("%dM", 60+g.IntN(99999999-60))
	case 3:
		return fmt.Sprintf("%dS", 3600+g.IntN(99999999-3600))
	}
	return fmt.Sprintf("%dm", 3600000+g.IntN(99999999-3600000))
}

// expiredTimeout is a grpc-timeout of at most a millisecond: the client's
// deadline has passed when its cancel reaches the tap.
func (g diffGen) expiredTimeout() string {
	if g.chance(0.5) {
		return fmt.Sprintf("%du", 1+g.IntN(1000))
	}
	return fmt.Sprintf("%dn", 1+g.IntN(1000000))
}

// responseHeaders open a reply; sometimes (wrongly) with a grpc-status,
// which grpc-go ignores in a block that does not end the stream.
func (g diffGen) responseHeaders(gz bool) []hpack.HeaderField {
	regular := append([]hpack.HeaderField{g.field("content-type", "application/grpc")}, g.metadata()...)
	if gz {
		regular = append(regular, g.field("grpc-encoding", "gzip"))
	}
	if g.chance(0.03) {
		regular = append(regular, g.field("grpc-status", strconv.Itoa(g.IntN(17))))
	}
	return g.withPseudo([]hpack.HeaderField{g.field(":status", "200")}, regular)
}

// trailers carry the status; a trailers-only reply is the response
// headers and the trailers in one block, rarely without a gRPC
// content-type (a proxy's or a broken driver's), then judged by :status.
func (g diffGen) trailers(st diffStatus, only bool) []hpack.HeaderField {
	regular := append([]hpack.HeaderField{g.field("grpc-status", st.grpcStatus)}, g.metadata()...)
	if st.message != "" {
		regular = append(regular, g.field("grpc-message", diffEncodeMessage(st.message)))
	}
	if !only {
		return g.withPseudo(nil, regular)
	}
	httpStatus := "200"
	if g.chance(0.05) {
		httpStatus = g.pick("100", "200", "302", "400", "401", "403", "404", "429", "500", "502", "503", "504", "2x0")
		if g.chance(0.2) {
			return g.withPseudo(nil, regular)
		}
	} else {
		regular = append(regular, g.field("content-type", g.pick("application/grpc", "application/grpc+proto", "application/grpc;x")))
	}
	return g.withPseudo([]hpack.HeaderField{g.field(":status", httpStatus)}, regular)
}

// diffEncodeMessage percent-encodes a status message as grpc-go sends it:
// every byte outside printable ASCII, and '%' itself.
func diffEncodeMessage(s string) string {
	var b strings.Builder
	for i := range len(s) {
		if c := s[i]; c >= ' ' && c <= '~' && c != '%' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// diffStatus is the status the driver sends for a call, if any. The code
// and message the tap must report are not derived from it here: they are
// what grpc-go's client reports for the driver's frames (grpcoracle_test.go).
type diffStatus struct {
	grpcStatus string
	message    string
}

func (g diffGen) status(o diffOutcome, key string) diffStatus {
	switch o {
	case outOK:
		return diffStatus{grpcStatus: "0"}
	case outError:
		code := codes.Code(1 + g.IntN(16))
		return diffStatus{grpcStatus: strconv.Itoa(int(code)), message: g.errorMessage(key)}
	case outBadStatus:
		return diffStatus{grpcStatus: g.pick("", "abc", "1.0", "0x1", "OK", "99999999999"), message: g.errorMessage(key)}
	case outStatusThenReset:
		return g.status([]diffOutcome{outOK, outError}[g.IntN(2)], key)
	}
	return diffStatus{}
}

func (g diffGen) errorMessage(key string) string {
	if g.chance(0.1) {
		return ""
	}
	text := g.pick("pool full: 100%", "volume ünïcode", "日本語のエラー", "line1\nline2", "a+b=c", "%zz is no escape", g.token(10))
	return text + " " + key
}

// resetCode is an HTTP/2 error code other than REFUSED_STREAM for a
// driver's reset: every defined one, and now and then one HTTP/2 does not
// define.
func (g diffGen) resetCode() http2.ErrCode {
	if g.chance(0.1) {
		return http2.ErrCode(uint32(http2.ErrCodeHTTP11Required) + 1 + uint32(g.IntN(1<<20)))
	}
	for {
		if c := http2.ErrCode(g.IntN(int(http2.ErrCodeHTTP11Required) + 1)); c != http2.ErrCodeRefusedStream {
			return c
		}
	}
}

// diffHalf is what one side sends on one stream, in this order: the first
// dataAfter header blocks, the DATA payload in frames of random sizes, the
// remaining blocks, then RST_STREAM if reset.
type diffHalf struct {
	blocks     [][]hpack.HeaderField
	dataAfter  int
	data       []byte
	endOnData  bool // the last DATA frame carries END_STREAM
	endOnBlock bool // the last header block carries END_STREAM
	reset      bool
	code       http2.ErrCode
}

// diffCall is one generated call: what each side sends, and what the tap
// must report of it.
type diffCall struct {
	id             uint32
	outcome        diffOutcome
	client, driver diffHalf
	endAlone       bool   // the client's END_STREAM rides on an empty DATA frame of its own
	key            string // the unique key in a decoded request, "" otherwise
	keyField       string // the request field value carrying key

	// What grpc-go's client is asked (see askGRPCGo), and what the tap
	// must report of a successful call.
	sentMessage   string // the driver's grpc-message, before encoding
	action        oracleAction
	respWant      sidecar.Response
	spoiledReply  bool // its response cannot be decoded: only a successful call's is
	spoiledReqest bool

	want        sidecar.Observation
	anyMessage  bool // the contract leaves Message open: grpc-go's message is not the driver's
	finished    bool // reported to Recorder.CallFinished
	undecodable bool // a decoded method whose message cannot be decoded: counted, not published
	published   bool
	tags        []string
	defected    bool // changed by a deliberate defect after its expectation was set
	refusedSeen bool // refused, and the client saw it fail: timed, never observed
	// reaction, when not 0, is the RST_STREAM the client sends once it has
	// read the driver's whole half.
	reaction http2.ErrCode
}

func (g diffGen) call(id uint32, o diffOutcome) *diffCall {
	b := g.body(o)
	st := g.status(o, b.msgs.reqKey)
	c := &diffCall{id: id, outcome: o, key: b.msgs.reqKey, keyField: b.msgs.reqKeyFld, sentMessage: st.message}
	timeout := g.timeout()
	if o == outDeadline {
		timeout = g.expiredTimeout()
	}
	c.client = diffHalf{blocks: [][]hpack.HeaderField{g.requestHeaders(b.path, b.reqGzip, timeout)}, dataAfter: 1, data: b.req, endOnData: true}
	c.endAlone = g.chance(0.2)
	g.reply(c, o, b, st)
	c.expect(o, b)
	if o <= outDriverReset && g.chance(0.25) {
		// grpc-go's client resets a stream whose reply it rejected
		// (PROTOCOL_ERROR for malformed headers, CANCEL once RecvMsg
		// failed): a reaction to the status it already has.
		c.reaction = []http2.ErrCode{http2.ErrCodeProtocol, http2.ErrCodeCancel}[g.IntN(2)]
		c.tags = append(c.tags, "client-reaction")
	}
	return c
}

// reply plans the driver's half of a call for its outcome, and the
// client's reset or missing half-close where the outcome has one.
func (g diffGen) reply(c *diffCall, o diffOutcome, b diffBody, st diffStatus) {
	d := &c.driver
	switch o {
	case outOK:
		*d = g.okReply(b, st)
	case outError, outBadStatus:
		*d = g.errorReply(st)
	case outStatusThenReset:
		*d = g.errorReply(st)
		if st.grpcStatus == "0" {
			*d = g.okReply(b, st)
		}
		d.reset, d.code = true, http2.ErrCodeNo
		c.client.endOnData = false
	case outDriverReset:
		*d = g.partialReply(b)
		d.reset, d.code = true, g.resetCode()
	case outClientReset, outDeadline: // grpc-go's client cancels, whatever the reason
		*d = g.partialReply(b)
		c.client.reset, c.client.code, c.client.endOnData = true, http2.ErrCodeCancel, g.chance(0.7)
		c.action = oracleCancel
		if o == outDeadline {
			c.action = oracleDeadline
		}
	case outOpen:
		*d = g.partialReply(b)
		c.client.endOnData = g.chance(0.7)
		c.action = oracleHangUp
	case outRefused:
		d.reset, d.code = true, http2.ErrCodeRefusedStream
	}
}

// okReply is headers, the message and OK trailers; now and then without
// the message (which grpc-go's client does not take for a success).
func (g diffGen) okReply(b diffBody, st diffStatus) diffHalf {
	switch {
	case g.chance(0.03):
		return diffHalf{blocks: [][]hpack.HeaderField{g.trailers(st, true)}, dataAfter: 1, endOnBlock: true}
	case g.chance(0.03):
		return diffHalf{blocks: [][]hpack.HeaderField{g.responseHeaders(b.respGzip), g.trailers(st, false)}, dataAfter: 1, endOnBlock: true}
	}
	return diffHalf{blocks: [][]hpack.HeaderField{g.responseHeaders(b.respGzip), g.trailers(st, false)},
		dataAfter: 1, data: b.resp, endOnBlock: true}
}

// errorReply is trailers-only, as grpc-go answers an error before sending
// anything else, or response headers then trailers.
func (g diffGen) errorReply(st diffStatus) diffHalf {
	if g.chance(0.6) {
		return diffHalf{blocks: [][]hpack.HeaderField{g.trailers(st, true)}, dataAfter: 1, endOnBlock: true}
	}
	return diffHalf{blocks: [][]hpack.HeaderField{g.responseHeaders(false), g.trailers(st, false)}, dataAfter: 1, endOnBlock: true}
}

// partialReply is what a driver sent of a reply it never finished:
// nothing, or the response headers and some or all of the message.
func (g diffGen) partialReply(b diffBody) diffHalf {
	if g.chance(0.4) {
		return diffHalf{}
	}
	h := diffHalf{blocks: [][]hpack.HeaderField{g.responseHeaders(b.respGzip)}, dataAfter: 1}
	if g.chance(0.5) {
		h.data = b.resp[:g.IntN(len(b.resp)+1)]
	}
	return h
}

// expect sets what the tap must report of the call but its status, which
// askGRPCGo sets: the contract.
func (c *diffCall) expect(o diffOutcome, b diffBody) {
	c.finished = o != outRefused && o != outGoaway
	c.spoiledReply = strings.HasSuffix(b.spoiled, "-response")
	c.spoiledReqest = b.spoiled != "" && !c.spoiledReply
	c.want = sidecar.Observation{Method: diffCanonical(b.path)}
	if b.decoded {
		c.want.Request = b.msgs.reqWant
		c.respWant = b.msgs.respWant
	}
	c.tags = append(c.tags, diffOutcomeNames[o])
	switch {
	case b.decoded:
		c.tags = append(c.tags, "decoded")
	case diffCSIMethods[b.path]:
		c.tags = append(c.tags, "undecoded-csi-method")
	default:
		c.tags = append(c.tags, "non-csi-path")
	}
	if b.spoiled != "" {
		c.tags = append(c.tags, b.spoiled)
	}
	if o == outDriverReset {
		c.tags = append(c.tags, "driver-reset-"+c.driver.code.String())
	}
	if p, ok := b.msgs.req.(interface{ GetParameters() map[string]string }); ok && len(p.GetParameters()) != len(c.want.Request.Parameters) {
		c.tags = append(c.tags, "parameters-filtered")
	}
	if !c.finished && diffReplayBytes(b.req) > 256<<10 {
		// grpc-go committed the call (over its replay buffer): no retry,
		// the client sees Unavailable (stream.go shouldRetry).
		c.finished, c.refusedSeen = true, true
		c.want.Code = codes.Unavailable
		c.tags = append(c.tags, "refused-over-replay-buffer")
	}
}

// askGRPCGo sets the code and message the tap must report of each call
// that is one: what grpc-go's client reports for the driver's frames (and
// its own cancel, deadline or closed connection), asked for every call of
// the session at once. A decoded call's response is expected only when it
// succeeded, and a spoiled one then makes it undecodable.
func askGRPCGo(s *diffSession) error {
	o, err := oracle()
	if err != nil {
		return err
	}
	errs := make([]error, len(s.calls))
	var wg sync.WaitGroup
	for i, c := range s.calls {
		if !c.finished || c.refusedSeen {
			continue
		}
		wg.Go(func() {
			code, msg, err := o.ask(c.driver, c.action)
			errs[i] = err
			c.want.Code, c.want.Message, c.anyMessage = code, msg, msg != c.sentMessage
			if code == codes.OK {
				c.want.Response = c.respWant
			}
			c.undecodable = c.spoiledReqest || c.spoiledReply && code == codes.OK
			c.published = !c.undecodable
			c.tags = append(c.tags, "grpc-go-"+code.String())
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// diffReplayBytes is what grpc-go's replay buffer holds of a unary
// request: its first message's prefix and the size it announces.
func diffReplayBytes(req []byte) int {
	if len(req) < 5 {
		return len(req)
	}
	return 5 + int(binary.BigEndian.Uint32(req[1:5]))
}

// diffSession is one generated connection.
type diffSession struct {
	seed           uint64
	calls          []*diffCall
	goaway         bool
	lastID         uint32 // the last stream ID of the driver's final GOAWAY
	client, driver []byte
	// deps[d] are the points of direction d (0 client, 1 driver) that may
	// reach the tap only after the other direction got that far.
	deps [2][]diffDep
}

// diffDep keeps the feeder causal where the protocol is: direction bytes
// from offset at on reach the tap only once the other direction's first
// need bytes did. A SETTINGS ACK (after which the acknowledging side may
// use a larger HPACK table) cannot cross the relay before the SETTINGS it
// acknowledges did.
type diffDep struct{ at, need int }

// generateDiffSession builds the calls of one connection (1-10, sometimes
// up to 40 interleaved), sometimes a GOAWAY refusing the last ones, and
// encodes both directions. defect, when not nil, changes the calls before
// encoding or the bytes after it (see diffDefect).
func generateDiffSession(seed uint64, defect diffDefect) *diffSession {
	g := newDiffGen(seed)
	s := &diffSession{seed: seed}
	n := 1 + g.IntN(10)
	if g.chance(0.1) {
		n = 10 + g.IntN(31)
	}
	cut := n
	if g.chance(0.12) {
		cut = g.IntN(n + 1)
	}
	id := uint32(1)
	for i := range n {
		o := outGoaway
		if i < cut {
			o = g.outcome()
		}
		s.calls = append(s.calls, g.call(id, o))
		id += 2
		if g.chance(0.1) {
			id += 2 * uint32(1+g.IntN(5)) // skipped stream IDs are legal
		}
	}
	if cut < n {
		lo := uint32(0)
		if cut > 0 {
			lo = s.calls[cut-1].id
		}
		s.goaway, s.lastID = true, lo+uint32(g.IntN(int(s.calls[cut].id-lo)))
	}
	if err := askGRPCGo(s); err != nil {
		panic(fmt.Sprintf("asking grpc-go's client: %v", err))
	}
	if defect != nil {
		defect.beforeEncoding(s)
	}
	encodeDiffSession(g, s)
	if defect != nil {
		defect.afterEncoding(s)
	}
	return s
}

// diffDefect is a deliberate error in a session's input, to show the
// comparison finds it: the expectations stay those of the intact session.
type diffDefect interface {
	beforeEncoding(s *diffSession)
	afterEncoding(s *diffSession)
}

// diffWriter is one direction of the connection: x/net's Framer and its
// HPACK encoder, writing into out.
type diffWriter struct {
	out   bytes.Buffer
	fr    *http2.Framer
	enc   *hpack.Encoder
	block bytes.Buffer
	// limit is the SETTINGS_HEADER_TABLE_SIZE the peer advertised and this
	// side acknowledged: the largest table its encoder may use.
	limit uint32
}

func newDiffWriter() *diffWriter {
	w := &diffWriter{limit: 4096}
	w.fr = http2.NewFramer(&w.out, nil)
	w.enc = hpack.NewEncoder(&w.block)
	return w
}

func diffMust(err error) {
	if err != nil {
		panic(fmt.Sprintf("generator: %v", err))
	}
}

// tableSize is a dynamic table size the encoder may use: often 0, a small
// one or the whole allowance, which makes x/net evict and re-index.
func (g diffGen) tableSize(limit uint32) uint32 {
	switch g.IntN(4) {
	case 0:
		return 0
	case 1:
		return uint32(g.IntN(int(min(limit, 512)) + 1))
	case 2:
		return limit
	}
	return uint32(g.IntN(int(limit) + 1))
}

// headers writes one header block: sometimes after a change of the
// encoder's table size (two changes make x/net send RFC 7541's pair of
// updates, the smallest then the final size), in a HEADERS frame with
// random PADDED and PRIORITY flags, split over CONTINUATION frames.
func (w *diffWriter) headers(g diffGen, id uint32, fields []hpack.HeaderField, end bool) {
	if g.chance(0.2) {
		for range 1 + g.IntN(2) {
			w.enc.SetMaxDynamicTableSize(g.tableSize(w.limit))
		}
	}
	w.block.Reset()
	for _, f := range fields {
		diffMust(w.enc.WriteField(f))
	}
	frags := g.pieces(w.block.Bytes(), diffMaxPiece)
	if len(frags) == 0 {
		frags = [][]byte{nil}
	}
	p := http2.HeadersFrameParam{StreamID: id, BlockFragment: frags[0], EndStream: end, EndHeaders: len(frags) == 1}
	if g.chance(0.3) {
		p.PadLength = uint8(g.IntN(256))
	}
	if g.chance(0.3) {
		p.Priority = g.priority(id)
	}
	diffMust(w.fr.WriteHeaders(p))
	for i, f := range frags[1:] {
		diffMust(w.fr.WriteContinuation(id, i == len(frags)-2, f))
	}
}

// priority is a priority on another stream (never the stream itself).
func (g diffGen) priority(id uint32) http2.PriorityParam {
	p := http2.PriorityParam{StreamDep: uint32(2*g.IntN(50) + 1), Exclusive: g.chance(0.3), Weight: uint8(g.IntN(256))}
	if p.StreamDep == id {
		p.StreamDep = 0
	}
	if p.IsZero() {
		p.Weight = 15
	}
	return p
}

func (w *diffWriter) data(g diffGen, id uint32, p []byte, end bool) {
	if g.chance(0.2) {
		diffMust(w.fr.WriteDataPadded(id, end, p, make([]byte, g.IntN(256))))
		return
	}
	diffMust(w.fr.WriteData(id, end, p))
}

// pieces cuts b into pieces of at most max bytes, often unevenly and
// sometimes into empty ones (an empty DATA or CONTINUATION frame is legal).
func (g diffGen) pieces(b []byte, max int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(len(b), max)
		if g.chance(0.3) {
			n = g.IntN(n + 1)
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// diffLane is a queue of steps that must run in order (one side of one
// stream, or one side's connection frames); the builder interleaves lanes
// at random. A lane runs only when ready allows, and not before tick
// notBefore unless nothing else can run.
type diffLane struct {
	steps     []func()
	ready     func() bool
	notBefore int
}

// diffBuilder encodes a session: both directions, their lanes, and the
// SETTINGS each side sent, for the other side to acknowledge.
type diffBuilder struct {
	g      diffGen
	s      *diffSession
	w      [2]*diffWriter
	ctrl   [2]*diffLane
	opened []bool
	// settings[d] are side d's SETTINGS frames: the table size each
	// advertised (-1: none) and the offset where it ended.
	settings [2][]struct{ table, end int }
	ticks    int
}

func encodeDiffSession(g diffGen, s *diffSession) {
	b := &diffBuilder{g: g, s: s, w: [2]*diffWriter{newDiffWriter(), newDiffWriter()},
		ctrl: [2]*diffLane{{}, {}}, opened: make([]bool, len(s.calls))}
	b.w[0].out.WriteString(http2.ClientPreface)
	b.sendSettings(0)
	b.sendSettings(1)
	if g.chance(0.5) {
		diffMust(b.w[1].fr.WriteWindowUpdate(0, 1+uint32(g.IntN(1<<30)))) // as grpc-go's server does
	}
	lanes := append([]*diffLane{b.ctrl[0], b.ctrl[1]}, b.callLanes()...)
	total := 0
	for _, l := range lanes {
		total += len(l.steps)
	}
	lanes = append(lanes, b.lateLanes(total)...)
	b.run(lanes)
	s.client, s.driver = b.w[0].out.Bytes(), b.w[1].out.Bytes()
}

// sendSettings writes a SETTINGS frame for side d, sometimes advertising a
// table size for the peer's encoder, and queues the peer's ACK.
func (b *diffBuilder) sendSettings(d int) {
	table := -1
	switch b.g.IntN(5) {
	case 0:
		table = b.g.IntN(4097)
	case 1, 2:
		table = 4096 + b.g.IntN(65536-4096+1)
	}
	var ss []http2.Setting
	if table >= 0 {
		ss = append(ss, http2.Setting{ID: http2.SettingHeaderTableSize, Val: uint32(table)})
	}
	if b.g.chance(0.5) {
		ss = append(ss, http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(b.g.IntN(1 << 24))})
	}
	if b.g.chance(0.3) {
		ss = append(ss, http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: 16 << 20})
	}
	diffMust(b.w[d].fr.WriteSettings(ss...))
	k := len(b.settings[d])
	b.settings[d] = append(b.settings[d], struct{ table, end int }{table, b.w[d].out.Len()})
	peer := 1 - d
	b.ctrl[peer].steps = append(b.ctrl[peer].steps, func() { b.ack(peer, k) })
}

// ack writes side d's ACK of the peer's k-th SETTINGS; from then on d's
// encoder may use the table size it advertised.
func (b *diffBuilder) ack(d, k int) {
	w, s := b.w[d], b.settings[1-d][k]
	b.s.deps[d] = append(b.s.deps[d], diffDep{at: w.out.Len(), need: s.end})
	diffMust(w.fr.WriteSettingsAck())
	if s.table >= 0 {
		w.limit = uint32(s.table)
		w.enc.SetMaxDynamicTableSizeLimit(w.limit)
	}
}

// callLanes are each call's client lane (opened in stream order) and
// driver lane (answering only a stream the client opened).
func (b *diffBuilder) callLanes() []*diffLane {
	var lanes []*diffLane
	for i, c := range b.s.calls {
		client := &diffLane{steps: b.halfSteps(0, c.id, &c.client, c.endAlone)}
		open, openedAt := client.steps[0], 0
		client.steps[0] = func() { open(); b.opened[i], openedAt = true, b.w[0].out.Len() }
		if i > 0 {
			client.ready = func() bool { return b.opened[i-1] }
		}
		driver := &diffLane{steps: b.halfSteps(1, c.id, &c.driver, false), ready: func() bool { return b.opened[i] }}
		if len(driver.steps) > 0 { // the driver answers only a request the relay brought it
			first := driver.steps[0]
			driver.steps[0] = func() {
				b.s.deps[1] = append(b.s.deps[1], diffDep{at: b.w[1].out.Len(), need: openedAt})
				first()
			}
		}
		if c.client.reset {
			b.cancelAfterReply(client, driver)
		} else if c.reaction != 0 {
			id, code := c.id, c.reaction
			client.steps = append(client.steps, func() { diffMust(b.w[0].fr.WriteRSTStream(id, code)) })
			b.cancelAfterReply(client, driver)
		}
		lanes = append(lanes, client, driver)
	}
	return lanes
}

// cancelAfterReply makes a client's cancel (its lane's last step) wait for
// the driver's partial reply, on the wire and at the tap: grpc-go's client
// (the oracle) cancels once it has read what the driver sent.
func (b *diffBuilder) cancelAfterReply(client, driver *diffLane) {
	opened := client.ready
	client.ready = func() bool {
		return (opened == nil || opened()) && (len(client.steps) > 1 || len(driver.steps) == 0)
	}
	last := len(client.steps) - 1
	cancel := client.steps[last]
	client.steps[last] = func() {
		b.s.deps[0] = append(b.s.deps[0], diffDep{at: b.w[0].out.Len(), need: b.w[1].out.Len()})
		cancel()
	}
}

// halfSteps are the frames of one side of one stream, one step per frame
// except a header block, whose CONTINUATIONs must follow it at once.
func (b *diffBuilder) halfSteps(d int, id uint32, h *diffHalf, endAlone bool) []func() {
	w, g := b.w[d], b.g
	block := func(i int) func() {
		return func() { w.headers(g, id, h.blocks[i], h.endOnBlock && i == len(h.blocks)-1) }
	}
	var steps []func()
	for i := range h.dataAfter {
		steps = append(steps, block(i))
	}
	pieces := g.pieces(h.data, diffMaxPiece)
	if h.endOnData && (endAlone || len(pieces) == 0) {
		pieces = append(pieces, nil)
	}
	for i, p := range pieces {
		end := h.endOnData && i == len(pieces)-1
		steps = append(steps, func() { w.data(g, id, p, end) })
	}
	for i := h.dataAfter; i < len(h.blocks); i++ {
		steps = append(steps, block(i))
	}
	if h.reset {
		steps = append(steps, func() { diffMust(w.fr.WriteRSTStream(id, h.code)) })
	}
	return steps
}

// lateLanes send what comes at a random time: a second SETTINGS from
// either side (a new table size mid-connection) and the driver's GOAWAY,
// sometimes preceded by grpc-go's graceful first GOAWAY and PING.
func (b *diffBuilder) lateLanes(total int) []*diffLane {
	var lanes []*diffLane
	for d := range 2 {
		if b.g.chance(0.25) {
			lanes = append(lanes, &diffLane{steps: []func(){func() { b.sendSettings(d) }}, notBefore: b.g.IntN(total + 1)})
		}
	}
	if !b.s.goaway {
		return lanes
	}
	fr := b.w[1].fr
	var steps []func()
	if b.g.chance(0.5) {
		steps = append(steps, func() { diffMust(fr.WriteGoAway(1<<31-1, http2.ErrCodeNo, nil)) },
			func() { diffMust(fr.WritePing(false, [8]byte{1, 6, 1, 8, 0, 3, 3, 9})) })
	}
	code, debug := http2.ErrCodeNo, []byte(nil)
	if b.g.chance(0.3) {
		code, debug = http2.ErrCodeEnhanceYourCalm, []byte("too_many_pings")
	}
	steps = append(steps, func() { diffMust(fr.WriteGoAway(b.s.lastID, code, debug)) })
	return append(lanes, &diffLane{steps: steps, notBefore: b.g.IntN(total + 1)})
}

// run interleaves the lanes at random, with extra connection frames.
func (b *diffBuilder) run(lanes []*diffLane) {
	for {
		l := b.pickLane(lanes)
		if l == nil {
			break
		}
		if b.g.chance(0.05) {
			b.extra()
		}
		step := l.steps[0]
		l.steps = l.steps[1:]
		step()
		b.ticks++
	}
	for _, l := range lanes {
		if len(l.steps) > 0 {
			panic("generator: a lane never became ready")
		}
	}
}

func (b *diffBuilder) pickLane(lanes []*diffLane) *diffLane {
	var ready, early []*diffLane
	for _, l := range lanes {
		switch {
		case len(l.steps) == 0 || (l.ready != nil && !l.ready()):
		case b.ticks < l.notBefore:
			early = append(early, l)
		default:
			ready = append(ready, l)
		}
	}
	if len(ready) == 0 {
		ready = early
	}
	if len(ready) == 0 {
		return nil
	}
	return ready[b.g.IntN(len(ready))]
}

// extra writes a frame that carries no call: PING, WINDOW_UPDATE (on the
// connection or a stream already open, finished ones included) or a
// client's PRIORITY (on any stream, idle ones included).
func (b *diffBuilder) extra() {
	g := b.g
	d := g.IntN(2)
	fr := b.w[d].fr
	switch g.IntN(3) {
	case 0:
		diffMust(fr.WritePing(g.chance(0.3), [8]byte{byte(g.Uint32())}))
	case 1:
		diffMust(fr.WriteWindowUpdate(b.openStream(d), 1+uint32(g.IntN(1<<20))))
	default:
		id := uint32(2*g.IntN(60) + 1)
		diffMust(b.w[0].fr.WritePriority(id, g.priority(id)))
	}
}

// openStream is 0 (the connection) or a stream the client opened that the
// driver would speak about (not one beyond its GOAWAY).
func (b *diffBuilder) openStream(d int) uint32 {
	var ids []uint32
	for i, c := range b.s.calls {
		if b.opened[i] && (d == 0 || !b.s.goaway || c.id <= b.s.lastID) {
			ids = append(ids, c.id)
		}
	}
	if len(ids) == 0 || b.g.chance(0.4) {
		return 0
	}
	return ids[b.g.IntN(len(ids))]
}
