package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// goldenSnapshot is the VolumeSnapshot of the vm-default-images golden kept
// beside it, as a DataImportCron of sourceFormat snapshot keeps one.
const goldenSnapshot = "ubuntu-snapshot"

// TestVerdictsForSnapshotGoldens: a VolumeSnapshot in the golden namespace
// is an image golden; a disk restoring it through source.snapshot, and one
// through a DataSource of it in another namespace, neither annotated nor
// labelled, each get a snapshot-clone verdict from the tap (the driver's
// CreateVolume restores the golden snapshot's handle), their own prediction
// (snapshot-clone, snapshot-source), their pool (the namespace), metrics
// and a report row for the golden with its consumers; so does a bare claim
// of the golden namespace whose dataSourceRef is the snapshot, restored by
// the external-provisioner without CDI (predicted by its rules: data-source).
func TestVerdictsForSnapshotGoldens(t *testing.T) {
	c := verdictCluster(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	importVMImage(t, ctx, c)
	handle, err := c.SnapshotClaim(ctx, cluster.NamespaceGolden, goldenSnapshot, vmGolden, "snap", map[string]any{fleet.AnnImageName: vmImage})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{reachTenant, reachSources} {
		if err := c.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.PublishSnapshotDataSource(ctx, reachSources, goldenSnapshot, cluster.NamespaceGolden, goldenSnapshot); err != nil {
		t.Fatal(err)
	}
	// CDI routes a sourceRef from its cache: a boot source exists before
	// its disks (waitDiffDataSources).
	waitDiffDataSources(t, ctx, c, map[string]*cdiv1.DataSource{goldenSnapshot: {ObjectMeta: metav1.ObjectMeta{Namespace: reachSources, Name: goldenSnapshot}}})
	snapshot := cluster.NamespaceGolden + "/" + goldenSnapshot
	for _, d := range []cluster.VMDisk{
		{Namespace: reachTenant, Name: "restored", Image: vmImage, Snapshot: snapshot, StorageClass: "replicated", Size: "20Gi"},
		{Namespace: reachTenant, Name: "restored-via-datasource", Image: vmImage, Snapshot: snapshot, DataSource: reachSources + "/" + goldenSnapshot,
			StorageClass: "replicated", Size: "20Gi"},
	} {
		if _, err := c.CreateVMDisk(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	createBareRestore(t, ctx, c)
	for _, name := range []string{"restored", "restored-via-datasource"} {
		rec := waitVerdict(t, ctx, c, reachTenant, name, record.VerdictSnapshotClone, 4*time.Minute)
		assertReasons(t, name, rec, nil)
		if rec.Source != record.SourceCSITap || rec.ContentSource != "snapshot:"+handle || rec.Golden != snapshot || rec.Pool != reachTenant {
			t.Errorf("%s: source %q, content source %q, golden %q, pool %q; want the tap's, snapshot:%s, %s, %s (%+v)",
				name, rec.Source, rec.ContentSource, rec.Golden, rec.Pool, handle, snapshot, reachTenant, rec)
		}
		if rec.Predicted != predict.PathSnapshotClone || rec.PredictedReason != predict.ReasonSnapshotSource {
			t.Errorf("%s: predicted %s/%s, want %s/%s", name, rec.Predicted, rec.PredictedReason, predict.PathSnapshotClone, predict.ReasonSnapshotSource)
		}
		t.Logf("%s: %s from %s, predicted %s/%s", name, rec.Verdict, rec.ContentSource, rec.Predicted, rec.PredictedReason)
	}
	bare := waitVerdict(t, ctx, c, cluster.NamespaceGolden, bareRestore, record.VerdictSnapshotClone, 4*time.Minute)
	assertReasons(t, bareRestore, bare, nil)
	if bare.Source != record.SourceCSITap || bare.ContentSource != "snapshot:"+handle || bare.Golden != snapshot || bare.Pool != cluster.NamespaceGolden ||
		bare.Predicted != predict.PathSnapshotClone || bare.PredictedReason != predict.ReasonDataSource {
		t.Errorf("%s: source %q, content source %q, golden %q, pool %q, predicted %s/%s; want the tap's, snapshot:%s, %s, %s, snapshot-clone/data-source (%+v)",
			bareRestore, bare.Source, bare.ContentSource, bare.Golden, bare.Pool, bare.Predicted, bare.PredictedReason, handle, snapshot, cluster.NamespaceGolden, bare)
	}
	waitMetrics(t, ctx, c, checkSnapshotGoldenMetrics)
	checkSnapshotGoldenReport(t, ctx, c)
}

// bareRestore is a claim of the golden namespace, no DataVolume's, whose
// dataSourceRef is the golden VolumeSnapshot: the external-provisioner
// restores it without CDI.
const bareRestore = "ubuntu-restored-bare"

func createBareRestore(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	golden, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Get(ctx, vmGolden, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	group, class := "snapshot.storage.k8s.io", "replicated"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.NamespaceGolden, Name: bareRestore},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeMode: golden.Spec.VolumeMode, AccessModes: golden.Spec.AccessModes,
			DataSourceRef: &corev1.TypedObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: goldenSnapshot},
			Resources:     corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}}},
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkSnapshotGoldenMetrics: both disks are counted under the snapshot
// golden's image, and both predictions held.
func checkSnapshotGoldenMetrics(s scrape) error {
	img := map[string]string{"namespace": cluster.NamespaceGolden, "golden": goldenSnapshot, "image": vmImage}
	if got, _ := s.value("csi_clone_image_disks", with(img, "verdict", record.VerdictSnapshotClone)); got != 3 {
		return fmt.Errorf("csi_clone_image_disks{golden=%s,verdict=snapshot-clone} = %v, want 3 (two DataVolumes, one bare claim)", goldenSnapshot, got)
	}
	if right, _ := s.value("csi_clone_prediction_checks", map[string]string{"result": "right"}); right != 3 {
		return fmt.Errorf("prediction checks right = %v, want 3", right)
	}
	if _, ok := s.value("csi_clone_bad_disks", nil); ok {
		return fmt.Errorf("bad-disk series for two good restores")
	}
	return nil
}

// checkSnapshotGoldenReport: `report -o json` has the tenant's pool with two
// snapshot clones and the snapshot golden with both consumers.
func checkSnapshotGoldenReport(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	rep, printed := reportJSON(t, ctx, c)
	found := false
	for _, p := range rep.Pools {
		if p.Namespace == reachTenant && p.Pool == reachTenant {
			found = true
			if fmt.Sprint(p.Verdicts) != fmt.Sprint(map[string]int{record.VerdictSnapshotClone: 2}) {
				t.Errorf("report: pool %s verdicts %v, want two snapshot-clone", reachTenant, p.Verdicts)
			}
		}
	}
	if !found {
		t.Errorf("report: no pool %s/%s", reachTenant, reachTenant)
	}
	for _, g := range reportedImages(t, printed) {
		if g.Namespace == cluster.NamespaceGolden && g.Name == goldenSnapshot {
			if g.Image != vmImage || g.Consumers != 3 {
				t.Errorf("report: snapshot golden %+v, want image %s with 3 consumers", g, vmImage)
			}
			return
		}
	}
	t.Errorf("report: no snapshot golden %s in %s", goldenSnapshot, printed)
}
