package cloner

import (
	"strings"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Each test proves one rule of judgeBlocked (blocked.go) or of the clone
// path (path.go). Objects are shaped as CDI v1.65 leaves them.

// condition sets a DataVolume condition as CDI's updateCondition does.
func condition(dv *cdiv1.DataVolume, typ cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, reason, msg string, at time.Time) {
	c := cdiv1.DataVolumeCondition{Type: typ, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(at), LastHeartbeatTime: metav1.NewTime(at)}
	for i := range dv.Status.Conditions {
		if dv.Status.Conditions[i].Type == typ {
			dv.Status.Conditions[i] = c
			return
		}
	}
	dv.Status.Conditions = append(dv.Status.Conditions, c)
}

// pendingTarget is the disk's claim as CDI's populator path makes it:
// Pending, no volume, clone type chosen.
func (w *world) pendingTarget(dv *cdiv1.DataVolume) *corev1.PersistentVolumeClaim {
	pvc, _ := w.claim(dv, testClass, fleet.RequestedBytes(dv), 0, "")
	pvc.Annotations[fleet.AnnCDICloneType] = "csi-clone"
	return pvc
}

// tmpClaim is CDI's tmp-pvc-<target uid> in the golden's namespace, bound to
// a volume cloned from the golden, carrying the tap's evidence.
func (w *world) tmpClaim(target *corev1.PersistentVolumeClaim, ev *fleet.VolumeEvidence) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	tmp := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: config.DefaultGoldenNamespace, Name: fleet.CdiTmpPVCPrefix + string(target.UID)}}
	pvc, pv := w.claim(tmp, testClass, fleet.ClaimRequest(target), 6*gi, "vol-tmp-"+string(target.UID))
	if ev != nil {
		pv.Annotations[fleet.AnnCSIEvidence] = record.MustJSON(ev)
	}
	return pvc, pv
}

func TestCDIRefusingTheCloneIsFailedAtOnceWithCDIsWords(t *testing.T) {
	var w world
	g, _ := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "small", "p", g, 4*gi, publish.PtrTo(testClass))
	dv.Spec.Storage.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	dv.Status.Phase = ""
	msg := "The clone doesn't meet the validation requirements: target resources requests storage size is smaller than the source 4294967296 < 6442450944"
	condition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, fleet.CdiReasonValidationFailed, msg, t0)
	condition(dv, cdiv1.DataVolumeReady, corev1.ConditionFalse, fleet.CdiReasonValidationFailed, msg, t0)
	r := w.judgeWithCDI(t, t0.Add(time.Second))["small"] // long before --stuck-after
	if r.Verdict != record.VerdictFailed || !strings.Contains(r.Message, "CloneValidationFailed") || !strings.Contains(r.Message, msg) {
		t.Fatalf("got %s %q, want failed with CDI's reason and message", r.Verdict, r.Message)
	}
	if got := reasonsOf(r); !got[record.ReasonFailed] || !got[record.ReasonTooSmall] || got[record.ReasonStuck] {
		t.Fatalf("reasons %v, want failed and too-small", r.BadReasons())
	}
}

func TestCDICloneErrorIsFailedOnceItLasts(t *testing.T) {
	var w world
	g, _ := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "quota", "p", g, 20*gi, publish.PtrTo(testClass))
	pvc := w.pendingTarget(dv)
	quota := `persistentvolumeclaims "tmp-pvc-x" is forbidden: exceeded quota: golden-quota, requested: persistentvolumeclaims=1, used: persistentvolumeclaims=1, limited: persistentvolumeclaims=1`
	pvc.Annotations[fleet.AnnCDIClonePhase], pvc.Annotations[fleet.AnnCDICloneError] = "Error", quota
	condition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, fleet.CdiReasonError, quota, t0.Add(time.Minute))
	cfg := testConfig()

	// Within the grace (an update conflict clears in a moment): not yet,
	// and the pass says when to look again.
	recs, ev := w.judgeAll(t, cfg, t0.Add(time.Minute+time.Second))
	if r := recs["quota"]; r.Verdict != record.VerdictPending {
		t.Fatalf("inside the grace: %s %q", r.Verdict, r.Message)
	}
	if want := t0.Add(time.Minute).Add(cfg.EvidenceGrace); !ev.RecheckAt.Equal(want) {
		t.Fatalf("recheck at %v, want %v", ev.RecheckAt, want)
	}
	recs, _ = w.judgeAll(t, cfg, t0.Add(time.Minute).Add(cfg.EvidenceGrace))
	r := recs["quota"]
	if r.Verdict != record.VerdictFailed || !strings.Contains(r.Message, quota) {
		t.Fatalf("after the grace: %s %q, want failed with CDI's cloneError", r.Verdict, r.Message)
	}
	if cfg.StuckAfter <= cfg.EvidenceGrace {
		t.Fatal("the test proves nothing if --stuck-after is not longer than the grace")
	}
}

func TestCloneErrorTheDataVolumeDoesNotShowIsNotFailed(t *testing.T) {
	var w world
	g, _ := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "d", "p", g, 20*gi, publish.PtrTo(testClass))
	pvc := w.pendingTarget(dv)
	pvc.Annotations[fleet.AnnCDIClonePhase], pvc.Annotations[fleet.AnnCDICloneError] = "Error", "Operation cannot be fulfilled: the object has been modified"
	condition(dv, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "Populator is running", "", t0)
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(time.Hour))
	if r := recs["d"]; r.Verdict == record.VerdictFailed {
		t.Fatalf("a clone error the DataVolume never showed made it failed: %q", r.Message)
	}
}

func TestGoldenGoneBeforeTheCloneIsStuckAtOnce(t *testing.T) {
	var w world
	g, _ := w.golden(testSID, testVer)
	// Drop the golden's DataVolume and claim, keep its name in the disk.
	w.dvs, w.pvcs = nil, nil
	dv := w.worker("tenant-a", "mid", "p", g, 20*gi, publish.PtrTo(testClass))
	w.pendingTarget(dv)
	waiting := w.worker("tenant-a", "no-claim", "p", g, 20*gi, publish.PtrTo(testClass))
	condition(waiting, cdiv1.DataVolumeBound, corev1.ConditionFalse, fleet.CdiReasonWithoutSource,
		"The source pvc "+g.Name+" doesn't exist", t0)
	notLooked := w.worker("tenant-a", "not-looked", "p", g, 20*gi, publish.PtrTo(testClass))
	_ = notLooked
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(time.Second))
	for _, n := range []string{"mid", "no-claim"} {
		r := recs[n]
		if r.Verdict != record.VerdictStuck || !reasonsOf(r)[record.ReasonUnknownGolden] || !strings.Contains(r.Message, g.Name) {
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
	var w world
	g, gpv := w.golden(testSID, testVer)
	w.dvs = nil // the DataVolume is deleted; keep the claim for the first case
	dv := w.worker("tenant-a", "claim-left", "p", g, 20*gi, publish.PtrTo(testClass))
	w.pendingTarget(dv)
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(time.Second))
	if r := recs["claim-left"]; r.Verdict == record.VerdictStuck {
		t.Fatalf("the golden's claim still exists (kept by a clone's finalizer): %q", r.Message)
	}
	w.pvcs = nil
	made := w.worker("tenant-a", "made", "p", g, 20*gi, publish.PtrTo(testClass))
	target := w.pendingTarget(made)
	w.tmpClaim(target, tapClone(gpv.Spec.CSI.VolumeHandle, 6*gi, 6*gi))
	recs, _ = w.judgeAll(t, testConfig(), t0.Add(time.Second))
	if r := recs["made"]; r.Verdict != record.VerdictPending {
		t.Fatalf("the volume was already cloned; the golden is not needed any more: %s %q", r.Verdict, r.Message)
	}
}

func TestFailedExpansionOnTheTmpClaimIsResizeFailedWhileUnbound(t *testing.T) {
	var w world
	g, gpv := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "grow", "p", g, 20*gi, publish.PtrTo(testClass))
	dv.Status.Phase = cdiv1.PrepClaimInProgress
	target := w.pendingTarget(dv)
	ev := tapClone(gpv.Spec.CSI.VolumeHandle, 6*gi, 6*gi)
	ev.Expansions = []fleet.Expansion{
		{At: t0.Add(3 * time.Second), RequiredBytes: 20 * gi, Code: "OutOfRange", Message: "pool replicated has 2147483648 bytes free, 15032385536 more requested"},
		{At: t0.Add(5 * time.Second), RequiredBytes: 20 * gi, Code: "OutOfRange", Message: "pool replicated has 2147483648 bytes free, 15032385536 more requested"},
	}
	tmp, tmpPV := w.tmpClaim(target, ev)
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(10*time.Second))
	r := recs["grow"]
	if r.Verdict != record.VerdictStuck || !reasonsOf(r)[record.ReasonResizeFailed] {
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
	ev.Expansions = append(ev.Expansions, fleet.Expansion{At: t0.Add(time.Minute), RequiredBytes: 20 * gi, CapacityBytes: 20 * gi, Code: "OK"})
	tmpPV.Annotations[fleet.AnnCSIEvidence] = record.MustJSON(ev)
	recs, _ = w.judgeAll(t, testConfig(), t0.Add(2*time.Minute))
	if r := recs["grow"]; r.Verdict != record.VerdictPending || len(r.BadReasons()) != 0 || r.DriverError != "" {
		t.Fatalf("after a successful retry: %s %v %q", r.Verdict, r.BadReasons(), r.DriverError)
	}
}

func TestRetryableDriverErrorsWaitForStuckAfter(t *testing.T) {
	var w world
	g, gpv := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "slow", "p", g, 20*gi, publish.PtrTo(testClass))
	target := w.pendingTarget(dv)
	ev := tapClone(gpv.Spec.CSI.VolumeHandle, 6*gi, 6*gi)
	ev.Expansions = []fleet.Expansion{{At: t0, RequiredBytes: 20 * gi, Code: "Unavailable", Message: "try later"}}
	w.tmpClaim(target, ev)
	dv2 := w.worker("tenant-a", "hang", "p", g, 20*gi, publish.PtrTo("local"))
	t2 := w.pendingTarget(dv2)
	t2.Annotations[fleet.AnnDriverError] = record.MustJSON(fleet.DriverError{Method: "CreateVolume", Code: "DeadlineExceeded",
		Message: "context deadline exceeded", Claim: "cozy-public/tmp-pvc-" + string(t2.UID), First: t0, Last: t0})
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(time.Minute))
	for _, n := range []string{"slow", "hang"} {
		if r := recs[n]; r.Verdict != record.VerdictPending || r.DriverError == "" {
			t.Fatalf("%s: %s %q (driver error %q), want pending with the error recorded", n, r.Verdict, r.Message, r.DriverError)
		}
	}
	if got := recs["slow"].BadReasons(); len(got) != 0 {
		t.Fatalf("an expansion the resizer retries is no finding before --stuck-after: %v", got)
	}
	recs, _ = w.judgeAll(t, testConfig(), t0.Add(config.DefaultStuckAfter))
	if r := recs["hang"]; r.Verdict != record.VerdictStuck || !strings.Contains(r.Message, r.DriverError) {
		t.Fatalf("hang after --stuck-after: %s %q", r.Verdict, r.Message)
	}
	if r := recs["slow"]; r.Verdict != record.VerdictStuck || !reasonsOf(r)[record.ReasonResizeFailed] {
		t.Fatalf("slow after --stuck-after: %s %v, want stuck and resize-failed", r.Verdict, r.BadReasons())
	}
}

func TestDefiniteCreateVolumeErrorIsStuckAtOnceUntilARetrySucceeds(t *testing.T) {
	var w world
	g, gpv := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "local", "p", g, 20*gi, publish.PtrTo("local"))
	target := w.pendingTarget(dv)
	de := fleet.DriverError{Method: "CreateVolume", Code: "InvalidArgument", Message: "cannot clone volume g into node-local pool local",
		Claim: "cozy-public/tmp-pvc-" + string(target.UID), First: t0, Last: t0.Add(time.Second)}
	target.Annotations[fleet.AnnDriverError] = record.MustJSON(de)
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(time.Minute))
	r := recs["local"]
	if r.Verdict != record.VerdictStuck || r.DriverError != "CreateVolume InvalidArgument: "+de.Message || !strings.Contains(r.Message, r.DriverError) {
		t.Fatalf("got %s %q %q", r.Verdict, r.Message, r.DriverError)
	}
	// The provisioner retried and the driver created it: the old error on
	// the claim says nothing any more.
	w.tmpClaim(target, tapClone(gpv.Spec.CSI.VolumeHandle, 6*gi, 6*gi))
	recs, _ = w.judgeAll(t, testConfig(), t0.Add(time.Minute))
	if r := recs["local"]; r.Verdict != record.VerdictPending || r.DriverError != "" {
		t.Fatalf("after the successful retry: %s %q", r.Verdict, r.DriverError)
	}
}

func TestStuckMessageCarriesCDIsExplanation(t *testing.T) {
	var w world
	g, _ := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "d", "p", g, 20*gi, publish.PtrTo(testClass))
	condition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, "ErrExceededQuota", "exceeded quota: tenant-quota", t0)
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(time.Hour))
	// The sidecar's own text, with CDI's word appended.
	if r := recs["d"]; r.Verdict != record.VerdictStuck || !strings.HasPrefix(r.Message, "clone requested at ") ||
		!strings.HasSuffix(r.Message, "; CDI: ErrExceededQuota: exceeded quota: tenant-quota") {
		t.Fatalf("got %s %q", r.Verdict, r.Message)
	}
}

func TestUntrustedGoldenIsNotAFlavorAnywhere(t *testing.T) {
	var w world
	g, _ := w.golden("ABC", "1.2")
	w.worker("tenant-a", "d", "p", g, 20*gi, publish.PtrTo(testClass))
	recs, ev := w.judgeAll(t, testConfig(), t0.Add(time.Hour))
	r := recs["d"]
	if r.SchematicID != "" || r.Version != "" || !reasonsOf(r)[record.ReasonInvalidGolden] || r.Golden != config.DefaultGoldenNamespace+"/"+g.Name {
		t.Fatalf("record %+v: the disk must name the golden but carry no flavor", r)
	}
	c := &Controller{cfg: testConfig(), judged: map[string]ledger.JudgedDisk{}, tally: ledger.NewFleetTally(), rechecks: map[string]time.Time{}}
	c.remember(nil, ev)
	if s := c.buildSnapshot(ev.Inv, ledger.NewLedger()); len(s.Goldens) != 0 || len(s.Disks) != 1 || !s.Disks[0].Flavor.IsZero() {
		t.Fatalf("snapshot goldens %+v disks %+v: an untrusted golden is not a flavor", s.Goldens, s.Disks)
	}
	if fl := report.ReportFlavors(ev.Inv, ledger.NewLedger()); len(fl) != 0 {
		t.Fatalf("report flavor rows %+v", fl)
	}
	u := report.ReportUntrusted(ev.Inv)
	if len(u) != 1 || u[0].Name != g.Name || strings.Join(u[0].Consumers, ",") != "tenant-a/d" || len(u[0].Problems) != 2 {
		t.Fatalf("untrusted %+v, want the golden with its consumer named", u)
	}
}

func TestPVCSpecGetsOnlyTheKubernetesDefault(t *testing.T) {
	var w world
	w.class("virt", map[string]string{fleet.AnnDefaultVirtClass: "true"}, t0)
	w.class("k8s", map[string]string{fleet.AnnDefaultClass: "true"}, t0)
	g, _ := w.golden(testSID, testVer)
	pvcSpec := w.worker("tenant-a", "pvc-spec", "p", g, 20*gi, nil)
	pvcSpec.Spec.PVC = &corev1.PersistentVolumeClaimSpec{Resources: pvcSpec.Spec.Storage.Resources}
	pvcSpec.Spec.Storage = nil
	w.worker("tenant-a", "storage-spec", "p", g, 20*gi, nil)
	archive := w.worker("tenant-a", "archive", "p", g, 20*gi, nil)
	archive.Spec.ContentType = cdiv1.DataVolumeArchive
	odd := w.worker("tenant-a", "odd", "p", g, 20*gi, nil)
	odd.Spec.ContentType = "something-else" // CDI reads it as kubevirt
	// No claim exists yet for any of them: the rule of the spec decides.
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(time.Second))
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

// TestDriverErrorIsRemovedWhenARetrySucceeds: a replica wrote the driver's
// error on the disk's claim; the provisioner's retry then succeeds (seen by
// another replica, which never saw the error): the error leaves the claim.
func TestDriverErrorIsRemovedWhenARetrySucceeds(t *testing.T) {
	var w world
	w.class(testClass, nil, t0)
	g, gpv := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "retry", "p", g, 20*gi, publish.PtrTo(testClass))
	target := w.pendingTarget(dv)
	claim := "cozy-public/tmp-pvc-" + string(target.UID)
	target.Annotations[fleet.AnnDriverError] = record.MustJSON(fleet.DriverError{Method: "CreateVolume", Code: "ResourceExhausted",
		Message: "pool full", Claim: claim, First: t0, Last: t0})
	fc := newFakeCluster(t, &w)
	ctx := t.Context()
	c := fc.controller(t, ctx, configAt(t0.Add(time.Minute)))
	go func() { _ = c.RunEvidence(ctx) }()
	c.Observe(createVolume("pvc-tmp", claim, gpv.Spec.CSI.VolumeHandle, 6*gi, "vol-r", t0.Add(30*time.Second)))
	eventually(t, "the void driver error removed from the claim", func() bool {
		_, has := fc.pvc(t, "tenant-a", "retry").Annotations[fleet.AnnDriverError]
		return !has
	})
}

// TestCloneErrorWhileTheGoldenImportsIsWaiting: CDI's populator writes
// clonePhase Error ("source/target size info missing") while the golden has
// no capacity yet; that is CDI waiting for the import, not failing.
func TestCloneErrorWhileTheGoldenImportsIsWaiting(t *testing.T) {
	var w world
	g, _ := w.golden(testSID, testVer)
	g.Status.Phase = cdiv1.ImportInProgress
	dv := w.worker("tenant-a", "early", "p", g, 20*gi, publish.PtrTo(testClass))
	pvc := w.pendingTarget(dv)
	pvc.Annotations[fleet.AnnCDIClonePhase], pvc.Annotations[fleet.AnnCDICloneError] = "Error", "source/target size info missing"
	condition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, fleet.CdiReasonError, "source/target size info missing", t0)
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(time.Minute))
	if r := recs["early"]; r.Verdict != record.VerdictPending || len(r.BadReasons()) != 0 {
		t.Fatalf("got %s %v %q, want pending while the golden imports", r.Verdict, r.BadReasons(), r.Message)
	}
}

// TestReportJudgesADiskWithNoClaim: a disk CDI refused has no claim to carry
// the verdict; the report shows the verdict the leader gives it.
func TestReportJudgesADiskWithNoClaim(t *testing.T) {
	var w world
	g, _ := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "small", "p", g, 4*gi, publish.PtrTo(testClass))
	dv.Spec.Storage.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	condition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, fleet.CdiReasonValidationFailed, "The clone doesn't meet the validation requirements", t0)
	inv := fleet.BuildInventory(w.objects(t), config.DefaultGoldenNamespace)
	_, bad := report.ReportDisks(inv, report.JudgeClaimless(inv, configAt(t0.Add(time.Minute)), verdict.BuildPredictor(cdiAtDefaults(), inv)))
	if len(bad) != 1 || bad[0].Verdict != record.VerdictFailed || len(bad[0].Reasons) != 2 ||
		!strings.Contains(bad[0].Reasons[0].Message, "CloneValidationFailed") {
		t.Fatalf("bad disks %+v", bad)
	}
}

// without drops the objects named ns/name (DataVolumes and claims) from the
// world, as a deletion does.
func (w *world) without(ns, name string) {
	dvs := w.dvs[:0]
	for _, dv := range w.dvs {
		if dv.Namespace != ns || dv.Name != name {
			dvs = append(dvs, dv)
		}
	}
	w.dvs = dvs
	pvcs := w.pvcs[:0]
	for _, pvc := range w.pvcs {
		if pvc.Namespace != ns || pvc.Name != name {
			pvcs = append(pvcs, pvc)
		}
	}
	w.pvcs = pvcs
}

// TestNoGoldenDataVolumeStillGetsStuck: the golden's DataVolume is deleted
// while a clone hangs, its claim kept (CDI clones from the claim alone), or
// deleted too once CDI's tmp-pvc was bound to a cloned volume. Nothing
// imports any more: the disk is not "waiting for the golden's import", and
// it is stuck after --stuck-after like any hanging clone.
func TestNoGoldenDataVolumeStillGetsStuck(t *testing.T) {
	cfg := testConfig()
	for _, tc := range []struct {
		name      string
		keepClaim bool
	}{{"claim kept", true}, {"claim deleted after tmp-pvc bound", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var w world
			g, gpv := w.golden(testSID, testVer)
			dv := w.worker("tenant-a", "d", "p", g, 20*gi, publish.PtrTo(testClass))
			dv.Status.Phase = cdiv1.CSICloneInProgress
			target := w.pendingTarget(dv)
			if !tc.keepClaim {
				w.tmpClaim(target, tapClone(gpv.Spec.CSI.VolumeHandle, 6*gi, 6*gi))
			}
			w.without(g.Namespace, g.Name)
			if tc.keepClaim {
				w.claim(g, testClass, 6*gi, 6*gi, "golden-vol-kept")
			}
			recs, _ := w.judgeAll(t, cfg, t0.Add(time.Minute))
			if r := recs["d"]; r.Verdict != record.VerdictPending || strings.Contains(r.Message, "import") {
				t.Fatalf("a minute in: %s %q, want pending, not waiting for an import", r.Verdict, r.Message)
			}
			recs, _ = w.judgeAll(t, cfg, t0.Add(cfg.StuckAfter))
			if r := recs["d"]; r.Verdict != record.VerdictStuck || !reasonsOf(r)[record.ReasonStuck] {
				t.Fatalf("after --stuck-after: %s %v %q, want stuck", r.Verdict, r.BadReasons(), r.Message)
			}
		})
	}
}

// TestStuckMessageCarriesWhyCDIHoldsTheClone: a pod uses the golden; CDI
// holds the clone and says so in the DataVolume's Bound condition (reason
// Pending, the claim's latest event appended). The stuck verdict says it.
func TestStuckMessageCarriesWhyCDIHoldsTheClone(t *testing.T) {
	var w world
	g, _ := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "held", "p", g, 20*gi, publish.PtrTo(testClass))
	dv.Status.Phase = cdiv1.CSICloneInProgress
	w.pendingTarget(dv)
	inUse := "pod cozy-public/golden-reader using PersistentVolumeClaim " + g.Name
	condition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, "Pending", "target PVC held Pending and "+inUse, t0)
	condition(dv, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "Populator is running", "", t0)
	plain := w.worker("tenant-a", "plain", "p", g, 20*gi, publish.PtrTo(testClass))
	condition(plain, cdiv1.DataVolumeBound, corev1.ConditionFalse, "Pending", "PVC plain Pending", t0)
	recs, _ := w.judgeAll(t, testConfig(), t0.Add(time.Hour))
	if r := recs["held"]; r.Verdict != record.VerdictStuck || !strings.Contains(r.Message, inUse) {
		t.Fatalf("held: %s %q, want stuck with %q", r.Verdict, r.Message, inUse)
	}
	if r := recs["plain"]; r.Verdict != record.VerdictStuck || strings.Contains(r.Message, "CDI:") {
		t.Fatalf("plain: %s %q, want stuck without CDI's plain Pending", r.Verdict, r.Message)
	}
}
