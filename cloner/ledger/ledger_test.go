package ledger

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
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

// A finished disk of an image golden (vm-default-images) is timed and its
// time per phase counted like a Talos worker's, once; it avoids no Factory
// fetch and adds nothing to any flavor (its disks count per golden in the
// snapshot's Images).
func TestImageGoldenDisksAreTimedButFetchNothing(t *testing.T) {
	golden := &fleet.Golden{Namespace: "cozy-public", Name: "vm-default-images-ubuntu", Image: "ubuntu"}
	disk := &fleet.WorkerDisk{Namespace: "tenant-a", Name: "vm-disk-web", UID: "uid-web", Kind: fleet.DiskClone,
		GoldenRef: golden.Ref(), Phase: string(cdiv1.Succeeded)}
	rec := &record.Record{Verdict: record.VerdictCSIClone, Class: "replicated"}
	ev := &verdict.Evaluation{Inv: &fleet.Inventory{Goldens: []*fleet.Golden{golden}},
		Assessments: []verdict.Assessment{{Disk: disk, Golden: golden, Record: rec, Duration: 3 * time.Second, Timed: true}}}
	l := NewLedger()
	l.Apply(LedgerFacts(ev, config.Config{}))
	if len(l.Flavors) != 0 {
		t.Errorf("an image golden's disk counted for a flavor: %+v", l.Flavors)
	}
	if d := l.Durations[record.VerdictCSIClone]; d == nil || d.Count != 1 || d.Sum != 3 {
		t.Errorf("clone duration %+v, want one observation of 3s", d)
	}
	if m := l.Counted["uid-web"]; m == nil || !m.Timed || m.Avoided {
		t.Errorf("mark %+v, want timed and nothing avoided", m)
	}
}

// Adds is Apply's answer without the change: over every mark (none, and
// each combination of fetches, avoided and timed) and every fact (each
// combination of the same), it says true exactly when Apply changes the
// ledger. The verdict loop holds only the facts it says true of.
func TestAddsIsWhetherApplyChanges(t *testing.T) {
	var marks []*Mark
	marks = append(marks, nil)
	var facts []LedgerFact
	for _, fetches := range []int64{0, 1, 2} {
		for _, avoided := range []bool{false, true} {
			for _, timed := range []bool{false, true} {
				marks = append(marks, &Mark{Ref: "t/d", Fetches: fetches, Avoided: avoided, Timed: timed})
				for _, kind := range []string{"", FetchGoldenImport, FetchWorkerImport} {
					facts = append(facts, LedgerFact{Uid: "u1", Ref: "t/d", Flavor: "f/v1", kind: kind, fetches: fetches,
						Avoided: avoided, Bytes: 10, Verdict: record.VerdictCSIClone, Duration: time.Minute, Timed: timed})
				}
			}
		}
	}
	for _, m := range marks {
		for _, f := range facts {
			l := NewLedger()
			if m != nil {
				mark := *m
				l.Counted["u1"] = &mark
			}
			adds := l.Adds(f)
			if changed := l.Apply([]LedgerFact{f}); adds != changed {
				t.Errorf("mark %+v, fact %+v: Adds %v, Apply changed %v", m, f, adds, changed)
			}
		}
	}
}
