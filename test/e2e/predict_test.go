package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The prediction tests record what the sidecar predicts for a (golden,
// class) pair from its metrics before any disk of the pair exists, then
// create the disk and compare with the verdict the real CDI and the driver
// produce.

const (
	otherDriver = "other.csi.test"
	otherClass  = "other-driver"
)

var predictFlavor = strings.Repeat("5c", 32)

// predictedPair is one (class, expected prediction) and the disk made on it.
type predictedPair struct {
	class, disk string // class "" is a disk that names none
	want        string // expected "path/reason" of csi_clone_path_predicted
}

// TestClonePathPredictedBeforeTheDiskIsMade walks CDI's decision through
// every path: the golden's class, a class without expansion, another class
// of the driver, a node-local class, a class of another CSI driver, the
// empty class under each default arrangement, then a snapshot-strategy
// StorageProfile without and with a VolumeSnapshotClass. For each, the
// prediction scraped before the disk exists must be the path the verdict
// shows, and no disk may carry prediction-wrong.
func TestClonePathPredictedBeforeTheDiskIsMade(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{
			{Name: "replicated", DefaultVirt: true},
			{Name: "replicated-fixed", Pool: "fixed", NoExpansion: true},
			{Name: "replicated-b", Pool: "b", Default: true},
			{Name: "local", NodeLocal: true},
		},
		DriverArgs:  []string{"--node-local-clone=fail"},
		SidecarArgs: []string{"--resync-period=2s", "--stuck-after=" + stuckAfter.String(), "--evidence-grace=3s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := c.StartOtherDriver(ctx, otherDriver, cluster.StorageClass{Name: otherClass}); err != nil {
		t.Fatal(err)
	}
	// CDI's storagecapabilities table does not know the second driver, so
	// its StorageProfile offers no claimPropertySets and CDI could not
	// render the platform's template disk (naming neither volume mode nor
	// access modes) on its class: the pair would be blocked/claim-invalid.
	// Its operator gives the profile one, as for any such driver.
	mergePatch(t, ctx, c, cluster.StorageProfileGVR, otherClass, `{"spec":{"claimPropertySets":[{"accessModes":["ReadWriteMany"],"volumeMode":"Block"}]}}`)
	golden := cluster.GoldenName(predictFlavor, talosVersion)
	createGolden(t, ctx, c, cluster.Golden{SchematicID: predictFlavor, Version: talosVersion, StorageClass: "replicated"})
	waitPhase(t, ctx, c, cluster.NamespaceGolden, golden, cdiv1.Succeeded)
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}
	checked := 0
	step := func(what string, pairs ...predictedPair) {
		t.Helper()
		checked += predictThenClone(t, ctx, c, golden, what, pairs)
	}
	step("csi-clone forced by the CDI resource",
		predictedPair{"replicated", "same", "csi-clone/cdi-override"},
		predictedPair{"replicated-fixed", "fixed", "host-assisted/no-volume-expansion"},
		predictedPair{"replicated-b", "other-class", "csi-clone/cdi-override"},
		predictedPair{"local", "local", "blocked/node-local-target"},
		predictedPair{otherClass, "other-driver", "host-assisted/incompatible-provisioners"},
		predictedPair{"", "empty-virt", "csi-clone/cdi-override"}) // the virtualization default, replicated
	setDefaultAnnotation(t, ctx, c, "replicated", "storageclass.kubevirt.io/is-default-virt-class", false)
	step("no virtualization default", predictedPair{"", "empty-k8s", "csi-clone/cdi-override"}) // the Kubernetes default, replicated-b
	setDefaultAnnotation(t, ctx, c, "replicated-b", "storageclass.kubernetes.io/is-default-class", false)
	step("no default at all", predictedPair{"", "empty-none", "blocked/class-unresolved"})

	// CDI's own choice: no override, the StorageProfile says snapshot.
	setCloneStrategyOverride(t, ctx, c, "")
	if err := c.SetStorageProfileCloneStrategy(ctx, "replicated", cluster.StrategySnapshot); err != nil {
		t.Fatal(err)
	}
	step("snapshot strategy, no VolumeSnapshotClass", predictedPair{"replicated", "snap-none", "host-assisted/no-volume-snapshot-class"})
	createSnapshotClass(t, ctx, c, "predict-snapshots")
	step("snapshot strategy with a VolumeSnapshotClass", predictedPair{"replicated", "snap", "snapshot-clone/storage-profile"})
	waitPredictionsRight(t, ctx, c, checked)
}

// waitPredictionsRight waits until the sidecar's metrics count checked
// predictions right and none wrong, and flag no disk prediction-wrong.
func waitPredictionsRight(t *testing.T, ctx context.Context, c *cluster.Cluster, checked int) {
	t.Helper()
	waitMetrics(t, ctx, c, func(s scrape) error {
		right, _ := s.value("csi_clone_prediction_checks", map[string]string{"result": "right"})
		wrong, _ := s.value("csi_clone_prediction_checks", map[string]string{"result": "wrong"})
		if wrong != 0 || right != float64(checked) {
			return fmt.Errorf("prediction checks right=%v wrong=%v, want %d right and 0 wrong", right, wrong, checked)
		}
		if n, ok := s.value("csi_clone_bad_disks", map[string]string{"reason": record.ReasonPredictionWrong}); ok {
			return fmt.Errorf("%v disks flagged prediction-wrong", n)
		}
		return nil
	})
}

// predictThenClone waits until the sidecar's metrics predict want for each
// pair, records that, creates the pairs' disks and checks each verdict
// against the recorded prediction. It returns the number of disks checked.
func predictThenClone(t *testing.T, ctx context.Context, c *cluster.Cluster, golden, what string, pairs []predictedPair) int {
	t.Helper()
	recorded := waitPredictions(t, ctx, c, predictFlavor, pairs)
	t.Logf("%s: predicted %v", what, recorded)
	for _, p := range pairs {
		createWorker(t, ctx, c, workerCase{name: p.disk, pool: "kubernetes-" + p.disk, flavor: predictFlavor, class: p.class, size: "20Gi"})
	}
	for _, p := range pairs {
		path, _, _ := strings.Cut(recorded[label(p.class)], "/")
		rec := waitRecordIn(t, ctx, c, p.disk, "a verdict showing a path", func(r *record.Record) bool {
			_, decided := verdictPath(r.Verdict)
			return decided
		})
		got, _ := verdictPath(rec.Verdict)
		if got != path {
			t.Errorf("%s (%s): predicted %s, verdict %s (%s)", p.disk, what, recorded[label(p.class)], rec.Verdict, rec.Message)
		}
		if rec.Predicted != path || strings.Contains(strings.Join(rec.BadReasons(), ","), record.ReasonPredictionWrong) {
			t.Errorf("%s: the record carries prediction %s/%s and reasons %v", p.disk, rec.Predicted, rec.PredictedReason, rec.BadReasons())
		}
		t.Logf("%s on %q: predicted %s, verdict %s from %s", p.disk, p.class, recorded[label(p.class)], rec.Verdict, rec.Source)
	}
	return len(pairs)
}

// waitPredictions waits until csi_clone_path_predicted gives each pair's
// class the wanted path/reason, and returns what it gives every class.
func waitPredictions(t *testing.T, ctx context.Context, c *cluster.Cluster, flavor string, pairs []predictedPair) map[string]string {
	t.Helper()
	var got map[string]string
	waitMetrics(t, ctx, c, func(s scrape) error {
		got = predictedPaths(s, flavor)
		var wrong []string
		for _, p := range pairs {
			if got[label(p.class)] != p.want {
				wrong = append(wrong, fmt.Sprintf("%s: %q, want %q", label(p.class), got[label(p.class)], p.want))
			}
		}
		if len(wrong) > 0 {
			return fmt.Errorf("predictions %s", strings.Join(wrong, "; "))
		}
		return nil
	})
	return got
}

// predictedPaths reads csi_clone_path_predicted of a flavor: class -> path/reason.
func predictedPaths(s scrape, flavor string) map[string]string {
	out := map[string]string{}
	mf := s["csi_clone_path_predicted"]
	if mf == nil {
		return out
	}
	for _, m := range mf.Metric {
		l := map[string]string{}
		for _, lp := range m.Label {
			l[lp.GetName()] = lp.GetValue()
		}
		if l["schematic_id"] == flavor {
			out[l["storage_class"]] = l["path"] + "/" + l["reason"]
		}
	}
	return out
}

func label(class string) string {
	if class == "" {
		return predict.EmptyClass
	}
	return class
}

// verdictPath is the path a decided verdict shows.
func verdictPath(verdict string) (string, bool) {
	switch verdict {
	case record.VerdictCSIClone, record.VerdictSnapshotClone, record.VerdictHostAssisted:
		return verdict, true
	case record.VerdictStuck, record.VerdictFailed:
		return predict.PathBlocked, true
	}
	return "", false
}

func waitRecordIn(t *testing.T, ctx context.Context, c *cluster.Cluster, name, what string, ok func(*record.Record) bool) *record.Record {
	t.Helper()
	return waitRecord(t, ctx, c, verdictTenant, name, 4*time.Minute, what, ok)
}

// setDefaultAnnotation sets or removes a default-class annotation.
func setDefaultAnnotation(t *testing.T, ctx context.Context, c *cluster.Cluster, class, key string, on bool) {
	t.Helper()
	v := "null"
	if on {
		v = `"true"`
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	if _, err := c.Client.StorageV1().StorageClasses().Patch(ctx, class, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setCloneStrategyOverride sets (or, with "", removes) the CDI resource's
// spec.cloneStrategyOverride.
func setCloneStrategyOverride(t *testing.T, ctx context.Context, c *cluster.Cluster, strategy string) {
	t.Helper()
	v := "null"
	if strategy != "" {
		v = fmt.Sprintf("%q", strategy)
	}
	patch := fmt.Sprintf(`{"spec":{"cloneStrategyOverride":%s}}`, v)
	if _, err := c.Dynamic.Resource(cluster.CDIGVR).Patch(ctx, "cdi", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createSnapshotClass(t *testing.T, ctx context.Context, c *cluster.Cluster, name string) {
	t.Helper()
	vsc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": name}, "driver": c.DriverName, "deletionPolicy": "Delete",
	}}
	if _, err := c.Dynamic.Resource(cluster.VolumeSnapshotClassGVR).Create(ctx, vsc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
