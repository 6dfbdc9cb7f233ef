package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

const (
	shutdownNamespace = "tenant-shutdown"
	shutdownClaims    = 10
)

// TestSIGTERMPersistsTheEvidenceItDrained stops csi-clone-sidecar with
// SIGTERM in the middle of a burst of CreateVolumes, at the worst moment
// for its evidence: the relay has forwarded an answer (the provisioner
// makes the PV from it) but the sidecar has not yet seen that PV. The
// sidecar is frozen right after the tap decoded the answer, the provisioner
// makes the PV meanwhile, then SIGTERM wakes it. Every CreateVolume the tap
// decoded as a success and whose PV exists must have its evidence on that
// PV once the sidecar has exited: the relay's queued observations are
// consumed and persisted before the cloner stops.
func TestSIGTERMPersistsTheEvidenceItDrained(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{NoCDI: true,
		// Answers spread over a second keep the burst in flight at the signal.
		DriverArgs: []string{"--delay=CreateVolume=1s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.CreateNamespace(ctx, shutdownNamespace); err != nil {
		t.Fatal(err)
	}
	tail := newObsTail(t, c.ObservationsLog)
	createClaimsTogether(t, ctx, c, shutdownClaims)

	var trigger string
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		obs, err := tail.next()
		if o, ok := findCall(obs, sidecar.MethodCreateVolume, func(sidecar.Observation) bool { return true }); ok {
			trigger = o.Response.VolumeID
			return true, c.FreezeSidecar()
		}
		return false, err
	}); err != nil {
		t.Fatalf("no CreateVolume answered to stop the sidecar after: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, ok, err := pvByHandle(ctx, c, trigger)
		return ok, err
	}); err != nil {
		t.Fatalf("the provisioner made no PV for %s: %v", trigger, err)
	}
	if err := c.TerminateSidecar(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	obs, err := c.Observations()
	if err != nil {
		t.Fatal(err)
	}
	var checked int
	for _, o := range obs {
		if o.Method != sidecar.MethodCreateVolume || o.Code != 0 || o.Response.VolumeID == "" {
			continue
		}
		pv, ok, err := pvByHandle(ctx, c, o.Response.VolumeID)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Logf("%s: decoded, but the provisioner exited before making its PV", o.Request.Name)
			continue
		}
		checked++
		var ev fleet.VolumeEvidence
		raw, found := pv.Annotations[fleet.AnnCSIEvidence]
		if !found {
			t.Errorf("PV %s: the CreateVolume the tap decoded (%s) left no evidence on it", pv.Name, o.Request.Name)
			continue
		}
		if err := json.Unmarshal([]byte(raw), &ev); err != nil || ev.Name != o.Request.Name {
			t.Errorf("PV %s: evidence %s (%v), want the CreateVolume of %s", pv.Name, raw, err, o.Request.Name)
		}
	}
	t.Logf("%d CreateVolumes decoded with a PV, %d observations in all; the stop came after %s's", checked, len(obs), trigger)
	if checked == 0 {
		t.Fatal("no decoded CreateVolume had a PV: nothing was checked")
	}
	// Leave the cluster as teardown expects it: everything running.
	if err := c.RestartSidecar(); err != nil {
		t.Fatal(err)
	}
}

// createClaimsTogether creates n claims on the replicated class at once,
// as a burst of provisioning.
func createClaimsTogether(t *testing.T, ctx context.Context, c *cluster.Cluster, n int) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			class := "replicated"
			_, errs[i] = c.Client.CoreV1().PersistentVolumeClaims(shutdownNamespace).Create(ctx, &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%02d", i)},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: &class,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}, metav1.CreateOptions{})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// pvByHandle finds the PV of a CSI volume handle.
func pvByHandle(ctx context.Context, c *cluster.Cluster, handle string) (corev1.PersistentVolume, bool, error) {
	pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return corev1.PersistentVolume{}, false, err
	}
	for _, pv := range pvs.Items {
		if pv.Spec.CSI != nil && pv.Spec.CSI.VolumeHandle == handle {
			return pv, true, nil
		}
	}
	return corev1.PersistentVolume{}, false, nil
}
