package verdict_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// cdiCloneError takes the populator's cloneError, else the message of the
// DataVolume's Running condition that mirrors it.
func TestCDICloneErrorFallsBackToTheRunningCondition(t *testing.T) {
	d := &fleet.WorkerDisk{Conditions: []fleet.CDICondition{{Type: string(cdiv1.DataVolumeRunning), Status: "False",
		Reason: fleet.CdiReasonError, Message: "from the condition"}}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{fleet.AnnCDIClonePhase: fleet.CdiClonePhaseError}}}
	if msg, _, ok := fleet.CdiCloneError(d, pvc); !ok || msg != "from the condition" {
		t.Errorf("no cloneError annotation: %q, %v; want the condition's message", msg, ok)
	}
	pvc.Annotations[fleet.AnnCDICloneError] = "from the claim"
	if msg, _, ok := fleet.CdiCloneError(d, pvc); !ok || msg != "from the claim" {
		t.Errorf("with a cloneError annotation: %q, %v; want the annotation", msg, ok)
	}
}

// cdiExplanation: the first condition, Running before Bound before Ready,
// that is not True, carries a message and is not one every clone passes.
func TestCDIExplanationPicksTheTellingCondition(t *testing.T) {
	cond := func(typ cdiv1.DataVolumeConditionType, status, reason, msg string) fleet.CDICondition {
		return fleet.CDICondition{Type: string(typ), Status: status, Reason: reason, Message: msg}
	}
	for _, tc := range []struct {
		name  string
		conds []fleet.CDICondition
		want  string
	}{
		{"nothing", nil, ""},
		{"a true condition says nothing", []fleet.CDICondition{cond(cdiv1.DataVolumeRunning, "True", "X", "running")}, ""},
		{"no message", []fleet.CDICondition{cond(cdiv1.DataVolumeRunning, "False", "X", "")}, ""},
		{"a boring reason", []fleet.CDICondition{cond(cdiv1.DataVolumeRunning, "False", "Pending", "waiting")}, ""},
		{"the telling one", []fleet.CDICondition{cond(cdiv1.DataVolumeBound, "False", "Quota", "exceeded")}, "Quota: exceeded"},
		{"Running before Bound", []fleet.CDICondition{cond(cdiv1.DataVolumeBound, "False", "B", "bound"),
			cond(cdiv1.DataVolumeRunning, "False", "R", "running")}, "R: running"},
		{"skips the true one for the next", []fleet.CDICondition{cond(cdiv1.DataVolumeRunning, "True", "R", "running"),
			cond(cdiv1.DataVolumeReady, "False", "N", "not ready")}, "N: not ready"},
	} {
		if got := fleet.CdiExplanation(&fleet.WorkerDisk{Conditions: tc.conds}); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A clone in progress asks to be judged again when --stuck-after runs out,
// with no object changing.
func TestCloneInProgressIsRecheckedWhenItWouldTurnStuck(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.CSICloneInProgress
	w.Claim(dv, clonertest.TestClass, 20*clonertest.Gi, 0, "")
	cfg := clonertest.TestConfig()
	recs, ev := w.JudgeAll(t, cfg, clonertest.T0.Add(cfg.StuckAfter/2))
	if r := recs["d"]; r.Verdict != record.VerdictPending {
		t.Fatalf("half way to --stuck-after: %s", r.Verdict)
	}
	if want := clonertest.T0.Add(cfg.StuckAfter); !ev.RecheckAt.Equal(want) {
		t.Fatalf("recheck at %s, want %s (when it would turn stuck)", ev.RecheckAt, want)
	}
}
