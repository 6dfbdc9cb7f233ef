package verdict_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// TestBareClaimIsJudgedFromTheTap: a claim no DataVolume made, cloning the
// golden's claim, is judged as the DataVolumes are, from what the driver
// was asked: a CSI clone of the golden's volume made whole at once (the
// external-provisioner asks for the full size: no resize follows), timed
// from its first CreateVolume to its volume, pooled by its namespace, its
// events on the claim itself, and predicted by the external-provisioner's
// rules (data-source), not CDI's, whatever CDI is set to.
func TestBareClaimIsJudgedFromTheTap(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	w.BareClaim("tenant-a", "copy", g, 20*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 20*clonertest.Gi, 20*clonertest.Gi))
	inv := fleet.BuildInventory(w.Objects(t), clonertest.TestConfig().GoldenNamespaces())
	pred := verdict.BuildPredictor(clonertest.CsiCloneForced(), inv)
	ev := verdict.EvaluateWith(inv, clonertest.TestConfig(), clonertest.T0.Add(time.Hour), pred)
	if len(ev.Assessments) != 1 {
		t.Fatalf("%d assessments, want the bare claim's", len(ev.Assessments))
	}
	a := ev.Assessments[0]
	r := a.Record
	if r.Verdict != record.VerdictCSIClone || r.Source != record.SourceCSITap || r.ContentSource != "volume:"+gpv.Spec.CSI.VolumeHandle {
		t.Fatalf("verdict %s from %s (%s), want csi-clone of the golden's volume from the tap: %s", r.Verdict, r.Source, r.ContentSource, r.Message)
	}
	if len(r.BadReasons()) != 0 || r.Pool != "tenant-a" || r.Golden != g.Namespace+"/"+g.Name || r.SchematicID != clonertest.TestSID {
		t.Errorf("record %+v", r)
	}
	if r.Predicted != predict.PathCSIClone || r.PredictedReason != predict.ReasonDataSource {
		t.Errorf("predicted %s/%s, want %s/%s: the external-provisioner's rules", r.Predicted, r.PredictedReason, predict.PathCSIClone, predict.ReasonDataSource)
	}
	if !a.Timed || a.Duration != time.Minute {
		t.Errorf("duration %v timed %v, want 1m from the first CreateVolume to the volume", a.Duration, a.Timed)
	}
	if target := publish.DiskTarget(a.Disk); target.Kind != "PersistentVolumeClaim" || target.APIVersion != "v1" || target.Name != "copy" {
		t.Errorf("events go to %+v, want the claim", target)
	}
}

// TestBareClaimIsStuckOrFailedInItsOwnWords: a bare claim the driver
// refuses stays Pending and is stuck after --stuck-after with the driver's
// error; one whose volume is lost is failed, in the claim's words, not CDI's.
func TestBareClaimIsStuckOrFailedInItsOwnWords(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	pending, _ := w.BareClaim("tenant-a", "refused", g, 20*clonertest.Gi, nil)
	pending.Annotations[fleet.AnnDriverError] = record.MustJSON(fleet.DriverError{Method: "CreateVolume", Code: "ResourceExhausted",
		Message: "no space left in pool", Claim: "tenant-a/refused", Attempts: 3})
	lost, _ := w.BareClaim("tenant-a", "lost", g, 20*clonertest.Gi, nil)
	lost.Status.Phase = corev1.ClaimLost
	cfg := clonertest.TestConfig()
	recs, _ := w.JudgeAll(t, cfg, clonertest.T0.Add(cfg.StuckAfter))
	if r := recs["refused"]; r.Verdict != record.VerdictStuck || !strings.Contains(r.Message, "ResourceExhausted: no space left in pool") {
		t.Errorf("refused: %s %q, want stuck with the driver's error", r.Verdict, r.Message)
	}
	if r := recs["lost"]; r.Verdict != record.VerdictFailed || strings.Contains(r.Message, "DataVolume") || !strings.Contains(r.Message, "Lost") {
		t.Errorf("lost: %s %q, want failed in the claim's words", r.Verdict, r.Message)
	}
}

// TestBareClaimMadeUnwatchedIsUnknownWithoutCDIsWords: a bare claim's
// volume made while no sidecar watched is unknown, and the message does not
// send the operator to a CDI annotation nobody writes on it.
func TestBareClaimMadeUnwatchedIsUnknownWithoutCDIsWords(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	_, pv := w.BareClaim("tenant-a", "unwatched", g, 20*clonertest.Gi, &fleet.VolumeEvidence{})
	delete(pv.Annotations, fleet.AnnCSIEvidence)
	recs, _ := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	if r := recs["unwatched"]; r.Verdict != record.VerdictUnknown || strings.Contains(r.Message, "cloneType") || !strings.Contains(r.Message, "bare claim") {
		t.Errorf("unwatched: %s %q, want unknown in a bare claim's words", r.Verdict, r.Message)
	}
}

// TestBareClaimTheProvisionerRefusesIsPredictedBlocked: a bare claim
// smaller than its golden is predicted blocked by the external-provisioner
// (provisioner-refuses); while it is pending the finding says so in the
// provisioner's name, and once it is stuck the prediction is checked right.
func TestBareClaimTheProvisionerRefusesIsPredictedBlocked(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	w.BareClaim("tenant-a", "small", g, clonertest.Gi, nil)
	cfg := clonertest.TestConfig()
	judge := func(now time.Time) *record.Record {
		inv := fleet.BuildInventory(w.Objects(t), cfg.GoldenNamespaces())
		return verdict.EvaluateWith(inv, cfg, now, verdict.BuildPredictor(clonertest.CsiCloneForced(), inv)).Assessments[0].Record
	}
	r := judge(clonertest.T0.Add(time.Minute))
	if r.Verdict != record.VerdictPending || r.Predicted != predict.PathBlocked || r.PredictedReason != predict.ReasonProvisionerRefuses {
		t.Fatalf("pending: %s, predicted %s/%s, want pending predicted %s/%s", r.Verdict, r.Predicted, r.PredictedReason, predict.PathBlocked, predict.ReasonProvisionerRefuses)
	}
	if msg := r.MessageFor(record.ReasonBadPathPredicted); !strings.Contains(msg, "the external-provisioner will take path blocked") {
		t.Errorf("bad-path-predicted: %q, want it in the external-provisioner's name", msg)
	}
	r = judge(clonertest.T0.Add(cfg.StuckAfter))
	if checked, right := verdict.CheckPrediction(r); r.Verdict != record.VerdictStuck || !checked || !right {
		t.Errorf("stuck: %s, prediction checked %v right %v", r.Verdict, checked, right)
	}
}
