package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

var accessFlavor = strings.Repeat("7e", 32)

// TestWorkerDiskWithoutReadWriteManyIsFlagged: worker VMs live-migrate, so
// a worker disk needs ReadWriteMany, which the platform's template leaves to
// the class's StorageProfile. Before any disk exists the report's clone
// paths show the access modes CDI renders for that template on each class:
// ReadWriteMany on the class whose profile CDI derives as LINSTOR's, and
// ReadWriteOnce, flagged, on one whose profile offers only that. Then a
// disk as the template renders it is a clean csi-clone on a ReadWriteMany
// claim, and one that names ReadWriteOnce is a csi-clone flagged
// not-read-write-many, with its Warning event and its series.
func TestWorkerDiskWithoutReadWriteManyIsFlagged(t *testing.T) {
	c := verdictCluster(t, cluster.Options{StorageClasses: []cluster.StorageClass{
		{Name: "replicated", DefaultVirt: true},
		{Name: "replicated-rwo", Pool: "rwo"},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	mergePatch(t, ctx, c, cluster.StorageProfileGVR, "replicated-rwo",
		`{"spec":{"claimPropertySets":[{"accessModes":["ReadWriteOnce"],"volumeMode":"Block"}]}}`)
	golden := cluster.GoldenName(accessFlavor, talosVersion)
	createGolden(t, ctx, c, cluster.Golden{SchematicID: accessFlavor, Version: talosVersion, StorageClass: "replicated"})
	waitPhase(t, ctx, c, cluster.NamespaceGolden, golden, cdiv1.Succeeded)
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}
	waitClonePathModes(t, ctx, c, "cozy-public/"+golden, map[string][]string{
		"replicated": {"ReadWriteMany"}, "replicated-rwo": {"ReadWriteOnce"}})

	for _, w := range []cluster.Worker{
		{Name: "template", FromProfile: true},
		{Name: "rwo", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
	} {
		w.Namespace, w.Golden, w.Pool, w.StorageClass, w.Size = verdictTenant, golden, "kubernetes-"+w.Name, "replicated", "20Gi"
		if _, err := c.CreateWorkerDisk(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	rec := waitVerdict(t, ctx, c, verdictTenant, "template", record.VerdictCSIClone, 3*time.Minute)
	assertReasons(t, "template", rec, nil)
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(verdictTenant).Get(ctx, "template", metav1.GetOptions{})
	if err != nil || !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
		t.Errorf("template: CDI gave the claim %v (%v), want ReadWriteMany from the StorageProfile", pvc.Spec.AccessModes, err)
	}
	rec = waitRecord(t, ctx, c, verdictTenant, "rwo", 3*time.Minute, "a csi-clone flagged not-read-write-many", func(r *record.Record) bool {
		return r.Verdict == record.VerdictCSIClone && slices.Contains(r.BadReasons(), record.ReasonNotReadWriteMany)
	})
	assertReasons(t, "rwo", rec, []string{record.ReasonNotReadWriteMany})
	if msg := rec.MessageFor(record.ReasonNotReadWriteMany); !strings.Contains(msg, "ReadWriteOnce, not ReadWriteMany") {
		t.Errorf("rwo: the finding says %q", msg)
	}
	waitMetrics(t, ctx, c, func(s scrape) error {
		got, _ := s.value("csi_clone_bad_disks", map[string]string{"reason": record.ReasonNotReadWriteMany})
		if all, _ := s.value("csi_clone_bad_disks", nil); got != 1 || all != 1 {
			return fmt.Errorf("csi_clone_bad_disks{reason=%q} = %v of %v, want the one disk", record.ReasonNotReadWriteMany, got, all)
		}
		return nil
	})
	waitWarnings(t, ctx, c, "rwo", []string{record.ReasonNotReadWriteMany})
}

// waitClonePathModes waits until the report's clone paths give golden's
// pair on each class the access modes want, flagged exactly when they leave
// out ReadWriteMany.
func waitClonePathModes(t *testing.T, ctx context.Context, c *cluster.Cluster, golden string, want map[string][]string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		rep, _ := reportJSON(t, ctx, c)
		found := 0
		last = ""
		for _, p := range rep.ClonePaths {
			modes, ok := want[p.StorageClass]
			if p.Golden != golden || !ok {
				continue
			}
			last += fmt.Sprintf("%s: %s %v %v; ", p.StorageClass, p.Path, p.AccessModes, p.Flags)
			if slices.Equal(p.AccessModes, modes) && p.HasFlag(predict.FlagNotReadWriteMany) == !slices.Contains(modes, predict.ReadWriteMany) &&
				p.Path == predict.PathCSIClone {
				found++
			}
		}
		return found == len(want), nil
	})
	if err != nil {
		t.Fatalf("clone paths of %s never showed access modes %v: %v (last: %s)", golden, want, err, last)
	}
}

// waitWarnings waits until the DataVolume carries the Warning events of
// reasons (assertWarnings: one each, nothing else).
func waitWarnings(t *testing.T, ctx context.Context, c *cluster.Cluster, name string, reasons []string) {
	t.Helper()
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(verdictTenant).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		return err == nil && len(evs.Items) > 0, nil
	})
	assertWarnings(t, ctx, c, name, reasons)
}

var accessGuardFlavor = strings.Repeat("a7", 32)

// TestAdmissionWarnsAboutWorkerDisksWithoutReadWriteMany applies
// deploy/admission/deny and checks the worker access-mode warning it
// carries: a worker disk whose claim would lack ReadWriteMany, named so or
// rendered so by CDI from the class's StorageProfile, is admitted with a
// warning naming its access modes and the fix, even with the guard in Deny
// (its clone is a storage-layer clone all the same); one with
// ReadWriteMany, and a vm-disk of another golden whatever its modes, are
// admitted silently. The sidecar runs with --admission-allow-class-mismatch,
// so a disk onto the ReadWriteOnce class is not the guard's to refuse.
func TestAdmissionWarnsAboutWorkerDisksWithoutReadWriteMany(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{
			{Name: "replicated", DefaultVirt: true},
			{Name: "replicated-rwo", Pool: "rwo"},
		},
		SidecarArgs:      []string{"--resync-period=2s", "--admission-params=true", "--admission-allow-class-mismatch"},
		ExtraControllers: []string{"validatingadmissionpolicy-status-controller"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	mergePatch(t, ctx, c, cluster.StorageProfileGVR, "replicated-rwo",
		`{"spec":{"claimPropertySets":[{"accessModes":["ReadWriteOnce"],"volumeMode":"Block"}]}}`)
	golden := admissionGolden(t, ctx, c, accessGuardFlavor)
	const image = "ubuntu"
	if _, err := c.CreateVMImage(ctx, cluster.VMImage{Image: image, StorageClass: "replicated", Size: "5Gi"}); err != nil {
		t.Fatal(err)
	}
	imageGolden := cluster.VMImageGoldenName(image)
	waitPhase(t, ctx, c, cluster.NamespaceGolden, imageGolden, cdiv1.Succeeded)
	createDataSource(t, ctx, c, admissionTenant, "worker-ds", cluster.NamespaceGolden, golden)
	waitAdmissionParams(t, ctx, c, golden+".worker", "true")
	waitAdmissionParams(t, ctx, c, "class.replicated-rwo.accessModes", "ReadWriteOnce")
	waitAdmissionParams(t, ctx, c, imageGolden+".phase", "Succeeded")

	applyAdmission(t, c, "deny")
	checkTypeChecking(t, ctx, c, admissionPolicy)
	checkTypeChecking(t, ctx, c, accessModesPolicy)
	a := newAdmissionClient(t, c)
	warning := func(name, modes, class string) []string {
		return []string{"worker disk " + name + " of golden " + golden + " would get access modes " + modes + " on StorageClass " + class +
			", not ReadWriteMany: its VM cannot live-migrate (the verdict flags not-read-write-many). Fix: " + record.Fix(record.ReasonNotReadWriteMany)}
	}
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	// Shapes of the disk's spec.storage (nil: ReadWriteMany Block as named).
	fromProfile := func(s *cdiv1.StorageSpec) { s.AccessModes, s.VolumeMode = nil, nil } // the worker template's
	blockFromProfile := func(s *cdiv1.StorageSpec) { s.AccessModes = nil }
	namedRWO := func(s *cdiv1.StorageSpec) { s.AccessModes = rwo }
	cases := []struct {
		name, golden, class string
		shape               func(*cdiv1.StorageSpec)
		want                []string
	}{
		{"template", golden, "replicated", fromProfile, nil},
		{"template-rwo", golden, "replicated-rwo", fromProfile, warning("template-rwo", "ReadWriteOnce", "replicated-rwo")},
		{"block-rwo", golden, "replicated-rwo", blockFromProfile, warning("block-rwo", "ReadWriteOnce", "replicated-rwo")},
		{"named-rwo", golden, "replicated", namedRWO, warning("named-rwo", "ReadWriteOnce", "replicated")},
		{"named-rwx", golden, "replicated-rwo", nil, nil},
		{"via-datasource-rwo", dataSourcePrefix + "worker-ds", "replicated", namedRWO, warning("via-datasource-rwo", "ReadWriteOnce", "replicated")},
		// A vm-disk is no worker disk: no live migration is promised.
		{"vm-disk-rwo", imageGolden, "replicated-rwo", fromProfile, nil},
	}
	waitGuard(t, ctx, c, func() (bool, string) {
		dv := workerDataVolume("probe", golden, "replicated", "20Gi", nil)
		namedRWO(dv.Spec.Storage)
		w, err := a.createDataVolume(ctx, dv, false)
		return err == nil && len(w) > 0, fmt.Sprintf("warnings %q, error %v", w, err)
	})
	for _, tc := range cases {
		dv := workerDataVolume(tc.name, tc.golden, tc.class, "20Gi", nil)
		if tc.shape != nil {
			tc.shape(dv.Spec.Storage)
		}
		warnings, err := a.createDataVolume(ctx, dv, false)
		if err != nil {
			t.Errorf("%s refused with the guard in Deny: %v", tc.name, err)
		}
		checkMessages(t, tc.name, warnings, tc.want)
	}
}

const accessModesPolicy = "csi-clone-sidecar-worker-access-modes"
