package metrics

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
)

// label cuts an object-derived value to maxLabelBytes and drops what is not
// UTF-8, including a rune the cut split.
func TestLabelTruncatesTo128BytesOfValidUTF8(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"short", "v1.13.2", "v1.13.2"},
		{"exactly 128", strings.Repeat("a", 128), strings.Repeat("a", 128)},
		{"129", strings.Repeat("a", 129), strings.Repeat("a", 128)},
		{"300 and a bad byte", strings.Repeat("a", 300) + "\xff", strings.Repeat("a", 128)},
		{"bad byte inside", "ab\xffcd", "abcd"},
		{"a rune split by the cut", strings.Repeat("a", 126) + "😀", strings.Repeat("a", 126)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := label(tc.in)
			if got != tc.want {
				t.Errorf("label = %q (%d bytes), want %q (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
			if len(got) > maxLabelBytes || !utf8.ValidString(got) {
				t.Errorf("label = %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
}

// Every label the verdict collector takes from an object arrives cut to
// 128 bytes in the scrape (a golden's annotations are user input).
func TestCollectorCutsObjectLabelsTo128Bytes(t *testing.T) {
	long := strings.Repeat("s", 300) + "\xff"
	s := leaderSnapshot()
	f := fleet.Flavor{SchematicID: long, Version: long}
	s.Goldens[0].Flavor, s.Goldens[0].StorageClass = f, long
	s.Disks[0].Flavor, s.BadDisks[0].Flavor, s.BadDisks[0].Pool = f, f, long
	s.Flavors[0].Flavor = f
	s.Malformed = map[string]int64{long: 1}
	reg := New()
	if err := reg.Register(NewCloneCollector(snapshotSource{s})); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	cut := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v := lp.GetValue(); len(v) > maxLabelBytes || !utf8.ValidString(v) {
					t.Errorf("%s{%s}: %d bytes, valid UTF-8 %v", mf.GetName(), lp.GetName(), len(v), utf8.ValidString(v))
				} else if v == strings.Repeat("s", maxLabelBytes) {
					cut++
				}
			}
		}
	}
	// golden_info 3, worker_disks 2, golden_consumers 2, bad_disks 3,
	// the ledger's three metrics 2 each (fetches twice), malformed 1.
	if want := 3 + 2 + 2 + 3 + 4*2 + 1; cut != want {
		t.Errorf("%d label values cut to 128 bytes, want %d", cut, want)
	}
}

// operationLabels gathers csi_sidecar_operations_seconds and returns the
// labels of its one series.
func operationLabels(t *testing.T, m *Metrics) map[string]string {
	t.Helper()
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() == "csi_sidecar_operations_seconds" {
			series = mf.GetMetric()
		}
	}
	if len(series) != 1 {
		t.Fatalf("%d series of csi_sidecar_operations_seconds, want 1", len(series))
	}
	out := map[string]string{}
	for _, lp := range series[0].GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// grpc_status_code takes gRPC's names of the spec's codes 0-16; any other
// code a peer sends becomes Unknown (its name would be "Code(n)", an
// unbounded label).
func TestCallFinishedLabelsEveryCodeFromTheClosedSet(t *testing.T) {
	cases := map[codes.Code]string{17: "Unknown", 100: "Unknown", math.MaxUint32: "Unknown"}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		cases[c] = c.String()
	}
	for code, want := range cases {
		m := New()
		m.CallFinished("/csi.v1.Controller/CreateVolume", code, time.Millisecond)
		got := operationLabels(t, m)
		if got["grpc_status_code"] != want || got["method_name"] != "/csi.v1.Controller/CreateVolume" {
			t.Errorf("code %d: labels %v, want grpc_status_code %q", uint32(code), got, want)
		}
	}
}

// SetDriverName takes a name the CSI spec allows for a plugin (GetPluginInfo:
// at most 63 characters, alphanumerics with '-', '_' and '.' inside) and
// refuses any other, keeping the driver_name it had.
func TestSetDriverNameFollowsCSIsPluginNameRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"linstor.csi.linbit.com", true},
		{"a", true},
		{"A_b-c.9", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"-linstor", false},
		{"linstor.", false},
		{"_x", false},
		{"linstor csi", false},
		{"linstor/csi", false},
		{"linstör", false},
		{"linstor\n", false},
	} {
		m := New()
		err := m.SetDriverName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("SetDriverName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		m.CallFinished("/csi.v1.Identity/Probe", codes.OK, time.Millisecond)
		want := "unknown-driver"
		if tc.ok {
			want = tc.name
		}
		if got := operationLabels(t, m)["driver_name"]; got != want {
			t.Errorf("SetDriverName(%q): driver_name %q, want %q", tc.name, got, want)
		}
	}
}

// seriesValues gathers one metric of a collector: its value by label set.
func seriesValues(t *testing.T, c prometheus.Collector, name string) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			out[strings.Join(labels, ",")] = m.GetGauge().GetValue()
		}
	}
	return out
}

// Goldens of one flavor (a golden per namespace, or a re-import beside the
// old one) add their consumers up in one series.
func TestGoldenConsumersSumOverAFlavorsGoldens(t *testing.T) {
	s := leaderSnapshot()
	second := s.Goldens[0]
	second.Namespace, second.Consumers = "cozy-other", 3
	s.Goldens = append(s.Goldens, second)
	got := seriesValues(t, NewCloneCollector(snapshotSource{s}), "csi_clone_golden_consumers")
	if want := map[string]float64{"schematic_id=" + sid + ",version=v1.13.2": 7}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("golden_consumers %v, want %v", got, want)
	}
}

// The ready time of a flavor is the first trusted golden's that finished
// importing; an untrusted or importing golden gives none.
func TestGoldenReadyIsTheFirstTrustedImportedGoldens(t *testing.T) {
	f := fleet.Flavor{SchematicID: sid, Version: "v1.13.2"}
	other := fleet.Flavor{SchematicID: sid, Version: "v1.14.0"}
	t1, t2 := time.Unix(1_700_000_000, 0), time.Unix(1_800_000_000, 0)
	s := leaderSnapshot()
	s.Goldens = []ledger.GoldenStatus{
		{Name: "untrusted", Flavor: f, ReadySince: t2},
		{Name: "importing", Flavor: f, Trusted: true},
		{Name: "first", Flavor: f, Trusted: true, ReadySince: t1},
		{Name: "second", Flavor: f, Trusted: true, ReadySince: t2},
		{Name: "other-importing", Flavor: other, Trusted: true},
	}
	got := seriesValues(t, NewPredictionCollector(snapshotSource{s}), "csi_clone_golden_ready_timestamp_seconds")
	if want := map[string]float64{"schematic_id=" + sid + ",version=v1.13.2": float64(t1.Unix())}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("golden_ready_timestamp_seconds %v, want %v", got, want)
	}
}
