package cloner

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
)

// A failed CreateVolume on CDI's tmp-pvc-<uid> belongs on the claim of that
// UID only: a claim recreated under the same name (another UID) does not
// take the old claim's driver error, even while the UID index still points
// at the name.
func TestTargetClaimIsTheClaimOfThatUID(t *testing.T) {
	var w clonertest.World
	w.Pvcs = append(w.Pvcs, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "d0", UID: "uid-new"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newFakeCluster(t, &w).controller(t, ctx, clonertest.ConfigAt(clonertest.T0.Add(time.Hour)))
	if pvc := c.targetClaim("cozy-public/tmp-pvc-uid-new"); pvc == nil || pvc.UID != "uid-new" {
		t.Fatalf("tmp-pvc of the claim's UID: %v, want the claim", pvc)
	}
	// The old claim's UID, as the index kept it for the name.
	c.claimUIDs.Set(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "d0", UID: "uid-old"}}, true)
	if pvc := c.targetClaim("cozy-public/tmp-pvc-uid-old"); pvc != nil {
		t.Fatalf("tmp-pvc of the deleted claim's UID: %s/%s (UID %s), want none", pvc.Namespace, pvc.Name, pvc.UID)
	}
	if pvc := c.targetClaim("tenant-a/d0"); pvc == nil || pvc.UID != "uid-new" {
		t.Fatalf("the claim by name: %v", pvc)
	}
}
