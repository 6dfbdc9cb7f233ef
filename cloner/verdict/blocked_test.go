package verdict_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// Each test proves one rule of judgeBlocked (blocked.go) or of the clone
// path (path.go). Objects are shaped as CDI v1.65 leaves them.

func TestCDIRefusingTheCloneIsFailedAtOnceWithCDIsWords(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "small", "p", g, 4*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Spec.Storage.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	dv.Status.Phase = ""
	msg := "The clone doesn't meet the validation requirements: target resources requests storage size is smaller than the source 4294967296 < 6442450944"
	clonertest.Condition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, fleet.CdiReasonValidationFailed, msg, clonertest.T0)
	clonertest.Condition(dv, cdiv1.DataVolumeReady, corev1.ConditionFalse, fleet.CdiReasonValidationFailed, msg, clonertest.T0)
	r := w.JudgeWithCDI(t, clonertest.T0.Add(time.Second))["small"] // long before --stuck-after
	if r.Verdict != record.VerdictFailed || !strings.Contains(r.Message, "CloneValidationFailed") || !strings.Contains(r.Message, msg) {
		t.Fatalf("got %s %q, want failed with CDI's reason and message", r.Verdict, r.Message)
	}
	if got := clonertest.ReasonsOf(r); !got[record.ReasonFailed] || !got[record.ReasonTooSmall] || got[record.ReasonStuck] {
		t.Fatalf("reasons %v, want failed and too-small", r.BadReasons())
	}
}

func TestCDICloneErrorIsFailedOnceItLasts(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "quota", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	pvc := w.PendingTarget(dv)
	quota := `persistentvolumeclaims "tmp-pvc-x" is forbidden: exceeded quota: golden-quota, requested: persistentvolumeclaims=1, used: persistentvolumeclaims=1, limited: persistentvolumeclaims=1`
	pvc.Annotations[fleet.AnnCDIClonePhase], pvc.Annotations[fleet.AnnCDICloneError] = "Error", quota
	clonertest.Condition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, fleet.CdiReasonError, quota, clonertest.T0.Add(time.Minute))
	cfg := clonertest.TestConfig()

	// Within the grace (an update conflict clears in a moment): not yet,
	// and the pass says when to look again.
	recs, ev := w.JudgeAll(t, cfg, clonertest.T0.Add(time.Minute+time.Second))
	if r := recs["quota"]; r.Verdict != record.VerdictPending {
		t.Fatalf("inside the grace: %s %q", r.Verdict, r.Message)
	}
	if want := clonertest.T0.Add(time.Minute).Add(cfg.EvidenceGrace); !ev.RecheckAt.Equal(want) {
		t.Fatalf("recheck at %v, want %v", ev.RecheckAt, want)
	}
	recs, _ = w.JudgeAll(t, cfg, clonertest.T0.Add(time.Minute).Add(cfg.EvidenceGrace))
	r := recs["quota"]
	if r.Verdict != record.VerdictFailed || !strings.Contains(r.Message, quota) {
		t.Fatalf("after the grace: %s %q, want failed with CDI's cloneError", r.Verdict, r.Message)
	}
	if cfg.StuckAfter <= cfg.EvidenceGrace {
		t.Fatal("the test proves nothing if --stuck-after is not longer than the grace")
	}
}

func TestCloneErrorTheDataVolumeDoesNotShowIsNotFailed(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	pvc := w.PendingTarget(dv)
	pvc.Annotations[fleet.AnnCDIClonePhase], pvc.Annotations[fleet.AnnCDICloneError] = "Error", "Operation cannot be fulfilled: the object has been modified"
	clonertest.Condition(dv, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "Populator is running", "", clonertest.T0)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	if r := recs["d"]; r.Verdict == record.VerdictFailed {
		t.Fatalf("a clone error the DataVolume never showed made it failed: %q", r.Message)
	}
}

func TestGoldenGoneBeforeTheCloneIsStuckAtOnce(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	// Drop the golden's DataVolume and claim, keep its name in the disk.
	w.Dvs, w.Pvcs = nil, nil
	dv := w.Worker("tenant-a", "mid", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	w.PendingTarget(dv)
	waiting := w.Worker("tenant-a", "no-claim", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	clonertest.Condition(waiting, cdiv1.DataVolumeBound, corev1.ConditionFalse, fleet.CdiReasonWithoutSource,
		"The source pvc "+g.Name+" doesn't exist", clonertest.T0)
	notLooked := w.Worker("tenant-a", "not-looked", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	_ = notLooked
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Second))
	for _, n := range []string{"mid", "no-claim"} {
		r := recs[n]
		if r.Verdict != record.VerdictStuck || !clonertest.ReasonsOf(r)[record.ReasonUnknownGolden] || !strings.Contains(r.Message, g.Name) {
			t.Fatalf("%s: %s %v %q, want stuck + unknown-golden at once", n, r.Verdict, r.BadReasons(), r.Message)
		}
	}
	if r := recs["no-claim"]; !strings.Contains(r.Message, "CloneWithoutSource") {
		t.Fatalf("CDI's words missing: %q", r.Message)
	}
	// CDI has not looked yet (no claim, no condition): the golden may be on
	// its way, as when a catalog and its pools are applied together.
	if r := recs["not-looked"]; r.Verdict != record.VerdictPending {
		t.Fatalf("not-looked: %s %q", r.Verdict, r.Message)
	}
}

func TestGoldenGoneAfterTheCloneWasMadeDoesNotBlock(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	w.Dvs = nil // the DataVolume is deleted; keep the claim for the first case
	dv := w.Worker("tenant-a", "claim-left", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	w.PendingTarget(dv)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Second))
	if r := recs["claim-left"]; r.Verdict == record.VerdictStuck {
		t.Fatalf("the golden's claim still exists (kept by a clone's finalizer): %q", r.Message)
	}
	w.Pvcs = nil
	made := w.Worker("tenant-a", "made", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	target := w.PendingTarget(made)
	w.TmpClaim(target, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 6*clonertest.Gi))
	recs, _ = w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Second))
	if r := recs["made"]; r.Verdict != record.VerdictPending {
		t.Fatalf("the volume was already cloned; the golden is not needed any more: %s %q", r.Verdict, r.Message)
	}
}

func TestFailedExpansionOnTheTmpClaimIsResizeFailedWhileUnbound(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "grow", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.PrepClaimInProgress
	target := w.PendingTarget(dv)
	ev := clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 6*clonertest.Gi)
	ev.Expansions = []fleet.Expansion{
		{At: clonertest.T0.Add(3 * time.Second), RequiredBytes: 20 * clonertest.Gi, Code: "OutOfRange", Message: "pool replicated has 2147483648 bytes free, 15032385536 more requested"},
		{At: clonertest.T0.Add(5 * time.Second), RequiredBytes: 20 * clonertest.Gi, Code: "OutOfRange", Message: "pool replicated has 2147483648 bytes free, 15032385536 more requested"},
	}
	tmp, tmpPV := w.TmpClaim(target, ev)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(10*time.Second))
	r := recs["grow"]
	if r.Verdict != record.VerdictStuck || !clonertest.ReasonsOf(r)[record.ReasonResizeFailed] {
		t.Fatalf("got %s %v %q, want stuck + resize-failed at once", r.Verdict, r.BadReasons(), r.Message)
	}
	want := "ControllerExpandVolume OutOfRange: pool replicated has 2147483648 bytes free"
	if !strings.HasPrefix(r.DriverError, want) || !strings.Contains(r.Message, want) || !strings.Contains(r.MessageFor(record.ReasonResizeFailed), "OutOfRange: pool replicated") {
		t.Fatalf("driver's words missing: driverError %q message %q finding %q", r.DriverError, r.Message, r.MessageFor(record.ReasonResizeFailed))
	}
	if r.CloneClaim != tmp.Namespace+"/"+tmp.Name || r.Volume != tmpPV.Spec.CSI.VolumeHandle || !strings.Contains(r.Message, r.CloneClaim) {
		t.Fatalf("the record does not say where the disk is: cloneClaim %q volume %q", r.CloneClaim, r.Volume)
	}

	// The resizer retried and the driver grew it: nothing is left of it.
	ev.Expansions = append(ev.Expansions, fleet.Expansion{At: clonertest.T0.Add(time.Minute), RequiredBytes: 20 * clonertest.Gi, CapacityBytes: 20 * clonertest.Gi, Code: "OK"})
	tmpPV.Annotations[fleet.AnnCSIEvidence] = record.MustJSON(ev)
	recs, _ = w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(2*time.Minute))
	if r := recs["grow"]; r.Verdict != record.VerdictPending || len(r.BadReasons()) != 0 || r.DriverError != "" {
		t.Fatalf("after a successful retry: %s %v %q", r.Verdict, r.BadReasons(), r.DriverError)
	}
}

func TestRetryableDriverErrorsWaitForStuckAfter(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "slow", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	target := w.PendingTarget(dv)
	ev := clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 6*clonertest.Gi)
	ev.Expansions = []fleet.Expansion{{At: clonertest.T0, RequiredBytes: 20 * clonertest.Gi, Code: "Unavailable", Message: "try later"}}
	w.TmpClaim(target, ev)
	dv2 := w.Worker("tenant-a", "hang", "p", g, 20*clonertest.Gi, publish.PtrTo("local"))
	t2 := w.PendingTarget(dv2)
	t2.Annotations[fleet.AnnDriverError] = record.MustJSON(fleet.DriverError{Method: "CreateVolume", Code: "DeadlineExceeded",
		Message: "context deadline exceeded", Claim: "cozy-public/tmp-pvc-" + string(t2.UID), First: clonertest.T0, Last: clonertest.T0})
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Minute))
	for _, n := range []string{"slow", "hang"} {
		if r := recs[n]; r.Verdict != record.VerdictPending || r.DriverError == "" {
			t.Fatalf("%s: %s %q (driver error %q), want pending with the error recorded", n, r.Verdict, r.Message, r.DriverError)
		}
	}
	if got := recs["slow"].BadReasons(); len(got) != 0 {
		t.Fatalf("an expansion the resizer retries is no finding before --stuck-after: %v", got)
	}
	recs, _ = w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(config.DefaultStuckAfter))
	if r := recs["hang"]; r.Verdict != record.VerdictStuck || !strings.Contains(r.Message, r.DriverError) {
		t.Fatalf("hang after --stuck-after: %s %q", r.Verdict, r.Message)
	}
	if r := recs["slow"]; r.Verdict != record.VerdictStuck || !clonertest.ReasonsOf(r)[record.ReasonResizeFailed] {
		t.Fatalf("slow after --stuck-after: %s %v, want stuck and resize-failed", r.Verdict, r.BadReasons())
	}
}

func TestDefiniteCreateVolumeErrorIsStuckAtOnceUntilARetrySucceeds(t *testing.T) {
	var w clonertest.World
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "local", "p", g, 20*clonertest.Gi, publish.PtrTo("local"))
	target := w.PendingTarget(dv)
	de := fleet.DriverError{Method: "CreateVolume", Code: "InvalidArgument", Message: "cannot clone volume g into node-local pool local",
		Claim: "cozy-public/tmp-pvc-" + string(target.UID), First: clonertest.T0, Last: clonertest.T0.Add(time.Second)}
	target.Annotations[fleet.AnnDriverError] = record.MustJSON(de)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Minute))
	r := recs["local"]
	if r.Verdict != record.VerdictStuck || r.DriverError != "CreateVolume InvalidArgument: "+de.Message || !strings.Contains(r.Message, r.DriverError) {
		t.Fatalf("got %s %q %q", r.Verdict, r.Message, r.DriverError)
	}
	// The provisioner retried and the driver created it: the old error on
	// the claim says nothing any more.
	w.TmpClaim(target, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 6*clonertest.Gi))
	recs, _ = w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Minute))
	if r := recs["local"]; r.Verdict != record.VerdictPending || r.DriverError != "" {
		t.Fatalf("after the successful retry: %s %q", r.Verdict, r.DriverError)
	}
}

func TestStuckMessageCarriesCDIsExplanation(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	clonertest.Condition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, "ErrExceededQuota", "exceeded quota: tenant-quota", clonertest.T0)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	// The sidecar's own text, with CDI's word appended.
	if r := recs["d"]; r.Verdict != record.VerdictStuck || !strings.HasPrefix(r.Message, "clone requested at ") ||
		!strings.HasSuffix(r.Message, "; CDI: ErrExceededQuota: exceeded quota: tenant-quota") {
		t.Fatalf("got %s %q", r.Verdict, r.Message)
	}
}

func TestPVCSpecGetsOnlyTheKubernetesDefault(t *testing.T) {
	var w clonertest.World
	w.Class("virt", map[string]string{fleet.AnnDefaultVirtClass: "true"}, clonertest.T0)
	w.Class("k8s", map[string]string{fleet.AnnDefaultClass: "true"}, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	pvcSpec := w.Worker("tenant-a", "pvc-spec", "p", g, 20*clonertest.Gi, nil)
	pvcSpec.Spec.PVC = &corev1.PersistentVolumeClaimSpec{Resources: pvcSpec.Spec.Storage.Resources}
	pvcSpec.Spec.Storage = nil
	w.Worker("tenant-a", "storage-spec", "p", g, 20*clonertest.Gi, nil)
	archive := w.Worker("tenant-a", "archive", "p", g, 20*clonertest.Gi, nil)
	archive.Spec.ContentType = cdiv1.DataVolumeArchive
	odd := w.Worker("tenant-a", "odd", "p", g, 20*clonertest.Gi, nil)
	odd.Spec.ContentType = "something-else" // CDI reads it as kubevirt
	// No claim exists yet for any of them: the rule of the spec decides.
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Second))
	for name, want := range map[string]string{"pvc-spec": "k8s", "storage-spec": "virt", "archive": "k8s", "odd": "virt"} {
		if got := recs[name].Class; got != want {
			t.Errorf("%s: class %q, want %q", name, got, want)
		}
	}
}

func TestFallbackTextNamesCDIsEvent(t *testing.T) {
	if got := fleet.FallbackText("No volume expansion is possible"); got != "NoVolumeExpansion: No volume expansion is possible" {
		t.Fatalf("got %q", got)
	}
	if got := fleet.FallbackText("something new"); got != "something new" {
		t.Fatalf("got %q", got)
	}
}

// TestCloneErrorWhileTheGoldenImportsIsWaiting: CDI's populator writes
// clonePhase Error ("source/target size info missing") while the golden has
// no capacity yet; that is CDI waiting for the import, not failing.
func TestCloneErrorWhileTheGoldenImportsIsWaiting(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	g.Status.Phase = cdiv1.ImportInProgress
	dv := w.Worker("tenant-a", "early", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	pvc := w.PendingTarget(dv)
	pvc.Annotations[fleet.AnnCDIClonePhase], pvc.Annotations[fleet.AnnCDICloneError] = "Error", "source/target size info missing"
	clonertest.Condition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, fleet.CdiReasonError, "source/target size info missing", clonertest.T0)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Minute))
	if r := recs["early"]; r.Verdict != record.VerdictPending || len(r.BadReasons()) != 0 {
		t.Fatalf("got %s %v %q, want pending while the golden imports", r.Verdict, r.BadReasons(), r.Message)
	}
}

// TestNoGoldenDataVolumeStillGetsStuck: the golden's DataVolume is deleted
// while a clone hangs, its claim kept (CDI clones from the claim alone), or
// deleted too once CDI's tmp-pvc was bound to a cloned volume. Nothing
// imports any more: the disk is not "waiting for the golden's import", and
// it is stuck after --stuck-after like any hanging clone.
func TestNoGoldenDataVolumeStillGetsStuck(t *testing.T) {
	cfg := clonertest.TestConfig()
	for _, tc := range []struct {
		name      string
		keepClaim bool
	}{{"claim kept", true}, {"claim deleted after tmp-pvc bound", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var w clonertest.World
			g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
			dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
			dv.Status.Phase = cdiv1.CSICloneInProgress
			target := w.PendingTarget(dv)
			if !tc.keepClaim {
				w.TmpClaim(target, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 6*clonertest.Gi))
			}
			w.Without(g.Namespace, g.Name)
			if tc.keepClaim {
				w.Claim(g, clonertest.TestClass, 6*clonertest.Gi, 6*clonertest.Gi, "golden-vol-kept")
			}
			recs, _ := w.JudgeAll(t, cfg, clonertest.T0.Add(time.Minute))
			if r := recs["d"]; r.Verdict != record.VerdictPending || strings.Contains(r.Message, "import") {
				t.Fatalf("a minute in: %s %q, want pending, not waiting for an import", r.Verdict, r.Message)
			}
			recs, _ = w.JudgeAll(t, cfg, clonertest.T0.Add(cfg.StuckAfter))
			if r := recs["d"]; r.Verdict != record.VerdictStuck || !clonertest.ReasonsOf(r)[record.ReasonStuck] {
				t.Fatalf("after --stuck-after: %s %v %q, want stuck", r.Verdict, r.BadReasons(), r.Message)
			}
		})
	}
}

// TestStuckMessageCarriesWhyCDIHoldsTheClone: a pod uses the golden; CDI
// holds the clone and says so in the DataVolume's Bound condition (reason
// Pending, the claim's latest event appended). The stuck verdict says it.
func TestStuckMessageCarriesWhyCDIHoldsTheClone(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "held", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.CSICloneInProgress
	w.PendingTarget(dv)
	inUse := "pod cozy-public/golden-reader using PersistentVolumeClaim " + g.Name
	clonertest.Condition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, "Pending", "target PVC held Pending and "+inUse, clonertest.T0)
	clonertest.Condition(dv, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "Populator is running", "", clonertest.T0)
	plain := w.Worker("tenant-a", "plain", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	clonertest.Condition(plain, cdiv1.DataVolumeBound, corev1.ConditionFalse, "Pending", "PVC plain Pending", clonertest.T0)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	if r := recs["held"]; r.Verdict != record.VerdictStuck || !strings.Contains(r.Message, inUse) {
		t.Fatalf("held: %s %q, want stuck with %q", r.Verdict, r.Message, inUse)
	}
	if r := recs["plain"]; r.Verdict != record.VerdictStuck || strings.Contains(r.Message, "CDI:") {
		t.Fatalf("plain: %s %q, want stuck without CDI's plain Pending", r.Verdict, r.Message)
	}
}
