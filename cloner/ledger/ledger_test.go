package ledger

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// Each DataVolume counts once: its avoided fetch, its Factory fetches (only
// the ones beyond those already counted) and its clone duration, however
// often the same facts are applied, across a restart (the ledger written
// and read back), and when another ledger's marks are adopted first.
func TestEachDiskCountsOnce(t *testing.T) {
	const flavor = "s1/v1"
	clone := LedgerFact{Uid: "uid-clone", Ref: "tenant-a/d0", Flavor: flavor, Avoided: true, Bytes: 1 << 30,
		Verdict: "csi-clone", Duration: 3 * time.Second, Timed: true, Class: "replicated",
		Steps: []record.Step{{Phase: record.PhaseCreateVolume, Duration: 2 * time.Second}, {Phase: record.PhaseFinishing, Duration: 40 * time.Second}}}
	imported := LedgerFact{Uid: "uid-import", Ref: "tenant-a/d1", Flavor: flavor, kind: FetchWorkerImport, fetches: 2}
	golden := LedgerFact{Uid: "uid-golden", Ref: "cozy-public/g", Flavor: flavor, kind: FetchGoldenImport, fetches: 1}
	want := FlavorTotals{FetchesAvoided: 1, BytesAvoided: 1 << 30, WorkerImports: 2, GoldenImports: 1}
	check := func(what string, l *Ledger) {
		t.Helper()
		if got := *l.Flavors[flavor]; got != want {
			t.Errorf("%s: %+v, want %+v", what, got, want)
		}
		if d := l.Durations["csi-clone"]; d == nil || d.Count != 1 || d.Sum != 3 || d.Buckets["5"] != 1 {
			t.Errorf("%s: durations %+v, want one observation of 3s", what, d)
		}
		if d := l.Durations[PhaseKey(record.PhaseCreateVolume, "csi-clone", "replicated")]; d == nil || d.Count != 1 || d.Sum != 2 || d.Buckets["2.5"] != 1 {
			t.Errorf("%s: create-volume %+v, want one observation of 2s", what, d)
		}
		if d := l.Durations[PhaseKey(record.PhaseFinishing, "csi-clone", "replicated")]; d == nil || d.Count != 1 || d.Sum != 40 || d.Buckets["60"] != 1 {
			t.Errorf("%s: finishing %+v, want one observation of 40s", what, d)
		}
	}

	l := NewLedger()
	if !l.Apply([]LedgerFact{clone, imported, golden}) {
		t.Fatal("the first facts changed nothing")
	}
	check("applied once", l)
	if l.Apply([]LedgerFact{clone, imported, golden}) {
		t.Error("the same facts again reported a change")
	}
	check("applied twice", l)

	read, err := decodeLedger(&corev1.ConfigMap{Data: l.Encode()})
	if err != nil {
		t.Fatal(err)
	}
	read.Apply([]LedgerFact{clone, imported, golden})
	check("applied again after a restart", read)

	// A third fetch of the worker import counts one more, not three.
	imported.fetches = 3
	read.Apply([]LedgerFact{imported})
	want.WorkerImports = 3
	check("one more fetch", read)

	// Marks counted by another ledger are taken without counting.
	other := NewLedger()
	if !other.adopt(read.Counted) {
		t.Fatal("adopting new marks reported no change")
	}
	if other.adopt(read.Counted) {
		t.Error("adopting the same marks again reported a change")
	}
	other.Apply([]LedgerFact{clone, imported, golden})
	if len(other.Flavors) != 0 || len(other.Durations) != 0 {
		t.Errorf("facts already marked elsewhere were counted: %+v, %+v", other.Flavors, other.Durations)
	}
}

// A phase key carries phase, verdict and class, and a per-verdict key is
// none; a class may hold anything a StorageClass name may.
func TestPhaseKeySplits(t *testing.T) {
	phase, verdict, class, ok := SplitPhaseKey(PhaseKey(record.PhaseExpand, "csi-clone", "linstor.r2"))
	if !ok || phase != record.PhaseExpand || verdict != "csi-clone" || class != "linstor.r2" {
		t.Fatalf("split %q %q %q %v", phase, verdict, class, ok)
	}
	if _, _, _, ok := SplitPhaseKey("csi-clone"); ok {
		t.Fatal("a verdict's key read as a phase's")
	}
}
