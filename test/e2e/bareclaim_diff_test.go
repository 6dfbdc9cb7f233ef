package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// bareArrangement is one bare claim of the differential: what it clones
// and how it asks.
type bareArrangement struct {
	snapshot bool   // the golden VolumeSnapshot, else the claim golden
	size     string // below, at or above the golden's request (a snapshot's restore size)
	mode     corev1.PersistentVolumeMode
	class    string // the golden's, another of its driver, another driver's
	legacy   bool   // spec.dataSource, else spec.dataSourceRef
}

func (a bareArrangement) name() string {
	src, field := "pvc", "ref"
	if a.snapshot {
		src = "snap"
	}
	if a.legacy {
		field = "ds"
	}
	return strings.ToLower(fmt.Sprintf("bare-%s-%s-%s-%s-%s", src, a.size, a.mode, a.class, field))
}

// bareArrangements is every combination of the inputs the model reads:
// the source's kind, the request against the source's, the volume mode,
// the class's driver (the golden's class, another of its driver, another
// driver's), and the field that names the source. Not varied, as the model
// does not read them: a source not bound yet (the external-provisioner
// waits for it), a source being deleted, a claim or source without a class,
// a source PV bound elsewhere (none of them a disk's arrangement), and a
// namespace in dataSourceRef (the loopback API server runs without
// CrossNamespaceVolumeDataSource and drops it).
func bareArrangements() []bareArrangement {
	var out []bareArrangement
	for _, snapshot := range []bool{false, true} {
		for _, size := range []string{"1Gi", "5Gi", "20Gi"} {
			for _, mode := range []corev1.PersistentVolumeMode{corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem} {
				for _, class := range []string{"replicated", "replicated-fixed", otherClass} {
					for _, legacy := range []bool{false, true} {
						out = append(out, bareArrangement{snapshot: snapshot, size: size, mode: mode, class: class, legacy: legacy})
					}
				}
			}
		}
	}
	return out
}

// TestBareClaimRulesMatchCSIProvisioner holds cdirules.ClaimCloneRefusal
// and ClaimRestoreRefusal (external-provisioner v6.4.0,
// pkg/controller/controller.go getPVCSource and getSnapshotSource) against
// the real csi-provisioner of each driver over every arrangement of
// bareArrangements: a claim it provisions is one the model lets through,
// one it refuses (ProvisioningFailed) is refused for the reason the model
// gives, checked in the provisioner's order; and the sidecar's own
// prediction recorded on each claim names the path the claim took. Each of
// the model's refusals decides at least one arrangement of each source.
func TestBareClaimRulesMatchCSIProvisioner(t *testing.T) {
	c := verdictCluster(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.StartOtherDriver(ctx, otherDriver, cluster.StorageClass{Name: otherClass}); err != nil {
		t.Fatal(err)
	}
	createClaimGolden(t, ctx, c)
	const goldenSnap = "jammy-snapshot"
	if _, err := c.SnapshotClaim(ctx, cluster.NamespaceGolden, goldenSnap, claimGolden, "snaps", nil); err != nil {
		t.Fatal(err)
	}
	waitDiffSnapshotReady(t, ctx, c, cluster.NamespaceGolden, goldenSnap)
	model := bareClaimModel(t, ctx, c, goldenSnap)
	arrangements := bareArrangements()
	for _, a := range arrangements {
		createArrangedBareClaim(t, ctx, c, a, goldenSnap)
	}
	outcomes := waitBareOutcomes(t, ctx, c, arrangements)
	decided := map[string]int{}
	for _, a := range arrangements {
		want := model(a)
		if got := outcomes[a.name()]; got != want {
			t.Errorf("%s: csi-provisioner %q, the model %q", a.name(), got, want)
		}
		source := "claim"
		if a.snapshot {
			source = "snapshot"
		}
		decided[source+"/"+want]++
	}
	for _, source := range []string{"claim", "snapshot"} {
		for _, refusal := range []string{cdirules.StuckTooSmall, cdirules.StuckDriver, cdirules.StuckVolumeMode, ""} {
			if decided[source+"/"+refusal] == 0 {
				t.Errorf("no %s arrangement decided by %q: the generator misses a rule", source, refusal)
			}
		}
	}
	t.Logf("%d bare claims, decided %v", len(arrangements), decided)
	checkRecordedBarePaths(t, ctx, c, arrangements, outcomes)
}

// bareClaimModel is the model's refusal ("" none) for an arrangement, read
// from the cluster as the sidecar reads it: the classes, the claim golden
// and its PV, the golden snapshot (fleet.ReadSnapshot).
func bareClaimModel(t *testing.T, ctx context.Context, c *cluster.Cluster, goldenSnap string) func(bareArrangement) string {
	t.Helper()
	classes, err := c.Client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl := cdirules.Cluster{Env: cdirules.Env{Classes: map[string]*storagev1.StorageClass{}}}
	for i := range classes.Items {
		cl.Classes[classes.Items[i].Name] = &classes.Items[i]
	}
	golden, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Get(ctx, claimGolden, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv := claimVolume(t, ctx, c, cluster.NamespaceGolden, claimGolden)
	src := cdirules.Source{Class: *golden.Spec.StorageClassName, Driver: pv.Spec.CSI.Driver, VolumeMode: string(*golden.Spec.VolumeMode),
		RequestBytes: fleet.ClaimRequest(golden)}
	snap, err := readDiffSnapshot(ctx, c, cluster.NamespaceGolden, goldenSnap)
	if err != nil {
		t.Fatal(err)
	}
	return func(a bareArrangement) string {
		q := resource.MustParse(a.size)
		claim := cdirules.Claim{Class: a.class, HasClass: true, VolumeMode: string(a.mode), Bytes: q.Value()}
		if a.snapshot {
			return cl.ClaimRestoreRefusal(snap, claim)
		}
		return cl.ClaimCloneRefusal(src, claim)
	}
}

func createArrangedBareClaim(t *testing.T, ctx context.Context, c *cluster.Cluster, a bareArrangement, goldenSnap string) {
	t.Helper()
	var group *string
	kind, source := "PersistentVolumeClaim", claimGolden
	if a.snapshot {
		g := "snapshot.storage.k8s.io"
		group, kind, source = &g, "VolumeSnapshot", goldenSnap
	}
	mode, class := a.mode, a.class
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.NamespaceGolden, Name: a.name()},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeMode: &mode,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(a.size)}}},
	}
	if a.legacy {
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: group, Kind: kind, Name: source}
	} else {
		pvc.Spec.DataSourceRef = &corev1.TypedObjectReference{APIGroup: group, Kind: kind, Name: source}
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// provisionerRefusals map the words of external-provisioner v6.4.0's
// ProvisioningFailed events to the model's refusals.
var provisionerRefusals = map[string]string{
	"must be greater than or equal in size":        cdirules.StuckTooSmall, // getPVCSource
	"is less than the size":                        cdirules.StuckTooSmall, // getSnapshotSource
	"claim in dataSource not bound or invalid":     cdirules.StuckDriver,   // getPVCSource, the source PV's driver
	"is not handled by CSI driver of StorageClass": cdirules.StuckDriver,   // getSnapshotSource
	"must have the same volume mode for cloning":   cdirules.StuckVolumeMode,
	"modifies the mode of the source volume":       cdirules.StuckVolumeMode,
}

// waitBareOutcomes waits until every claim is bound ("": provisioned) or
// carries a ProvisioningFailed event the model has words for, and returns
// each one's outcome by name.
func waitBareOutcomes(t *testing.T, ctx context.Context, c *cluster.Cluster, as []bareArrangement) map[string]string {
	t.Helper()
	out := map[string]string{}
	var open []string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		claims, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		events, err := c.Client.CoreV1().Events(cluster.NamespaceGolden).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		refused := map[string]string{}
		for _, e := range events.Items {
			if e.Reason != "ProvisioningFailed" || e.InvolvedObject.Kind != "PersistentVolumeClaim" {
				continue
			}
			for words, refusal := range provisionerRefusals {
				if strings.Contains(e.Message, words) {
					refused[e.InvolvedObject.Name] = refusal
				}
			}
		}
		bound := map[string]bool{}
		for _, pvc := range claims.Items {
			bound[pvc.Name] = pvc.Status.Phase == corev1.ClaimBound
		}
		open = nil
		for _, a := range as {
			switch n := a.name(); {
			case bound[n]:
				out[n] = ""
			case refused[n] != "":
				out[n] = refused[n]
			default:
				open = append(open, n)
			}
		}
		return len(open) == 0, nil
	})
	if err != nil {
		t.Fatalf("claims neither bound nor refused in words the model knows: %v (%v)", open, err)
	}
	return out
}

// checkRecordedBarePaths: the prediction the sidecar recorded on each claim
// is the path it took (a refused claim: blocked).
func checkRecordedBarePaths(t *testing.T, ctx context.Context, c *cluster.Cluster, as []bareArrangement, outcomes map[string]string) {
	t.Helper()
	for _, a := range as {
		want := predict.PathBlocked
		switch {
		case outcomes[a.name()] != "":
		case a.snapshot:
			want = predict.PathSnapshotClone
		default:
			want = predict.PathCSIClone
		}
		rec := waitRecord(t, ctx, c, cluster.NamespaceGolden, a.name(), time.Minute, "a prediction", func(r *record.Record) bool { return r.Predicted != "" })
		if rec.Predicted != want {
			t.Errorf("%s: the sidecar predicted %s (%s), the claim took %s", a.name(), rec.Predicted, rec.PredictedReason, want)
		}
	}
}
