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
