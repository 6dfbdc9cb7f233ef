package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// TestVerdictsForBareClaims: claims no DataVolume made, whose dataSourceRef
// names the claim golden, are disks of it. The real csi-provisioner clones
// the one of the golden's class through our relay (a csi-clone verdict from
// the tap, the golden's volume as its content source) and refuses the one
// smaller than the golden (external-provisioner v6.4.0, controller.go
// getPVCSource), which stays Pending with nothing said but the
// provisioner's event: stuck after --stuck-after, in the provisioner's
// words, with a Warning on the claim. Each is predicted by the
// external-provisioner's rules (data-source; provisioner-refuses), counted
// under the golden and reported in its pool (the namespace).
func TestVerdictsForBareClaims(t *testing.T) {
	c := verdictCluster(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	createClaimGolden(t, ctx, c)
	goldenHandle := fleet.CsiHandle(claimVolume(t, ctx, c, cluster.NamespaceGolden, claimGolden))
	for name, size := range map[string]string{"jammy-copy": "20Gi", "jammy-small": "1Gi"} {
		createBareClaim(t, ctx, c, name, size)
	}
	rec := waitVerdict(t, ctx, c, cluster.NamespaceGolden, "jammy-copy", record.VerdictCSIClone, 4*time.Minute)
	assertReasons(t, "jammy-copy", rec, nil)
	if rec.Source != record.SourceCSITap || rec.ContentSource != "volume:"+goldenHandle || rec.Golden != cluster.NamespaceGolden+"/"+claimGolden ||
		rec.Pool != cluster.NamespaceGolden || rec.Predicted != predict.PathCSIClone || rec.PredictedReason != predict.ReasonDataSource {
		t.Errorf("jammy-copy: source %q, content source %q, golden %q, pool %q, predicted %s/%s; want the tap's, volume:%s, %s/%s, %s, csi-clone/data-source (%+v)",
			rec.Source, rec.ContentSource, rec.Golden, rec.Pool, rec.Predicted, rec.PredictedReason, goldenHandle, cluster.NamespaceGolden, claimGolden, cluster.NamespaceGolden, rec)
	}
	stuck := waitVerdict(t, ctx, c, cluster.NamespaceGolden, "jammy-small", record.VerdictStuck, 3*time.Minute)
	if !strings.Contains(stuck.Message, "ProvisioningFailed") || !strings.Contains(stuck.Message, "greater than or equal in size") {
		t.Errorf("jammy-small: stuck %q, want the external-provisioner's ProvisioningFailed (greater than or equal in size) quoted", stuck.Message)
	}
	if stuck.Predicted != predict.PathBlocked || stuck.PredictedReason != predict.ReasonProvisionerRefuses {
		t.Errorf("jammy-small: predicted %s/%s, want %s/%s", stuck.Predicted, stuck.PredictedReason, predict.PathBlocked, predict.ReasonProvisionerRefuses)
	}
	waitClaimWarning(t, ctx, c, "jammy-small", record.EventReason(record.ReasonStuck))
	waitMetrics(t, ctx, c, func(s scrape) error {
		img := map[string]string{"namespace": cluster.NamespaceGolden, "golden": claimGolden, "image": claimGoldenImage}
		for verdict, want := range map[string]float64{record.VerdictCSIClone: 1, record.VerdictStuck: 1} {
			if got, _ := s.value("csi_clone_image_disks", with(img, "verdict", verdict)); got != want {
				return fmt.Errorf("csi_clone_image_disks{golden=%s,verdict=%s} = %v, want %v", claimGolden, verdict, got, want)
			}
		}
		return nil
	})
	checkBareClaimReport(t, ctx, c)
}

// createBareClaim makes a Block claim of the golden's class in the golden
// namespace cloning the claim golden through its dataSourceRef.
func createBareClaim(t *testing.T, ctx context.Context, c *cluster.Cluster, name, size string) {
	t.Helper()
	block, class := corev1.PersistentVolumeBlock, "replicated"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.NamespaceGolden, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeMode: &block,
			AccessModes:   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			DataSourceRef: &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: claimGolden},
			Resources:     corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claimVolume is the PV a bound claim names.
func claimVolume(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name string) *corev1.PersistentVolume {
	t.Helper()
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pv
}

// waitClaimWarning waits for the sidecar's Warning of reason on a claim of
// the golden namespace (a bare claim's events are on the claim itself).
func waitClaimWarning(t *testing.T, ctx context.Context, c *cluster.Cluster, claim, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(cluster.NamespaceGolden).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "PersistentVolumeClaim" && e.InvolvedObject.Name == claim && e.Reason == reason &&
				e.Source.Component == fleet.EventSourceComponent {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s Warning from %s on claim %s: %v", reason, fleet.EventSourceComponent, claim, err)
	}
}

// checkBareClaimReport: the report shows the golden namespace's pool with
// both bare claims and the claim golden with two consumers.
func checkBareClaimReport(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	rep, printed := reportJSON(t, ctx, c)
	want := fmt.Sprint(map[string]int{record.VerdictCSIClone: 1, record.VerdictStuck: 1})
	found := false
	for _, p := range rep.Pools {
		if p.Namespace == cluster.NamespaceGolden && p.Pool == cluster.NamespaceGolden {
			found = true
			if fmt.Sprint(p.Verdicts) != want {
				t.Errorf("report: pool %s verdicts %v, want %s", p.Pool, p.Verdicts, want)
			}
		}
	}
	if !found {
		t.Errorf("report: no pool %s/%s", cluster.NamespaceGolden, cluster.NamespaceGolden)
	}
	for _, g := range reportedImages(t, printed) {
		if g.Namespace == cluster.NamespaceGolden && g.Name == claimGolden {
			if g.Consumers != 2 {
				t.Errorf("report: claim golden %+v, want 2 consumers", g)
			}
			return
		}
	}
	t.Errorf("report: no claim golden %s in %s", claimGolden, printed)
}
