package verdict_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// Each test proves one rule of verdict.go; the rule's doc comment there
// says the same in words.

func TestCSICloneWithResizeIsCSIClone(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "md0-disk-0", "kubernetes-md0", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	w.Cloned(dv, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 20*clonertest.Gi))
	recs, ev := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	r := recs["md0-disk-0"]
	if r.Verdict != record.VerdictCSIClone || r.Source != record.SourceCSITap {
		t.Fatalf("verdict %s from %s, want csi-clone from csi-tap: %s", r.Verdict, r.Source, r.Message)
	}
	if len(r.BadReasons()) != 0 {
		t.Fatalf("a good clone has bad reasons %v", r.Findings)
	}
	if r.ContentSource != "volume:"+gpv.Spec.CSI.VolumeHandle || r.CapacityBytes != 20*clonertest.Gi {
		t.Fatalf("record %+v", r)
	}
	// cloned() makes the DataVolume ready at t0+1m; the tap saw the first
	// CreateVolume at t0 and the expansion at t0+5s.
	if a := ev.Assessments[0]; !a.Timed || a.Duration != time.Minute {
		t.Fatalf("duration %v timed %v, want 1m from first CreateVolume to the disk being ready", a.Duration, a.Timed)
	}
}

func TestCSICloneAtGoldenSizeNeedsNoResize(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 6*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	w.Cloned(dv, clonertest.TestClass, "csi-clone", 6*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 6*clonertest.Gi))
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	if r := recs["d"]; r.Verdict != record.VerdictCSIClone || len(r.BadReasons()) != 0 {
		t.Fatalf("got %s %v, want csi-clone with no findings", r.Verdict, r.BadReasons())
	}
}

func TestCloneNeverExpandedIsResizeMissing(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	w.Cloned(dv, clonertest.TestClass, "csi-clone", 6*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 6*clonertest.Gi))
	dv2 := w.Worker("tenant-a", "d2", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	ev := clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 6*clonertest.Gi)
	ev.Expansions = []fleet.Expansion{{At: clonertest.T0, RequiredBytes: 20 * clonertest.Gi, Code: "ResourceExhausted", Message: "pool full"}}
	w.Cloned(dv2, clonertest.TestClass, "csi-clone", 6*clonertest.Gi, ev)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	if r := recs["d"]; !clonertest.ReasonsOf(r)[record.ReasonResizeMissing] || !strings.Contains(r.MessageFor(record.ReasonResizeMissing), "no ControllerExpandVolume") {
		t.Fatalf("d: %v %q", r.BadReasons(), r.MessageFor(record.ReasonResizeMissing))
	}
	if r := recs["d2"]; !strings.Contains(r.MessageFor(record.ReasonResizeMissing), "ResourceExhausted pool full") {
		t.Fatalf("d2 should carry the failed expansion: %q", r.MessageFor(record.ReasonResizeMissing))
	}
}

func TestSnapshotRestoreIsSnapshotClone(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	h := gpv.Spec.CSI.VolumeHandle
	mk := func(name, snap, snapOf string) {
		dv := w.Worker("tenant-a", name, "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
		ev := clonertest.TapClone("", 6*clonertest.Gi, 20*clonertest.Gi)
		ev.SourceSnapshot, ev.SnapshotOf = snap, snapOf
		w.Cloned(dv, clonertest.TestClass, "snapshot", 20*clonertest.Gi, ev)
	}
	mk("recorded", "snap-1", h) // the evidence loop saw CreateSnapshot
	mk("via-vsc", "snap-2", "") // only the VolumeSnapshotContent knows
	mk("elsewhere", "snap-3", "")
	w.Vscs = append(w.Vscs, vsc("snap-2", h), vsc("snap-3", "some-other-volume"))
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	for _, n := range []string{"recorded", "via-vsc"} {
		if r := recs[n]; r.Verdict != record.VerdictSnapshotClone || len(r.BadReasons()) != 0 {
			t.Fatalf("%s: %s %v", n, r.Verdict, r.Findings)
		}
	}
	if r := recs["elsewhere"]; r.Verdict != record.VerdictSnapshotClone || !clonertest.ReasonsOf(r)[record.ReasonWrongSource] {
		t.Fatalf("elsewhere: %s %v, want snapshot-clone + wrong-source", r.Verdict, r.BadReasons())
	}
}

func vsc(snapHandle, source string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
		"metadata": map[string]any{"name": "snapcontent-" + snapHandle},
		"spec":     map[string]any{"source": map[string]any{"volumeHandle": source}},
		"status":   map[string]any{"snapshotHandle": snapHandle},
	}}
}

func TestBlankVolumeIsHostAssistedWithCDIsReason(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	ev := clonertest.TapClone("", 20*clonertest.Gi, 20*clonertest.Gi)
	pvc, _ := w.Cloned(dv, clonertest.TestClass, "copy", 20*clonertest.Gi, ev)
	pvc.Annotations[fleet.AnnCDIFallbackReason] = "target storage class does not allow volume expansion"
	recs, evn := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	r := recs["d"]
	// The blank volume had its final size at once (t0+2s); the copy by pods
	// lasted until the DataVolume was ready (t0+1m), and that is the clone.
	if a := evn.Assessments[0]; !a.Timed || a.Duration != time.Minute {
		t.Fatalf("duration %v timed %v, want 1m: a host-assisted clone lasts until the copy is done", a.Duration, a.Timed)
	}
	if r.Verdict != record.VerdictHostAssisted || r.ContentSource != "none" {
		t.Fatalf("got %s (%s)", r.Verdict, r.ContentSource)
	}
	if !strings.Contains(r.Message, "does not allow volume expansion") || !clonertest.ReasonsOf(r)[record.ReasonHostAssisted] {
		t.Fatalf("message %q reasons %v", r.Message, r.BadReasons())
	}
	if record.EventReason(record.ReasonHostAssisted) != "HostAssistedClone" || record.Fix(record.ReasonHostAssisted) == "" {
		t.Fatal("host-assisted needs an event reason and a fix")
	}
}

func TestWithoutTapTheVerdictComesFromCDIAndSaysSo(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	for name, ct := range map[string]string{"csi": "csi-clone", "snap": "snapshot", "copy": "copy", "none": ""} {
		w.Cloned(w.Worker("tenant-a", name, "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass)), clonertest.TestClass, ct, 20*clonertest.Gi, nil)
	}
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	want := map[string]string{"csi": record.VerdictCSIClone, "snap": record.VerdictSnapshotClone, "copy": record.VerdictHostAssisted, "none": record.VerdictUnknown}
	for name, v := range want {
		if r := recs[name]; r.Verdict != v || r.Source != record.SourceCDI {
			t.Errorf("%s: %s from %s, want %s from cdi-annotations", name, r.Verdict, r.Source, v)
		}
	}
}

// A finished disk whose PV is younger than --evidence-grace and carries no
// evidence yet is pending, not "made while no sidecar watched": the replica
// that saw its CreateVolume is about to write the evidence.
func TestFreshVolumeWaitsForTheTapsEvidenceBeforeCDIIsBelieved(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	made := clonertest.T0.Add(time.Minute)
	_, bare := w.Cloned(w.Worker("tenant-a", "bare", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass)), clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	_, seen := w.Cloned(w.Worker("tenant-a", "seen", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass)), clonertest.TestClass, "csi-clone", 20*clonertest.Gi,
		clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 20*clonertest.Gi))
	bare.CreationTimestamp, seen.CreationTimestamp = metav1.NewTime(made), metav1.NewTime(made)
	cfg := clonertest.TestConfig()

	recs, ev := w.JudgeAll(t, cfg, made.Add(cfg.EvidenceGrace/2))
	if r := recs["bare"]; r.Verdict != record.VerdictPending || !strings.Contains(r.Message, "waiting for the tap's evidence") {
		t.Fatalf("inside the grace: %s %q, want pending for the evidence", r.Verdict, r.Message)
	}
	if r := recs["seen"]; r.Verdict != record.VerdictCSIClone || r.Source != record.SourceCSITap {
		t.Fatalf("evidence already there: %s from %s, want csi-clone from csi-tap", r.Verdict, r.Source)
	}
	if want := made.Add(cfg.EvidenceGrace); !ev.RecheckAt.Equal(want) {
		t.Fatalf("recheck at %s, want %s (the grace's end)", ev.RecheckAt, want)
	}

	recs, ev = w.JudgeAll(t, cfg, made.Add(cfg.EvidenceGrace))
	if r := recs["bare"]; r.Verdict != record.VerdictCSIClone || r.Source != record.SourceCDI {
		t.Fatalf("after the grace: %s from %s, want csi-clone from cdi-annotations", r.Verdict, r.Source)
	}
	if !ev.RecheckAt.IsZero() {
		t.Fatalf("nothing left to recheck, got %s", ev.RecheckAt)
	}
}

func TestCDIDisagreeingWithTheDriverLosesToTheDriver(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	w.Cloned(dv, clonertest.TestClass, "copy", 20*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 20*clonertest.Gi))
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	r := recs["d"]
	if r.Verdict != record.VerdictCSIClone || !clonertest.ReasonsOf(r)[record.ReasonCDIDisagrees] {
		t.Fatalf("got %s %v, want csi-clone + cdi-disagrees", r.Verdict, r.BadReasons())
	}
	if !strings.Contains(r.MessageFor(record.ReasonCDIDisagrees), "storage layer's record wins") {
		t.Fatalf("message must say the storage layer wins: %q", r.MessageFor(record.ReasonCDIDisagrees))
	}
}

func TestGoldenStillImportingIsPendingNotStuck(t *testing.T) {
	var w clonertest.World
	g, _ := w.DataVolume(config.DefaultGoldenNamespace, clonertest.GoldenName(clonertest.TestSID, clonertest.TestVer), 6*clonertest.Gi, publish.PtrTo(clonertest.TestClass)), 0
	g.Status.Phase = cdiv1.ImportInProgress
	w.Claim(g, clonertest.TestClass, 6*clonertest.Gi, 0, "")
	w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(48*time.Hour))
	if r := recs["d"]; r.Verdict != record.VerdictPending || len(r.BadReasons()) != 0 {
		t.Fatalf("got %s %v, want pending with nothing flagged", r.Verdict, r.BadReasons())
	}
}

func TestUnfinishedCloneIsStuckAfterStuckAfterWithTheDriverError(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.CSICloneInProgress
	pvc, _ := w.Claim(dv, clonertest.TestClass, 20*clonertest.Gi, 0, "")
	pvc.Annotations[fleet.AnnDriverError] = record.MustJSON(fleet.DriverError{Method: "CreateVolume", Code: "DeadlineExceeded",
		Message: "context deadline exceeded", Claim: "cozy-public/tmp-pvc-x", Attempts: 4})
	cfg := clonertest.TestConfig()
	if r, _ := w.JudgeAll(t, cfg, clonertest.T0.Add(cfg.StuckAfter-time.Second)); r["d"].Verdict != record.VerdictPending {
		t.Fatalf("before --stuck-after: %s", r["d"].Verdict)
	}
	recs, _ := w.JudgeAll(t, cfg, clonertest.T0.Add(cfg.StuckAfter))
	r := recs["d"]
	if r.Verdict != record.VerdictStuck || !strings.Contains(r.Message, "DeadlineExceeded: context deadline exceeded") {
		t.Fatalf("got %s %q", r.Verdict, r.Message)
	}
}

func TestStuckClockStartsWhenTheGoldenIsReady(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	clonertest.Succeed(g, clonertest.T0.Add(30*time.Minute)) // imported long after the worker was created
	w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(35*time.Minute))
	if recs["d"].Verdict != record.VerdictPending {
		t.Fatalf("5 minutes after the golden became ready: %s", recs["d"].Verdict)
	}
}

func TestFailedDataVolumeIsFailed(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.Failed
	dv.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeRunning, Message: "clone source gone"}}
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0)
	if r := recs["d"]; r.Verdict != record.VerdictFailed || !strings.Contains(r.Message, "clone source gone") {
		t.Fatalf("got %s %q", r.Verdict, r.Message)
	}
}

func TestFailedGoldenFlagsItsWorkers(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	g.Status.Phase = cdiv1.Failed
	w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	if r := recs["d"]; r.Verdict != record.VerdictPending || !clonertest.ReasonsOf(r)[record.ReasonFailedGolden] {
		t.Fatalf("got %s %v", r.Verdict, r.BadReasons())
	}
}

func TestUnknownGolden(t *testing.T) {
	var w clonertest.World
	w.Golden(clonertest.TestSID, clonertest.TestVer)
	ghost := &cdiv1.DataVolume{}
	ghost.Namespace, ghost.Name = config.DefaultGoldenNamespace, clonertest.GoldenName("abc", "v9.9.9")
	w.Worker("tenant-a", "d", "p", ghost, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	if r := recs["d"]; !clonertest.ReasonsOf(r)[record.ReasonUnknownGolden] {
		t.Fatalf("got %v", r.BadReasons())
	}
}

func TestGoldenBreakingTheNamingRulesIsNotTrusted(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden("ABC", "1.2")
	w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	recs, ev := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	if ev.Inv.Goldens[0].Trusted() || len(ev.Inv.Goldens[0].Problems) != 2 {
		t.Fatalf("problems %v", ev.Inv.Goldens[0].Problems)
	}
	if r := recs["d"]; !clonertest.ReasonsOf(r)[record.ReasonInvalidGolden] {
		t.Fatalf("got %v", r.BadReasons())
	}
	p := ev.Inv.Goldens[0].Problems
	if msg := recs["d"].MessageFor(record.ReasonInvalidGolden); !strings.HasSuffix(msg, "naming rules: "+p[0]+"; "+p[1]) {
		t.Errorf("message %q does not end with both problems, in order", msg)
	}
}

// A disk whose class resolves to nothing (no class named, no default) is
// not a class mismatch: there is no class to compare.
func TestUnresolvedClassIsNoMismatch(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, nil)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Minute))
	if r := recs["d"]; r.Class != "" || clonertest.ReasonsOf(r)[record.ReasonClassMismatch] {
		t.Fatalf("class %q, reasons %v; want no class and no class-mismatch", r.Class, r.BadReasons())
	}
}

func TestClassMismatchIsFlaggedBeforeAndAfterTheClone(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	w.Worker("tenant-a", "pending", "p", g, 20*clonertest.Gi, publish.PtrTo("fast"))
	done := w.Worker("tenant-a", "done", "p", g, 20*clonertest.Gi, publish.PtrTo("fast"))
	w.Cloned(done, "fast", "csi-clone", 20*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 20*clonertest.Gi))
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Minute))
	for _, n := range []string{"pending", "done"} {
		if r := recs[n]; !clonertest.ReasonsOf(r)[record.ReasonClassMismatch] || !strings.Contains(r.MessageFor(record.ReasonClassMismatch), `"fast"`) {
			t.Fatalf("%s: %v", n, r.BadReasons())
		}
	}
}

func TestEmptyClassIsResolvedBeforeComparing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		virt     string // class carrying the virtualization default, "" for none
		k8s      string // class carrying the Kubernetes default
		mismatch bool
	}{
		{"virt default is the golden's", clonertest.TestClass, "local", false},
		{"no virt default, k8s default is the golden's", "", clonertest.TestClass, false},
		{"virt default elsewhere wins over k8s default", "local", clonertest.TestClass, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w clonertest.World
			g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
			w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, nil)
			for _, n := range []string{clonertest.TestClass, "local"} {
				ann := map[string]string{}
				if n == tc.virt {
					ann[fleet.AnnDefaultVirtClass] = "true"
				}
				if n == tc.k8s {
					ann[fleet.AnnDefaultClass] = "true"
				}
				w.Class(n, ann, clonertest.T0)
			}
			recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0)
			if got := clonertest.ReasonsOf(recs["d"])[record.ReasonClassMismatch]; got != tc.mismatch {
				t.Fatalf("class-mismatch %v, want %v (%v)", got, tc.mismatch, recs["d"].Findings)
			}
		})
	}
}

func TestBoundDiskKeepsItsClassWhenTheDefaultMoves(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, nil)
	w.Cloned(dv, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 20*clonertest.Gi))
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	w.Class("local", map[string]string{fleet.AnnDefaultClass: "true", fleet.AnnDefaultVirtClass: "true"}, clonertest.T0.Add(time.Hour))
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(2*time.Hour))
	if r := recs["d"]; len(r.BadReasons()) != 0 || r.Class != clonertest.TestClass {
		t.Fatalf("class %q reasons %v", r.Class, r.BadReasons())
	}
}

func TestCloneOfAnotherVolumeIsWrongSource(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	w.Cloned(dv, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, clonertest.TapClone("not-the-golden", 6*clonertest.Gi, 20*clonertest.Gi))
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	if r := recs["d"]; r.Verdict != record.VerdictCSIClone || !clonertest.ReasonsOf(r)[record.ReasonWrongSource] {
		t.Fatalf("got %s %v", r.Verdict, r.BadReasons())
	}
}

func TestFactoryImportOfAKnownFlavorIsHTTPImport(t *testing.T) {
	var w clonertest.World
	w.Golden(clonertest.TestSID, clonertest.TestVer)
	url := "https://factory.talos.dev/image/" + clonertest.TestSID + "/" + clonertest.TestVer + "/openstack-amd64.raw.xz"
	done := w.DataVolume("tenant-b", "http-done", 20*clonertest.Gi, nil)
	done.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: url}}
	done.Annotations[fleet.AnnPool] = "md1"
	clonertest.Succeed(done, clonertest.T0)
	running := w.DataVolume("tenant-b", "http-running", 20*clonertest.Gi, nil)
	running.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: url}}
	running.Status.Phase = cdiv1.ImportInProgress
	other := w.DataVolume("tenant-b", "other-image", 20*clonertest.Gi, nil)
	other.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://factory.talos.dev/image/abc/v1.0.0/x.raw.xz"}}
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0)
	if r := recs["http-done"]; r.Verdict != record.VerdictHTTPImport || r.SchematicID != clonertest.TestSID || r.Pool != "md1" {
		t.Fatalf("http-done: %+v", r)
	}
	if r := recs["http-running"]; r.Verdict != record.VerdictPending {
		t.Fatalf("http-running: %s", r.Verdict)
	}
	if _, ok := recs["other-image"]; ok {
		t.Fatal("an import of a flavor no golden has is not a worker disk")
	}
}

func TestCloneOfAnUnrelatedPVCIsNotAWorkerDisk(t *testing.T) {
	var w clonertest.World
	w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.DataVolume("tenant-a", "vm-disk", 20*clonertest.Gi, nil)
	dv.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "images", Name: "ubuntu"}}
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0)
	if len(recs) != 0 {
		t.Fatalf("judged %v", recs)
	}
}
