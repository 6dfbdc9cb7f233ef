package cloner

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// event is one Event on an object, as its reporter writes it.
func event(ns, name string, uid types.UID, typ, reason, component, msg string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name + "." + reason + "." + at.Format("150405")},
		InvolvedObject: corev1.ObjectReference{Namespace: ns, Name: name, UID: uid},
		Type:           typ, Reason: reason, Message: msg, Source: corev1.EventSource{Component: component},
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
	}
}

// TestStuckVerdictQuotesCDIsWarningEvents: a clone CDI holds because a pod
// uses the golden, and whose tmp-pvc the provisioner fails. The stuck
// verdict quotes the Warning events on the DataVolume, its claim and its
// tmp-pvc, once each (CDI's copy of a tmp-pvc event is the same event),
// newest first, not Normal events nor the sidecar's own. The events are
// read once, when the disk turns stuck: not for a disk still in time, not
// again on the next pass.
func TestStuckVerdictQuotesCDIsWarningEvents(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "held", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.CSICloneInProgress
	target := w.PendingTarget(dv)
	tmp, _ := w.TmpClaim(target, nil)
	tmp.Spec.VolumeName, tmp.Status.Phase = "", corev1.ClaimPending
	young := w.Worker("tenant-a", "young", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	young.CreationTimestamp = metav1.NewTime(clonertest.T0.Add(55 * time.Minute))
	fc := newFakeCluster(t, &w)
	ctx := t.Context()
	inUse := "pod cozy-public/reader using PersistentVolumeClaim " + g.Name
	full := "pool replicated has 0 bytes free"
	for _, e := range []*corev1.Event{
		event("tenant-a", "held", target.UID, corev1.EventTypeWarning, "CloneSourceInUse", "clone-populator", inUse, clonertest.T0.Add(3*time.Minute)),
		event("tenant-a", "held", target.UID, corev1.EventTypeWarning, "ProvisioningFailed", "clone-populator",
			"["+tmp.Name+"] : "+full, clonertest.T0.Add(2*time.Minute)),
		event(tmp.Namespace, tmp.Name, tmp.UID, corev1.EventTypeWarning, "ProvisioningFailed", "csi-provisioner", full, clonertest.T0.Add(time.Minute)),
		event("tenant-a", "held", target.UID, corev1.EventTypeNormal, "Provisioning", "csi-provisioner", "just so", clonertest.T0.Add(4*time.Minute)),
		event("tenant-a", "held", dv.UID, corev1.EventTypeWarning, "ErrClaimNotValid", "datavolume-pvc-clone-controller", "claim says no", clonertest.T0),
		event("tenant-a", "held", dv.UID, corev1.EventTypeWarning, "CloneStuck", fleet.EventSourceComponent, "ours", clonertest.T0.Add(5*time.Minute)),
	} {
		if _, err := fc.kube.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := fc.controller(t, ctx, clonertest.ConfigAt(clonertest.T0.Add(time.Hour)))
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	r := fc.record(t, "tenant-a", "held")
	want := "; CDI's Warning events: CloneSourceInUse: " + inUse + "; ProvisioningFailed: " + full + "; ErrClaimNotValid: claim says no"
	if r.Verdict != record.VerdictStuck || !strings.HasSuffix(r.Message, want) {
		t.Fatalf("held: %s %q, want stuck ending %q", r.Verdict, r.Message, want)
	}
	lists := func() int {
		n := 0
		for _, a := range fc.kube.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "events" {
				n++
			}
		}
		return n
	}
	if n := lists(); n != 3 {
		t.Fatalf("%d event lists, want 3 (the stuck disk's DataVolume, claim and tmp-pvc; none for the young disk)", n)
	}
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lists(); n != 3 {
		t.Fatalf("%d event lists after a second pass, want still 3", n)
	}
	if w := countReason(fc.warnings(t), "held", "CloneStuck"); w != 2 {
		t.Fatalf("%d CloneStuck events (ours included), want 2", w)
	}
}
