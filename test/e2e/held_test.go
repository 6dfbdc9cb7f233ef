package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// heldStuckAfter is short: both disks below are stuck by age, not by an
// error.
const heldStuckAfter = 20 * time.Second

// TestHeldCloneIsStuckInCDIsWords: a pod uses two goldens. The real
// cdi-controller holds both clones (clone/common.go IsSourceClaimReady) and
// says why, in the DataVolume's Bound condition and a CloneSourceInUse
// Warning on the worker's claim; after --stuck-after the verdicts quote it.
// The second golden's DataVolume is then deleted, its claim kept (CDI
// clones from the claim alone): its disk must be stuck all the same, not
// "waiting for the golden's import". Once the pod goes, both clones finish.
// The pod is only an object: CDI reads pods, it needs no kubelet.
func TestHeldCloneIsStuckInCDIsWords(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		SidecarArgs: []string{"--resync-period=2s", "--stuck-after=" + heldStuckAfter.String(), "--evidence-grace=3s"},
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
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}
	held := workerCase{name: "held-a", pool: "kubernetes-held", flavor: flavorA, class: "replicated", size: "20Gi"}
	orphan := workerCase{name: "held-d", pool: "kubernetes-held", flavor: flavorD, class: "replicated", size: "20Gi"}
	createWorker(t, ctx, c, held)
	createWorker(t, ctx, c, orphan)
	orphanGolden := metav1.DeletePropagationOrphan
	if err := c.Dynamic.Resource(cloner.DataVolumeGVR).Namespace(cluster.NamespaceGolden).Delete(ctx, goldenD,
		metav1.DeleteOptions{PropagationPolicy: &orphanGolden}); err != nil {
		t.Fatal(err)
	}

	inUse := func(golden string) string {
		return "pod " + cluster.NamespaceGolden + "/" + reader + " using PersistentVolumeClaim " + golden
	}
	for _, tc := range []struct {
		disk    workerCase
		golden  string
		reasons []string
	}{
		{held, goldenA, []string{cloner.ReasonStuck}},
		{orphan, goldenD, []string{cloner.ReasonStuck, cloner.ReasonUnknownGolden}},
	} {
		rec := waitRecordIn(t, ctx, c, tc.disk.name, "stuck", func(r *cloner.Record) bool { return r.Verdict == cloner.VerdictStuck })
		t.Logf("%s: %s", tc.disk.name, rec.Message)
		for _, words := range []string{inUse(tc.golden), "CDI's Warning events: CloneSourceInUse: " + inUse(tc.golden)} {
			if !strings.Contains(rec.Message, words) {
				t.Errorf("%s: message %q lacks %q", tc.disk.name, rec.Message, words)
			}
		}
		assertReasons(t, tc.disk.name, rec, tc.reasons)
		assertWarnings(t, ctx, c, tc.disk.name, tc.reasons)
		checkStuckWarningQuotes(t, ctx, c, tc.disk.name, inUse(tc.golden))
	}

	if err := c.Client.CoreV1().Pods(cluster.NamespaceGolden).Delete(ctx, reader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []workerCase{held, orphan} {
		waitRecordIn(t, ctx, c, d.name, "csi-clone once the pod is gone", func(r *cloner.Record) bool { return r.Verdict == cloner.VerdictCSIClone })
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
		if e.InvolvedObject.Name == disk && e.Source.Component == "csi-clone-sidecar" && e.Reason == cloner.EventReason(cloner.ReasonStuck) {
			if !strings.Contains(e.Message, words) {
				t.Errorf("%s: CloneStuck %q lacks %q", disk, e.Message, words)
			}
			return
		}
	}
	t.Errorf("%s: no CloneStuck Warning", disk)
}
