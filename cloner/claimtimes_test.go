package cloner

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
)

// TestPlanningEndsWhenCDIMadeTheTmpPVCThoughNoPassSawIt: CDI makes a
// clone's tmp-pvc and deletes it within the second between two passes (a
// fast clone, or a WaitForFirstConsumer disk once its pod is scheduled).
// The informer saw it made: the disk's timeline still dates its claim, so
// the wait before it counts as planning.
func TestPlanningEndsWhenCDIMadeTheTmpPVCThoughNoPassSawIt(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "quick", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.CSICloneInProgress
	target := w.PendingTarget(dv)
	tmp, _ := w.TmpClaim(target, nil)
	made := clonertest.T0.Add(40 * time.Second)
	tmp.CreationTimestamp = metav1.NewTime(made)
	fc := newFakeCluster(t, &w)
	ctx := t.Context()
	c := fc.controller(t, ctx, clonertest.ConfigAt(clonertest.T0.Add(time.Minute)))
	if err := fc.kube.CoreV1().PersistentVolumeClaims(tmp.Namespace).Delete(ctx, tmp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tmp-pvc's deletion seen", func() bool {
		_, ok, _ := c.pvcInf.GetStore().GetByKey(tmp.Namespace + "/" + tmp.Name)
		return !ok
	})
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	r := fc.record(t, "tenant-a", "quick")
	if !r.Timeline.Claimed.Equal(made) {
		t.Fatalf("timeline %+v: claimed %v, want the tmp-pvc's creation %v", r.Timeline, r.Timeline.Claimed, made)
	}
}
