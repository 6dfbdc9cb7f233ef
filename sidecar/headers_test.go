package sidecar

import (
	"bytes"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// The decoder's table follows the encoder's: it grows only as far as the
// peer allowed (SETTINGS_HEADER_TABLE_SIZE from the other side), shrinks
// with the encoder, and takes the RFC 7541 pair of leading size updates
// (smallest, then final) that x/net's own decoder refuses.
func TestHeaderTableFollowsTheEncoder(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.check(w.dfr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 200 << 10}))
	w.request(1, MethodProbe, &csi.ProbeRequest{})
	w.cenc.SetMaxDynamicTableSizeLimit(200 << 10)
	w.cenc.SetMaxDynamicTableSize(200 << 10) // larger than the floor: only the SETTINGS allow it
	w.request(3, MethodProbe, &csi.ProbeRequest{})
	w.cenc.SetMaxDynamicTableSize(100)
	w.cenc.SetMaxDynamicTableSize(8192) // the pair: 100, then 8192
	w.request(5, MethodProbe, &csi.ProbeRequest{})
	for id := uint32(1); id <= 5; id += 2 {
		w.reply(id, &csi.ProbeResponse{}, codes.OK)
	}
	u.feedDriverFirst(w) // the SETTINGS first, as the client's encoder saw them
	if obs := u.close(); len(obs) != 3 || len(u.rec.abandoned) != 0 {
		t.Fatalf("%d observations, abandoned %v; want 3 and none", len(obs), u.rec.abandoned)
	}
	if got := u.tc.client.headers.allowed.Load(); got != 200<<10 {
		t.Errorf("allowed table = %d, want the advertised %d", got, 200<<10)
	}
}

// x/net's decoder alone refuses the pair of size updates once its table
// holds entries: the case the tap handles itself is real.
func TestXNetRefusesTheSizeUpdatePair(t *testing.T) {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	dec := hpack.NewDecoder(4096, nil)
	enc.WriteField(hpack.HeaderField{Name: "x-a", Value: "1"})
	if _, err := dec.DecodeFull(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	enc.SetMaxDynamicTableSize(100)
	enc.SetMaxDynamicTableSize(4000)
	enc.WriteField(hpack.HeaderField{Name: "x-b", Value: "2"})
	if _, err := dec.DecodeFull(b.Bytes()); err == nil {
		t.Fatal("x/net decoded the pair; the tap's own handling may no longer be needed")
	}
}

// A size update beyond what the peer allowed (and beyond the tap's own
// bound) abandons the connection's tap as oversized, never the relay.
func TestHeaderTableBeyondTheBoundIsRefused(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	w.check(w.dfr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 16 << 20}))
	w.cenc.SetMaxDynamicTableSizeLimit(16 << 20)
	w.cenc.SetMaxDynamicTableSize(16 << 20)
	w.request(1, MethodProbe, &csi.ProbeRequest{})
	u.feedDriverFirst(w)
	u.close()
	if len(u.rec.abandoned) != 1 || u.rec.abandoned[0] != AbandonOversized {
		t.Fatalf("abandoned %v, want [%s]", u.rec.abandoned, AbandonOversized)
	}
}

func TestHPACKIntegers(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want uint64
		n    int
	}{
		{[]byte{0x2a}, 10, 1},               // 001 01010
		{[]byte{0x3f, 0xe1, 0x1f}, 4096, 3}, // 31 + 4065
		{[]byte{0x3f, 0x00}, 31, 2},
	} {
		v, n, err := hpackInt(c.in, 5)
		if err != nil || v != c.want || n != c.n {
			t.Errorf("%x: got %d/%d/%v, want %d/%d", c.in, v, n, err, c.want, c.n)
		}
	}
	for _, bad := range [][]byte{{0x3f}, {0x3f, 0xff}, {0x3f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if _, _, err := hpackInt(bad, 5); err == nil {
			t.Errorf("%x: no error", bad)
		}
	}
}
