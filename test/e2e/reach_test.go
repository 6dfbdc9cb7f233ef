package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The routes test: disks that reach a golden other than the Talos catalog's,
// by another route than source.pvc plus the pool annotation, shaped as
// Cozystack and KubeVirt make them.

const (
	reachTenant  = "tenant-reach"
	reachSources = "tenant-sources" // holds a DataSource, as a boot-source namespace would
	vmImage      = "ubuntu"
)

var vmGolden = cluster.VMImageGoldenName(vmImage)

// TestVerdictsForEveryRoute: a vm-disk cloned from a vm-default-images golden
// through source.pvc, and a disk with no annotation at all that reaches the
// same golden through a DataSource in another namespace, each get their
// verdict from the tap, their own prediction, metrics and a report row,
// pooled by vm-disk's release and by namespace.
func TestVerdictsForEveryRoute(t *testing.T) {
	c := verdictCluster(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	importVMImage(t, ctx, c)
	for _, ns := range []string{reachTenant, reachSources} {
		if err := c.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.PublishDataSource(ctx, reachSources, vmImage, cluster.NamespaceGolden, vmGolden); err != nil {
		t.Fatal(err)
	}
	for _, d := range []cluster.VMDisk{
		{Namespace: reachTenant, Name: "vm-disk-web", Image: vmImage, StorageClass: "replicated", Size: "20Gi"},
		{Namespace: reachTenant, Name: "boot-db", Image: vmImage, DataSource: reachSources + "/" + vmImage, StorageClass: "replicated", Size: "20Gi"},
	} {
		if _, err := c.CreateVMDisk(ctx, d); err != nil {
			t.Fatal(err)
		}
	}

	waitCleanClones(t, ctx, c, vmGolden, "vm-disk-web", "boot-db")
	wantPools := map[string]string{"vm-disk-web": "vm-disk-web", "boot-db": reachTenant}
	for name, pool := range wantPools {
		if rec := readRecord(t, ctx, c, reachTenant, name); rec.Pool != pool {
			t.Errorf("%s: pool %q, want %q", name, rec.Pool, pool)
		}
	}
	waitMetrics(t, ctx, c, checkRouteMetrics)
	checkRouteReport(t, ctx, c, wantPools)
}

// waitCleanClones waits until each disk of reachTenant is a csi-clone of
// the golden namespace's golden, seen by the tap, as predicted, with no
// bad reason.
func waitCleanClones(t *testing.T, ctx context.Context, c *cluster.Cluster, golden string, disks ...string) {
	t.Helper()
	for _, name := range disks {
		rec := waitVerdict(t, ctx, c, reachTenant, name, record.VerdictCSIClone, 4*time.Minute)
		assertReasons(t, name, rec, nil)
		if rec.Source != record.SourceCSITap || rec.Predicted != predict.PathCSIClone || rec.Golden != cluster.NamespaceGolden+"/"+golden {
			t.Errorf("%s: source %q, predicted %q, golden %q; want the tap's, csi-clone, %s/%s (%+v)",
				name, rec.Source, rec.Predicted, rec.Golden, cluster.NamespaceGolden, golden, rec)
		}
		t.Logf("%s: %s from %s, predicted %s, pool %q", name, rec.Verdict, rec.ContentSource, rec.Predicted, rec.Pool)
	}
}

// checkRouteMetrics: the two disks are worker disks, counted under their
// golden's image and timed, the golden's path is predicted per class, and
// both predictions held.
func checkRouteMetrics(s scrape) error {
	if got, _ := s.value("csi_clone_worker_disks", map[string]string{"verdict": record.VerdictCSIClone}); got != 2 {
		return fmt.Errorf("csi-clone worker disks = %v, want 2", got)
	}
	img := map[string]string{"namespace": cluster.NamespaceGolden, "golden": vmGolden, "image": vmImage}
	if got, _ := s.value("csi_clone_image_disks", with(img, "verdict", record.VerdictCSIClone)); got != 2 {
		return fmt.Errorf("csi_clone_image_disks{golden=%s,verdict=csi-clone} = %v, want 2", vmGolden, got)
	}
	if got, _ := s.value("csi_clone_image_golden_info", with(img, "phase", string(cdiv1.Succeeded))); got != 1 {
		return fmt.Errorf("csi_clone_image_golden_info for %s = %v, want 1", vmGolden, got)
	}
	if right, _ := s.value("csi_clone_prediction_checks", map[string]string{"result": "right"}); right != 2 {
		return fmt.Errorf("prediction checks right = %v, want 2", right)
	}
	if _, ok := s.value("csi_clone_bad_disks", nil); ok {
		return fmt.Errorf("bad-disk series for two good clones")
	}
	// Predicted per class like a flavor, before any disk (the disks' own
	// predictions are checked above).
	if got, _ := s.value("csi_clone_image_path_predicted", with(with(img, "storage_class", "replicated"), "path", predict.PathCSIClone)); got != 1 {
		return fmt.Errorf("csi_clone_image_path_predicted for %s on replicated = %v, want one csi-clone series", vmGolden, got)
	}
	// Timed like Talos workers, once each (ledger).
	if n, _ := s.value("csi_clone_duration_seconds", map[string]string{"verdict": record.VerdictCSIClone}); n != 2 {
		return fmt.Errorf("csi_clone_duration_seconds{verdict=csi-clone} counts %v disks, want 2", n)
	}
	createVolume := map[string]string{"phase": record.PhaseCreateVolume, "verdict": record.VerdictCSIClone, "storage_class": "replicated"}
	if n, _ := s.value("csi_clone_phase_duration_seconds", createVolume); n != 2 {
		return fmt.Errorf("csi_clone_phase_duration_seconds%v counts %v disks, want 2", createVolume, n)
	}
	return nil
}

// importVMImage imports the vm-default-images golden the tests clone.
func importVMImage(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	if _, err := c.CreateVMImage(ctx, cluster.VMImage{Image: vmImage, StorageClass: "replicated", Size: "5Gi"}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ctx, c, cluster.NamespaceGolden, vmGolden, cdiv1.Succeeded)
}

// checkRouteReport: `report -o json` has a pool row per disk and the image
// golden with both consumers.
func checkRouteReport(t *testing.T, ctx context.Context, c *cluster.Cluster, wantPools map[string]string) {
	t.Helper()
	rep, printed := reportJSON(t, ctx, c)
	got := map[string]string{}
	for _, p := range rep.Pools {
		got[p.Namespace+"/"+p.Pool] = fmt.Sprint(p.Verdicts)
	}
	for _, pool := range wantPools {
		if v := got[reachTenant+"/"+pool]; v != fmt.Sprint(map[string]int{record.VerdictCSIClone: 1}) {
			t.Errorf("report: pool %s/%s verdicts %s, want one csi-clone (pools %v)", reachTenant, pool, v, got)
		}
	}
	found := false
	for _, g := range reportedImages(t, printed) {
		if g.Namespace == cluster.NamespaceGolden && g.Name == vmGolden {
			found = true
			if g.Image != vmImage || g.Consumers != 2 {
				t.Errorf("report: image golden %+v, want image %s with 2 consumers", g, vmImage)
			}
		}
	}
	if !found {
		t.Errorf("report: no image golden %s/%s in %s", cluster.NamespaceGolden, vmGolden, printed)
	}
	var table bytes.Buffer
	if err := report.Report(ctx, config.Clients{Kube: c.Client, Dynamic: c.Dynamic}, config.DefaultConfig(), &table, "table"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), vmGolden) {
		t.Errorf("report table does not show %s:\n%s", vmGolden, table.String())
	}
}

// reportedImage is an image golden's row of `report -o json`.
type reportedImage struct {
	Namespace, Name, Image string
	Consumers              int
}

// reportedImages reads the image goldens of `report -o json` as JSON, not
// as the report's type: the field is what users parse.
func reportedImages(t *testing.T, printed []byte) []reportedImage {
	t.Helper()
	var images struct {
		Images []reportedImage `json:"images"`
	}
	if err := json.Unmarshal(printed, &images); err != nil {
		t.Fatal(err)
	}
	return images.Images
}

// TestUsePopulatorFalseIsPredictedHostAssisted: Cozystack's worker template
// sets cdi.kubevirt.io/storage.usePopulator: "false"; on the golden's own
// class CDI then copies host-assisted (legacy path, NoPopulator). The disk's
// own prediction says so before the verdict does, and the two agree.
func TestUsePopulatorFalseIsPredictedHostAssisted(t *testing.T) {
	c := verdictCluster(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	importVMImage(t, ctx, c)
	if err := c.CreateNamespace(ctx, reachTenant); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateVMDisk(ctx, cluster.VMDisk{Namespace: reachTenant, Name: "vm-disk-legacy", Image: vmImage, StorageClass: "replicated",
		Size: "20Gi", Annotations: map[string]string{"cdi.kubevirt.io/storage.usePopulator": "false"}}); err != nil {
		t.Fatal(err)
	}
	rec := waitVerdict(t, ctx, c, reachTenant, "vm-disk-legacy", record.VerdictHostAssisted, 4*time.Minute)
	if rec.Predicted != predict.PathHostAssisted || rec.PredictedReason != predict.ReasonPopulatorOff {
		t.Errorf("predicted %s/%s, want %s/%s (%+v)", rec.Predicted, rec.PredictedReason, predict.PathHostAssisted, predict.ReasonPopulatorOff, rec)
	}
	for _, r := range rec.BadReasons() {
		if r == record.ReasonPredictionWrong {
			t.Errorf("flagged %s: %s", r, rec.Message)
		}
	}
	t.Logf("vm-disk-legacy: %s (%s), predicted %s/%s, findings %v", rec.Verdict, rec.Source, rec.Predicted, rec.PredictedReason, rec.BadReasons())
}

// claimGolden is a PVC of the golden namespace that no DataVolume made:
// an operator's, annotated with its image's name.
const (
	claimGolden      = "jammy-restored"
	claimGoldenImage = "jammy"
)

// TestVerdictsForAClaimGolden: a claim of the golden namespace that no
// DataVolume made is a golden once disks name it. A vm-disk naming it
// through source.pvc and a disk reaching it through a DataSource in another
// namespace get their verdicts from the tap and their predictions, are
// counted under it, and the guard's parameters carry it.
func TestVerdictsForAClaimGolden(t *testing.T) {
	c := verdictCluster(t, cluster.Options{SidecarArgs: []string{"--admission-params=true"}})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, ns := range []string{reachTenant, reachSources} {
		if err := c.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	createClaimGolden(t, ctx, c)
	if err := c.PublishDataSource(ctx, reachSources, claimGoldenImage, cluster.NamespaceGolden, claimGolden); err != nil {
		t.Fatal(err)
	}
	waitDiffDataSources(t, ctx, c, map[string]*cdiv1.DataSource{claimGoldenImage: {ObjectMeta: metav1.ObjectMeta{Namespace: reachSources, Name: claimGoldenImage}}})
	for _, d := range []cluster.VMDisk{
		{Namespace: reachTenant, Name: "vm-disk-jammy", StorageClass: "replicated", Size: "20Gi"},
		{Namespace: reachTenant, Name: "boot-jammy", DataSource: reachSources + "/" + claimGoldenImage, StorageClass: "replicated", Size: "20Gi"},
	} {
		dv, err := c.VMDiskDataVolume(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if dv.Spec.Source != nil {
			dv.Spec.Source.PVC.Name = claimGolden
		}
		if dv.Annotations[cluster.AnnCloneToken], err = c.CloneToken(ctx, cluster.NamespaceGolden, claimGolden, d.Namespace, d.Name); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CreateDataVolume(ctx, dv); err != nil {
			t.Fatal(err)
		}
	}
	waitCleanClones(t, ctx, c, claimGolden, "vm-disk-jammy", "boot-jammy")
	waitMetrics(t, ctx, c, func(s scrape) error {
		img := map[string]string{"namespace": cluster.NamespaceGolden, "golden": claimGolden, "image": claimGoldenImage}
		if got, _ := s.value("csi_clone_image_disks", with(img, "verdict", record.VerdictCSIClone)); got != 2 {
			return fmt.Errorf("csi_clone_image_disks{golden=%s,verdict=csi-clone} = %v, want 2", claimGolden, got)
		}
		if got, _ := s.value("csi_clone_image_golden_info", with(with(img, "phase", string(cdiv1.Succeeded)), "storage_class", "replicated")); got != 1 {
			return fmt.Errorf("csi_clone_image_golden_info for %s = %v, want 1", claimGolden, got)
		}
		return nil
	})
	waitParamsHold(t, ctx, c, map[string]string{claimGolden + ".phase": string(cdiv1.Succeeded), claimGolden + ".class": "replicated"})
	cm, err := c.Client.CoreV1().ConfigMaps(cluster.NamespaceCSI).Get(ctx, publish.AdmissionParamsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if path := cm.Data[claimGolden+".path.replicated"]; !strings.HasPrefix(path, predict.PathCSIClone+"/") {
		t.Errorf("the guard's parameters: %s.path.replicated = %q, want a csi-clone", claimGolden, path)
	}
}

// createClaimGolden makes the claim golden, a Block claim of the golden's
// class, and waits until the driver has provisioned it.
func createClaimGolden(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	block, class := corev1.PersistentVolumeBlock, "replicated"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.NamespaceGolden, Name: claimGolden,
			Annotations: map[string]string{fleet.AnnImageName: claimGoldenImage}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeMode: &block,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}}},
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Get(ctx, claimGolden, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.ClaimBound, nil
	})
	if err != nil {
		t.Fatalf("claim golden %s never bound: %v", claimGolden, err)
	}
}
