package ledger

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// TestTallyEqualsASumOverTheJudgedDisks: after any sequence of disks judged,
// re-judged and forgotten, the incremental tally equals a tally built from
// scratch over the disks as last judged, and holds no zero counts.
func TestTallyEqualsASumOverTheJudgedDisks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	randomDisk := func(key string) JudgedDisk {
		d := JudgedDisk{Namespace: pick("a", "b"), Pool: pick("p1", "p2"), Kind: pick(fleet.DiskClone, fleet.DiskHTTPImport),
			GoldenRef: types.NamespacedName{Namespace: "cozy-public", Name: pick("g1", "g2")},
			Flavor:    fleet.Flavor{SchematicID: pick("s1", "s2"), Version: "v1"}, Verdict: pick("csi-clone", "host-assisted", "stuck"),
			Class: pick("", "replicated", "local"), Image: rng.IntN(3) == 0}
		for range rng.IntN(3) {
			d.BadReasons = append(d.BadReasons, pick("host-assisted", "class-mismatch"))
		}
		d.PredictionChecked, d.PredictionRight = rng.IntN(2) == 0, rng.IntN(2) == 0
		d.Key, d.Phase = key, pick("", record.PhasePlanning, record.PhaseCreateVolume)
		d.Requested = time.Unix(int64(rng.IntN(1000)), 0)
		return d
	}
	judged, tally := map[string]JudgedDisk{}, NewFleetTally()
	for step := range 5000 {
		k := fmt.Sprint(rng.IntN(50))
		if old, ok := judged[k]; ok {
			tally.Add(old, -1)
			delete(judged, k)
		}
		if rng.IntN(4) > 0 {
			judged[k] = randomDisk(k)
			tally.Add(judged[k], 1)
		}
		if step%250 != 0 {
			continue
		}
		want := NewFleetTally()
		for _, d := range judged {
			want.Add(d, 1)
		}
		if !reflect.DeepEqual(tally, want) {
			t.Fatalf("step %d: incremental tally %+v, from scratch %+v", step, tally, want)
		}
	}
	for _, d := range judged {
		tally.Add(d, -1)
	}
	if !reflect.DeepEqual(tally, NewFleetTally()) {
		t.Fatalf("every disk forgotten, tally still holds %+v", tally)
	}
}

// TestImageDisksCountPerGoldenAndVerdictOnly: a disk of a non-Talos golden
// counts in ImageDisks under its golden, and not in the per-flavor class
// counts that pair a flavor with its predicted paths.
func TestImageDisksCountPerGoldenAndVerdictOnly(t *testing.T) {
	ubuntu := types.NamespacedName{Namespace: "cozy-public", Name: "vm-default-images-ubuntu"}
	tally := NewFleetTally()
	for range 2 {
		tally.Add(JudgedDisk{Namespace: "t", Pool: "vm-disk-a", Kind: fleet.DiskClone, GoldenRef: ubuntu, Verdict: "csi-clone",
			Class: "replicated", Image: true}, 1)
	}
	tally.Add(JudgedDisk{Namespace: "t", Pool: "md0", Kind: fleet.DiskClone, GoldenRef: types.NamespacedName{Namespace: "cozy-public", Name: "talos"},
		Flavor: fleet.Flavor{SchematicID: "s", Version: "v1"}, Verdict: "csi-clone", Class: "replicated"}, 1)
	var s Snapshot
	tally.Fill(&s)
	if want := []ImageDiskCount{{Golden: ubuntu, Verdict: "csi-clone", Count: 2}}; !reflect.DeepEqual(s.ImageDisks, want) {
		t.Errorf("image disks %+v, want %+v", s.ImageDisks, want)
	}
	if len(s.ClassDisks) != 1 || s.ClassDisks[0].Flavor.SchematicID != "s" {
		t.Errorf("class disks %+v, want only the Talos disk's", s.ClassDisks)
	}
}

// Clones in flight per golden and phase: a disk counts in its phase while
// it has one, moves when its phase changes, and the oldest is recomputed
// when the oldest leaves.
func TestInFlightFollowsEachDisksPhase(t *testing.T) {
	tally := NewFleetTally()
	golden := types.NamespacedName{Namespace: "cozy-public", Name: "g"}
	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	disk := func(key, phase string, requested time.Time) JudgedDisk {
		return JudgedDisk{Namespace: "tenant-a", Kind: fleet.DiskClone, GoldenRef: golden, Verdict: record.VerdictPending,
			Key: key, Phase: phase, Requested: requested}
	}
	a, b, c := disk("tenant-a/a", record.PhaseCreateVolume, t0), disk("tenant-a/b", record.PhaseCreateVolume, t0.Add(time.Minute)),
		disk("tenant-a/c", record.PhasePlanning, t0.Add(2*time.Minute))
	for _, d := range []JudgedDisk{a, b, c} {
		tally.Add(d, 1)
	}
	check := func(when string, want map[string]InFlightCount) {
		t.Helper()
		var s Snapshot
		tally.Fill(&s)
		got := map[string]InFlightCount{}
		for _, c := range s.InFlight {
			got[c.Phase] = c
		}
		if len(got) != len(want) {
			t.Fatalf("%s: in flight %+v, want %+v", when, s.InFlight, want)
		}
		for phase, w := range want {
			if g := got[phase]; g.Count != w.Count || !g.Oldest.Equal(w.Oldest) || g.Golden != golden {
				t.Fatalf("%s: %s %+v, want %d from %v", when, phase, g, w.Count, w.Oldest)
			}
		}
	}
	check("three in flight", map[string]InFlightCount{record.PhaseCreateVolume: {Count: 2, Oldest: t0}, record.PhasePlanning: {Count: 1, Oldest: t0.Add(2 * time.Minute)}})
	tally.Add(a, -1) // the oldest created its volume: now in expand
	a.Phase = record.PhaseExpand
	tally.Add(a, 1)
	check("the oldest moved on", map[string]InFlightCount{record.PhaseCreateVolume: {Count: 1, Oldest: t0.Add(time.Minute)},
		record.PhaseExpand: {Count: 1, Oldest: t0}, record.PhasePlanning: {Count: 1, Oldest: t0.Add(2 * time.Minute)}})
	for _, d := range []JudgedDisk{a, b, c} {
		tally.Add(d, -1)
	}
	d := disk("tenant-a/a", "", t0) // finished: no phase
	tally.Add(d, 1)
	check("every clone finished", map[string]InFlightCount{})
}

// The peak of clones in flight at once, over spans from request to ready.
func TestPeakConcurrency(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1700000000+int64(s), 0) }
	for _, tc := range []struct {
		name  string
		spans []span
		want  int
	}{
		{"none", nil, 0},
		{"one finished", []span{{at(0), at(10)}}, 1},
		{"one in flight", []span{{at(0), time.Time{}}}, 1},
		{"overlapping", []span{{at(0), at(10)}, {at(5), at(15)}}, 2},
		{"one ends as the next starts", []span{{at(0), at(10)}, {at(10), at(20)}}, 1},
		{"one after the other", []span{{at(0), at(10)}, {at(11), at(20)}}, 1},
		{"nested, and an in-flight one across both", []span{{at(0), at(30)}, {at(5), at(10)}, {at(7), time.Time{}}}, 3},
		{"the peak is not at the end", []span{{at(0), at(10)}, {at(1), at(9)}, {at(2), at(8)}, {at(20), time.Time{}}}, 3},
	} {
		spans := map[string]span{}
		for i, s := range tc.spans {
			spans[fmt.Sprint(i)] = s
		}
		if got := peakConcurrency(spans); got != tc.want {
			t.Errorf("%s: peak %d, want %d", tc.name, got, tc.want)
		}
	}
}
