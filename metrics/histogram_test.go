package metrics

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/rawh2"
)

// The standard histogram stays consistent whatever the streams do: refused
// ones (70 CreateVolumes refused before their request was complete, as in
// issue 24, where they left a count of 6 OK calls and a sum of -5.5e10 s) are
// no calls; reset, cancelled and early-answered ones are one call each, with
// the code grpc-go's client reports and a duration that is not negative.
func TestOperationsHistogramCountsEachCallOnceWithItsDuration(t *testing.T) {
	m := New()
	tap := sidecar.NewTap(sidecar.ObserverFunc(func(sidecar.Observation) {}), m, 64) // an observer: requests are buffered
	tc := tap.NewConn()
	w := newHistogramWire(t)
	id := uint32(1)
	for range 70 { // refused before the request was complete
		w.request(id, false)
		w.check(w.driver.WriteRSTStream(id, http2.ErrCodeRefusedStream))
		id += 2
	}
	w.feed(tc)
	for range 10 { // reset by the driver after its headers
		w.request(id, true)
		w.headers(false, id, false, ":status", "200", "content-type", "application/grpc")
		w.check(w.driver.WriteRSTStream(id, http2.ErrCodeInternal))
		id += 2
	}
	for range 10 { // cancelled by the client
		w.request(id, true)
		w.check(w.client.WriteRSTStream(id, http2.ErrCodeCancel))
		id += 2
	}
	w.feed(tc)
	for range 10 { // answered
		w.request(id, true)
		w.reply(id)
		id += 2
	}
	w.feed(tc)
	tc.Close()
	tap.Close()

	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	byCode := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "csi_sidecar_operations_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			h := s.GetHistogram()
			if h.GetSampleSum() < 0 {
				t.Errorf("histogram %v: sum %v < 0", s.GetLabel(), h.GetSampleSum())
			}
			for _, l := range s.GetLabel() {
				if l.GetName() == "grpc_status_code" {
					byCode[l.GetValue()] += h.GetSampleCount()
				}
			}
		}
	}
	want := map[string]uint64{"Internal": 10, "Canceled": 10, "OK": 10}
	if len(byCode) != len(want) || byCode["Internal"] != 10 || byCode["Canceled"] != 10 || byCode["OK"] != 10 {
		t.Fatalf("calls by code %v, want %v (refused streams are no calls)", byCode, want)
	}
}

// histogramWire writes both directions of a connection (rawh2.Conn).
type histogramWire struct {
	*rawh2.Conn
	t              *testing.T
	client, driver *http2.Framer
}

func newHistogramWire(t *testing.T) *histogramWire {
	c := rawh2.NewConn()
	return &histogramWire{Conn: c, t: t, client: c.ClientFramer, driver: c.DriverFramer}
}

func (w *histogramWire) check(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *histogramWire) headers(fromClient bool, id uint32, end bool, kv ...string) {
	w.check(w.Headers(fromClient, id, end, kv...))
}

// request writes a CreateVolume request whose 100-byte message is whole
// (and half-closed) or cut after 10 bytes.
func (w *histogramWire) request(id uint32, whole bool) {
	w.headers(true, id, false, ":method", "POST", ":path", sidecar.MethodCreateVolume, "content-type", "application/grpc")
	msg := binary.BigEndian.AppendUint32([]byte{0}, 100)
	if whole {
		w.check(w.client.WriteData(id, true, append(msg, make([]byte, 100)...)))
		return
	}
	w.check(w.client.WriteData(id, false, append(msg, make([]byte, 10)...)))
}

// reply writes a successful reply: headers, one empty message, trailers.
func (w *histogramWire) reply(id uint32) {
	w.headers(false, id, false, ":status", "200", "content-type", "application/grpc")
	w.check(w.driver.WriteData(id, false, []byte{0, 0, 0, 0, 0}))
	w.headers(false, id, true, "grpc-status", "0")
}

// feed hands what both directions hold to the tap, the client's first,
// and empties them.
func (w *histogramWire) feed(tc *sidecar.TapConn) {
	tc.FromClient().Feed(w.Client.Bytes(), time.Now())
	tc.FromDriver().Feed(w.Driver.Bytes(), time.Now())
	w.Client.Reset()
	w.Driver.Reset()
}
