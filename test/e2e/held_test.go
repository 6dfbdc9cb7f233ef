package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// heldStuckAfter is short: both disks below are stuck by age, not by an
// error.
const heldStuckAfter = 20 * time.Second

// TestHeldCloneIsStuckInCDIsWords: a pod uses two goldens. The real
// cdi-controller holds both clones (clone/common.go IsSourceClaimReady) and
// says why, in the DataVolume's Bound condition and a CloneSourceInUse
// Warning on the worker's claim; after --stuck-after the verdicts quote it.
// The second golden's DataVolume was deleted first, its claim kept (CDI
// clones from the claim alone): its disk must be stuck all the same, not
// "waiting for the golden's import". Once the pod goes, both clones finish.
// The pod is only an object: CDI reads pods, it needs no kubelet.
func TestHeldCloneIsStuckInCDIsWords(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		SidecarArgs: []string{"--resync-period=2s", "--stuck-after=" + heldStuckAfter.String(), "--evidence-grace=3s"},
		// An orphaning delete of a DataVolume completes through the
		// garbage collector, as on any cluster.
		ExtraControllers: []string{"garbage-collector-controller"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	goldenA, goldenD := cluster.GoldenName(flavorA, talosVersion), cluster.GoldenName(flavorD, talosVersion)
	for _, f := range []string{flavorA, flavorD} {
		createGolden(t, ctx, c, cluster.Golden{SchematicID: f, Version: talosVersion, StorageClass: "replicated"})
	}
	waitPhase(t, ctx, c, cluster.NamespaceGolden, goldenA, cdiv1.Succeeded)
	waitPhase(t, ctx, c, cluster.NamespaceGolden, goldenD, cdiv1.Succeeded)
	reader := useGoldens(t, ctx, c, "golden-reader", goldenA, goldenD)
	deleteDataVolumeKeepClaim(t, ctx, c, goldenD)
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}
	held := workerCase{name: "held-a", pool: "kubernetes-held", flavor: flavorA, class: "replicated", size: "20Gi"}
	orphan := workerCase{name: "held-d", pool: "kubernetes-held", flavor: flavorD, class: "replicated", size: "20Gi"}
	createWorker(t, ctx, c, held)
	createWorker(t, ctx, c, orphan)

	inUse := func(golden string) string {
		return "pod " + cluster.NamespaceGolden + "/" + reader + " using PersistentVolumeClaim " + golden
	}
	for _, tc := range []struct {
		disk    workerCase
		golden  string
		reasons []string
	}{
		{held, goldenA, []string{record.ReasonStuck}},
		{orphan, goldenD, []string{record.ReasonStuck, record.ReasonUnknownGolden}},
	} {
		rec := waitRecordIn(t, ctx, c, tc.disk.name, "stuck", func(r *record.Record) bool { return r.Verdict == record.VerdictStuck })
		t.Logf("%s: %s", tc.disk.name, rec.Message)
		for _, words := range []string{inUse(tc.golden), "CDI's Warning events: CloneSourceInUse: " + inUse(tc.golden)} {
			if !strings.Contains(rec.Message, words) {
				t.Errorf("%s: message %q lacks %q", tc.disk.name, rec.Message, words)
			}
		}
		assertReasons(t, tc.disk.name, rec, tc.reasons)
		assertWarnings(t, ctx, c, tc.disk.name, tc.reasons)
		checkStuckWarningQuotes(t, ctx, c, tc.disk.name, inUse(tc.golden))
		if rec.Phase != record.PhasePlanning {
			t.Errorf("%s: held by the pod in phase %q, want %s (CDI has not made its tmp-pvc)", tc.disk.name, rec.Phase, record.PhasePlanning)
		}
	}
	heldFor := time.Now()

	if err := c.Client.CoreV1().Pods(cluster.NamespaceGolden).Delete(ctx, reader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []workerCase{held, orphan} {
		rec := waitRecordIn(t, ctx, c, d.name, "csi-clone once the pod is gone", func(r *record.Record) bool { return r.Verdict == record.VerdictCSIClone })
		// The wait for the pod is in the timeline before the first
		// CreateVolume, at least as long as the disk was seen stuck (less a
		// second: creation timestamps are whole seconds): in planning when
		// a record dated CDI's tmp-pvc before CDI deleted it, else merged
		// into provisioning (a clone this fast leaves that to chance).
		held := heldFor.Sub(rec.Timeline.Requested) - time.Second
		steps := rec.Timeline.Steps()
		var before time.Duration
		for _, st := range steps {
			if st.Phase == record.PhasePlanning || st.Phase == record.PhaseProvisioning {
				before += st.Duration
			}
		}
		planningFirst := len(steps) > 0 && steps[0].Phase == record.PhasePlanning && steps[0].Duration >= held
		if before < held || (!rec.Timeline.Claimed.IsZero() && !planningFirst) {
			t.Errorf("%s: timeline %+v (steps %+v): want the %v the pod held it before the first CreateVolume, in planning when the tmp-pvc is dated",
				d.name, rec.Timeline, steps, held.Round(time.Second))
		}
	}
}

// deleteDataVolumeKeepClaim deletes a golden DataVolume, orphaning its
// claim, and waits until it is gone and the claim is still there.
func deleteDataVolumeKeepClaim(t *testing.T, ctx context.Context, c *cluster.Cluster, golden string) {
	t.Helper()
	orphan := metav1.DeletePropagationOrphan
	dvs := c.Dynamic.Resource(fleet.DataVolumeGVR).Namespace(cluster.NamespaceGolden)
	if err := dvs.Delete(ctx, golden, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dvs.Get(ctx, golden, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("golden DataVolume %s never went away: %v", golden, err)
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Get(ctx, golden, metav1.GetOptions{}); err != nil {
		t.Fatalf("the golden's claim went with its DataVolume: %v", err)
	}
}

// useGoldens creates a pod in the goldens' namespace that mounts their
// claims read-write, as a VM booted from a golden would.
func useGoldens(t *testing.T, ctx context.Context, c *cluster.Cluster, name string, goldens ...string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.NamespaceGolden, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "reader", Image: "registry.invalid/reader"}}},
	}
	for i, g := range goldens {
		vol := "golden-" + string(rune('a'+i))
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: g}}})
		pod.Spec.Containers[0].VolumeDevices = append(pod.Spec.Containers[0].VolumeDevices,
			corev1.VolumeDevice{Name: vol, DevicePath: "/dev/" + vol})
	}
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// checkStuckWarningQuotes: the sidecar's CloneStuck Warning carries CDI's
// words too.
func checkStuckWarningQuotes(t *testing.T, ctx context.Context, c *cluster.Cluster, disk, words string) {
	t.Helper()
	evs, err := c.Client.CoreV1().Events(verdictTenant).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == disk && e.Source.Component == "csi-clone-sidecar" && e.Reason == record.EventReason(record.ReasonStuck) {
			if !strings.Contains(e.Message, words) {
				t.Errorf("%s: CloneStuck %q lacks %q", disk, e.Message, words)
			}
			return
		}
	}
	t.Errorf("%s: no CloneStuck Warning", disk)
}
