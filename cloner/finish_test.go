package cloner

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/evidence"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// TestFinishEvidenceWaitsForThePVs: at shutdown the evidence loop takes
// what is still queued and writes it onto the PVs, including a PV the
// provisioner creates only after the shutdown began; an observation whose
// PV never comes is reported when the time is up, not waited for forever.
func TestFinishEvidenceWaitsForThePVs(t *testing.T) {
	fc := newFakeCluster(t, &clonertest.World{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := clonertest.T0.Add(time.Minute)
	cfg := clonertest.TestConfig()
	cfg.Now = clonertest.NewClock(now).Now
	c := fc.controller(t, ctx, cfg)
	if err := c.FinishEvidence(ctx); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("FinishEvidence before the loop runs = %v; want it not running", err)
	}
	loop := make(chan error, 1)
	go func() { loop <- c.RunEvidence(ctx) }()
	eventually(t, "evidence loop running", c.evidence.Running)

	c.Observe(createVolume("pvc-late", "ns/late", "", clonertest.Gi, "vol-late", now))
	finished := make(chan error, 1)
	go func() {
		fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
		defer fcancel()
		finished <- c.FinishEvidence(fctx)
	}()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-late"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: clonertest.Qty(clonertest.Gi)},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{VolumeHandle: "vol-late"}}}}
	if _, err := fc.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-finished; err != nil {
		t.Fatalf("FinishEvidence = %v", err)
	}
	if err := <-loop; err != nil {
		t.Fatalf("RunEvidence = %v after finishing", err)
	}
	got, err := fc.kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-late", metav1.GetOptions{})
	var ev fleet.VolumeEvidence
	if ok, _ := fleet.DecodeAnnotation(got, fleet.AnnCSIEvidence, &ev); err != nil || !ok || ev.Name != "pvc-late" {
		t.Fatalf("PV after FinishEvidence: evidence %+v (%v); want the CreateVolume of pvc-late", ev, err)
	}

	// A second run: the PV never comes, FinishEvidence gives up at its
	// deadline and says what was left.
	go func() { loop <- c.RunEvidence(ctx) }()
	eventually(t, "evidence loop running again", c.evidence.Running)
	c.Observe(createVolume("pvc-never", "ns/never", "", clonertest.Gi, "vol-never", now.Add(-time.Second)))
	fctx, fcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer fcancel()
	if err := c.FinishEvidence(fctx); err == nil || !strings.Contains(err.Error(), "evidence of 1 volumes not written") {
		t.Fatalf("FinishEvidence with a PV that never comes = %v; want the volume reported", err)
	}
}

// TestFinishEvidenceDoesNotWaitForStaleEvidence: evidence that has waited
// for its PV longer than FinishFresh will not get it from this replica's
// provisioner now; it does not hold the shutdown up.
func TestFinishEvidenceDoesNotWaitForStaleEvidence(t *testing.T) {
	fc := newFakeCluster(t, &clonertest.World{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := clonertest.T0.Add(time.Hour)
	cfg := clonertest.TestConfig()
	cfg.Now = clonertest.NewClock(now).Now
	c := fc.controller(t, ctx, cfg)
	go func() { _ = c.RunEvidence(ctx) }()
	eventually(t, "evidence loop running", c.evidence.Running)
	// Observed (End = at + 1s) just over FinishFresh ago.
	c.Observe(createVolume("pvc-stale", "ns/stale", "", clonertest.Gi, "vol-stale", now.Add(-evidence.FinishFresh-2*time.Second)))
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	defer fcancel()
	if err := c.FinishEvidence(fctx); err != nil {
		t.Fatalf("FinishEvidence with only stale evidence waiting = %v; want nil at once", err)
	}
	if n := c.evidence.VolumesWaiting(); n != 1 {
		t.Fatalf("volumes waiting for a PV after the finish: %d, want the stale one kept (1)", n)
	}
}
