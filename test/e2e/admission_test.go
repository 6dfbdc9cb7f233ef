package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The admission tests apply deploy/admission to the loopback API server,
// whose real ValidatingAdmissionPolicy evaluates it against the parameters
// the sidecar writes, and create DataVolumes through a client that records
// the warnings the API server returns.

const admissionTenant = "tenant-admission"

var admissionFlavor = strings.Repeat("ad", 32)

// warningRecorder is a rest.WarningHandler keeping what it is told.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.msgs = append(w.msgs, text)
	w.mu.Unlock()
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// admissionClient creates DataVolumes and reports the API server's answer.
type admissionClient struct {
	dyn      dynamic.Interface
	warnings *warningRecorder
}

func newAdmissionClient(t *testing.T, c *cluster.Cluster) *admissionClient {
	t.Helper()
	rec := &warningRecorder{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = rec
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionClient{dyn: dyn, warnings: rec}
}

// create creates a worker disk DataVolume cloning golden (dry run unless
// persist), with the per-disk annotations ann, and returns the warnings and
// the error.
func (a *admissionClient) create(ctx context.Context, name, golden, class, size string, persist bool, ann map[string]string) ([]string, error) {
	return a.createDataVolume(ctx, workerDataVolume(name, golden, class, size, ann), persist)
}

// workerDataVolume is a ReadWriteMany Block worker disk of the tenant
// cloning golden (a name with dataSourcePrefix: through that DataSource; as
// "<namespace>/<name>", the disk is in that namespace with it; with
// snapshotPrefix: restoring that golden VolumeSnapshot) on class (""
// none) at size ("" none), with the per-disk annotations ann.
func workerDataVolume(name, golden, class, size string, ann map[string]string) *cdiv1.DataVolume {
	block := corev1.PersistentVolumeBlock
	dv := &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: admissionTenant, Name: name, Annotations: map[string]string{cluster.AnnPool: "kubernetes-" + name}},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: cluster.NamespaceGolden, Name: golden}},
			Storage: &cdiv1.StorageSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, VolumeMode: &block},
		},
	}
	for k, v := range ann {
		dv.Annotations[k] = v
	}
	if size != "" { // none: CDI sizes the disk at the golden
		dv.Spec.Storage.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}
	}
	if class != "" {
		dv.Spec.Storage.StorageClassName = &class
	}
	if ds, ok := strings.CutPrefix(golden, dataSourcePrefix); ok { // through a DataSource
		if ns, name, ok := strings.Cut(ds, "/"); ok {
			dv.Namespace, ds = ns, name
		}
		dv.Spec.Source, dv.Spec.SourceRef = nil, &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Name: ds}
	}
	if vs, ok := strings.CutPrefix(golden, snapshotPrefix); ok {
		dv.Spec.Source = &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: cluster.NamespaceGolden, Name: vs}}
	}
	return dv
}

// createDataVolume creates dv (dry run unless persist) and returns the
// warnings and the error.
func (a *admissionClient) createDataVolume(ctx context.Context, dv *cdiv1.DataVolume, persist bool) ([]string, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dv)
	if err != nil {
		return nil, err
	}
	opts := metav1.CreateOptions{}
	if !persist {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	a.warnings.take()
	_, err = a.dyn.Resource(cluster.DataVolumeGVR).Namespace(dv.Namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, opts)
	return a.warnings.take(), err
}

// dataSourcePrefix marks an admissionCase golden that is a DataSource's
// name: the DataVolume clones through spec.sourceRef.
const dataSourcePrefix = "datasource:"

// snapshotPrefix marks an admissionCase golden that is a golden
// VolumeSnapshot's name: the DataVolume restores it (spec.source.snapshot).
const snapshotPrefix = "snapshot:"

// createDataSource makes a DataSource in namespace ns naming the PVC
// pvcNamespace/golden and waits until the parameters know it. Its CRD
// requires spec.source.pvc.namespace but takes an empty one.
func createDataSource(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name, pvcNamespace, golden string) {
	t.Helper()
	pvc := map[string]any{"name": golden, "namespace": pvcNamespace}
	ds := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"source": map[string]any{"pvc": pvc}}}}
	gvr := cluster.DataVolumeGVR.GroupVersion().WithResource("datasources")
	if _, err := c.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAdmissionParams(t, ctx, c, "dataSource."+ns+"."+name, pvcNamespace+"/"+golden)
}

// admissionCase is one DataVolume and what the guard must say about it.
type admissionCase struct {
	name, golden, class, size string
	// want are substrings of the one message per broken rule, in order;
	// none: admitted silently.
	want []string
	// ann are per-disk annotations CDI reads (cdirules.PerDisk).
	ann map[string]string
}

// create submits the case's DataVolume as name (dry run unless persist).
func (tc admissionCase) create(ctx context.Context, a *admissionClient, name string, persist bool) ([]string, error) {
	return a.create(ctx, name, tc.golden, tc.class, tc.size, persist, tc.ann)
}

// TestAdmissionGuardWarnsDeniesAndFailsOpen applies deploy/admission/warn,
// then deploy/admission/deny, on the loopback API server with the sidecar
// keeping the parameters current, then stops the sidecar and deletes them.
func TestAdmissionGuardWarnsDeniesAndFailsOpen(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{
			{Name: "replicated", DefaultVirt: true},
			{Name: "replicated-fixed", Pool: "fixed", NoExpansion: true},
			{Name: "replicated-b", Pool: "b"},
		},
		SidecarArgs: []string{"--resync-period=2s", "--admission-params=true"},
		// Type-checks the policy's CEL against the DataVolume schema and
		// writes what it finds in the policy's status.
		ExtraControllers: []string{"validatingadmissionpolicy-status-controller"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	golden := admissionGolden(t, ctx, c, admissionFlavor)
	waitAdmissionParams(t, ctx, c, golden+".path.replicated-fixed", "host-assisted/no-volume-expansion")
	a := newAdmissionClient(t, c)
	// A class other than the golden's is a cross-class clone: the guard
	// says so after any other message (its verdict flags class-mismatch).
	mismatch := func(class string) string {
		return "would be on StorageClass " + class + ", not on golden " + golden + "'s replicated: CDI asks the driver for a cross-class clone"
	}
	snapshotMismatch := func(class string) string {
		return "would be on StorageClass " + class + ", not on golden VolumeSnapshot " + admissionSnapshot + "'s replicated"
	}
	cases := []admissionCase{
		{"good", golden, "replicated", "20Gi", nil, nil},
		{"good-default", golden, "", "20Gi", nil, nil}, // the virtualization default is the golden's class
		// CDI CSI-clones these, but into another class than the golden's:
		// only the class is named, never the path.
		{"same-size-fixed", golden, "replicated-fixed", "6Gi", []string{mismatch("replicated-fixed")}, nil},
		{"sizeless-fixed", golden, "replicated-fixed", "", []string{mismatch("replicated-fixed")}, nil},
		{"mismatched", golden, "replicated-b", "20Gi", []string{mismatch("replicated-b")}, nil},
		// A golden the parameters do not know (yet): admitted.
		{"no-golden", cluster.GoldenName("0000", "v1.0.0"), "replicated", "20Gi", nil, nil},
		{"too-small", golden, "replicated", "2Gi", []string{"CDI will take path blocked (reason target-too-small) for golden " + golden}, nil},
		{"host-assisted", golden, "replicated-fixed", "20Gi", []string{
			"CDI will take path host-assisted (reason no-volume-expansion) for golden " + golden + " on StorageClass replicated-fixed, not a CSI clone. Fix: set allowVolumeExpansion: true",
			mismatch("replicated-fixed")}, nil},
		{"missing-class", golden, "no-such-class", "20Gi", []string{"would be on StorageClass no-such-class, which does not exist"}, nil},
		// Through a DataSource naming the golden: checked the same.
		{"via-datasource", dataSourcePrefix + "golden-ds", "replicated-fixed", "20Gi", []string{
			"CDI will take path host-assisted (reason no-volume-expansion) for golden " + golden + " on StorageClass replicated-fixed",
			mismatch("replicated-fixed")}, nil},
		{"via-datasource-good", dataSourcePrefix + "golden-ds", "replicated", "20Gi", nil, nil},
		// A DataSource naming the golden without a namespace, used by a
		// disk in the golden's namespace: CDI finds the golden there, makes
		// the claim, then fails every sync creating its VolumeCloneSource
		// (cdirules.ErrEmptySourceNamespace).
		{"via-datasource-unqualified", dataSourcePrefix + cluster.NamespaceGolden + "/golden-ds-unqualified", "replicated", "20Gi", []string{
			"CDI will take path blocked (reason source-namespace-unset) for golden " + golden + " on StorageClass replicated"}, nil},
		// Per-disk annotations: usePopulator "false" is CDI's legacy
		// host-assisted path even on the golden's class (Cozystack's worker
		// template sets it); cloneType csi-clone is obeyed as is, so a disk
		// at the golden's size is CSI-cloned and admitted.
		{"use-populator-false", golden, "replicated", "20Gi", []string{
			"CDI will take path host-assisted (reason populator-off) for golden " + golden + " on StorageClass replicated"},
			map[string]string{cdirules.AnnUsePopulator: "false"}},
		{"use-populator-garbage", golden, "replicated", "20Gi", []string{
			"CDI will take path blocked (reason use-populator-invalid)"}, map[string]string{cdirules.AnnUsePopulator: "no"}},
		{"clone-type-csi-clone", golden, "replicated-fixed", "6Gi", []string{mismatch("replicated-fixed")},
			map[string]string{cdirules.AnnCloneType: cdirules.StrategyCSIClone}},
		// Obeyed larger than the golden on a class without expansion, it
		// fails in CDI's PrepClaim phase (the resize is refused).
		{"clone-type-csi-clone-larger", golden, "replicated-fixed", "20Gi", []string{
			"CDI will take path blocked (reason clone-type-no-expansion) for golden " + golden + " on StorageClass replicated-fixed",
			mismatch("replicated-fixed")},
			map[string]string{cdirules.AnnCloneType: cdirules.StrategyCSIClone}},
		{"clone-type-copy", golden, "replicated", "20Gi", []string{"CDI will take path host-assisted (reason clone-type-copy)"},
			map[string]string{cdirules.AnnCloneType: cdirules.StrategyCopy}},
		// Restores of a golden VolumeSnapshot (cut from the golden's claim,
		// on its class), directly or through a DataSource: judged against
		// the snapshot, apart from the golden DataVolume.
		{"snapshot-good", snapshotPrefix + admissionSnapshot, "replicated", "20Gi", nil, nil},
		{"snapshot-mismatched", snapshotPrefix + admissionSnapshot, "replicated-b", "20Gi", []string{snapshotMismatch("replicated-b")}, nil},
		{"snapshot-host-assisted", snapshotPrefix + admissionSnapshot, "replicated-fixed", "20Gi", []string{
			"CDI will take path host-assisted (reason no-volume-expansion) for golden VolumeSnapshot " + admissionSnapshot + " on StorageClass replicated-fixed",
			snapshotMismatch("replicated-fixed")}, nil},
		{"snapshot-via-datasource", dataSourcePrefix + "golden-snapshot-ds", "replicated-fixed", "20Gi", []string{
			"CDI will take path host-assisted (reason no-volume-expansion) for golden VolumeSnapshot " + admissionSnapshot + " on StorageClass replicated-fixed",
			snapshotMismatch("replicated-fixed")}, nil},
	}

	createDataSource(t, ctx, c, admissionTenant, "golden-ds", cluster.NamespaceGolden, golden)
	createDataSource(t, ctx, c, cluster.NamespaceGolden, "golden-ds-unqualified", "", golden)
	snapshotAdmissionGolden(t, ctx, c, golden, "golden-snapshot-ds")
	applyAdmission(t, c, "warn")
	checkTypeChecking(t, ctx, c, admissionPolicy)
	waitGuard(t, ctx, c, func() (bool, string) {
		w, err := a.create(ctx, "probe", golden, "replicated-fixed", "20Gi", false, nil)
		return err == nil && len(w) > 0, fmt.Sprintf("warnings %q, error %v", w, err)
	})
	for _, tc := range cases {
		persist := tc.name == "mismatched" || tc.name == "good" || tc.name == heldByCDI
		warnings, err := tc.create(ctx, a, tc.name, persist)
		if err != nil {
			t.Errorf("warn mode: %s refused: %v", tc.name, err)
		}
		checkMessages(t, "warn mode: "+tc.name, warnings, tc.want)
	}
	checkWarnedWithoutTheClient(t, ctx, c, heldByCDI)

	applyAdmission(t, c, "deny")
	waitGuard(t, ctx, c, func() (bool, string) {
		_, err := a.create(ctx, "probe", golden, "replicated-fixed", "20Gi", false, nil)
		return apierrors.IsInvalid(err), fmt.Sprintf("error %v", err)
	})
	for _, tc := range cases {
		warnings, err := tc.create(ctx, a, tc.name+"-deny", false)
		if len(warnings) > 0 {
			t.Errorf("deny mode: %s got warnings %q", tc.name, warnings)
		}
		var got []string
		if err != nil {
			got = []string{err.Error()}
		}
		if len(tc.want) > 0 && !apierrors.IsInvalid(err) {
			t.Errorf("deny mode: %s not refused as Invalid: %v", tc.name, err)
		}
		checkMessages(t, "deny mode: "+tc.name, got, firstWant(tc.want))
	}
	checkSnapshotGuardIsTheModel(t, ctx, c, a)

	// A broken sidecar must never block VM creation: with it stopped and
	// its parameters gone, the guard admits even what it would refuse.
	if err := c.StopSidecar(); err != nil {
		t.Fatal(err)
	}
	checkClassMismatchAllowed(t, ctx, c, a, golden)
	if err := c.Client.CoreV1().ConfigMaps(cluster.NamespaceCSI).Delete(ctx, publish.AdmissionParamsName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGuard(t, ctx, c, func() (bool, string) {
		w, err := a.create(ctx, "probe", golden, "replicated-fixed", "20Gi", false, nil)
		return err == nil && len(w) == 0, fmt.Sprintf("warnings %q, error %v", w, err)
	})
	for _, tc := range cases {
		warnings, err := tc.create(ctx, a, tc.name+"-open", tc.name == "mismatched")
		if err != nil || len(warnings) > 0 {
			t.Errorf("parameters deleted: %s not admitted silently: %v %q", tc.name, err, warnings)
		}
	}
}

// admissionSnapshot is the golden VolumeSnapshot the guard is asked about.
const admissionSnapshot = "golden-snapshot"

// snapshotAdmissionGolden snapshots the golden's claim as a golden
// VolumeSnapshot, publishes a DataSource of it in the tenant, and waits
// until the parameters know both.
func snapshotAdmissionGolden(t *testing.T, ctx context.Context, c *cluster.Cluster, golden, dataSource string) {
	t.Helper()
	if _, err := c.SnapshotClaim(ctx, cluster.NamespaceGolden, admissionSnapshot, golden, "snap", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.PublishSnapshotDataSource(ctx, admissionTenant, dataSource, cluster.NamespaceGolden, admissionSnapshot); err != nil {
		t.Fatal(err)
	}
	key := publish.SnapshotGoldenKey(admissionSnapshot)
	waitParamsHold(t, ctx, c, map[string]string{key + ".class": "replicated",
		"dataSource." + admissionTenant + "." + dataSource: cluster.NamespaceGolden + "/" + key})
}

// checkSnapshotGuardIsTheModel asks the guard in Deny about restores of the
// golden VolumeSnapshot on every class, without a size, below, at and above
// its restore size, and holds each answer to the model's
// (predict.Prediction.GuardRefuses) for the golden as the sidecar reads it
// (fleet.ReadSnapshot) and the live configuration: the policy's CEL and
// the model must agree on snapshot goldens as on golden DataVolumes.
func checkSnapshotGuardIsTheModel(t *testing.T, ctx context.Context, c *cluster.Cluster, a *admissionClient) {
	t.Helper()
	snap, err := readDiffSnapshot(ctx, c, cluster.NamespaceGolden, admissionSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	g := predict.Golden{Namespace: cluster.NamespaceGolden, Name: admissionSnapshot, Class: "replicated", Phase: "Succeeded", Driver: snap.Driver,
		VolumeMode: snap.SourceVolumeMode, CapacityBytes: snap.RestoreBytes, RequestedBytes: snap.RestoreBytes, Snapshot: &snap}
	s := predict.NewState(liveInputs(t, ctx, c))
	sizes := []int64{0, 1 << 30, snap.RestoreBytes, 20 << 30}
	refusals := 0
	for _, class := range s.ClassNames() {
		for _, bytes := range sizes {
			size := ""
			if bytes > 0 {
				size = resource.NewQuantity(bytes, resource.BinarySI).String()
			}
			p := s.Predict(g, predict.Target{Class: class, Kind: cdirules.KindStorage, VolumeMode: cdirules.Block,
				AccessModes: []string{string(corev1.ReadWriteMany)}, Bytes: bytes})
			_, err := a.createDataVolume(ctx, workerDataVolume("snapshot-probe", snapshotPrefix+admissionSnapshot, class, size, nil), false)
			refused := apierrors.IsInvalid(err)
			if err != nil && !refused {
				t.Fatalf("restore onto %s at %q: %v", class, size, err)
			}
			if refused {
				refusals++
			}
			if refused != p.GuardRefuses(predict.GuardRules{}) {
				t.Errorf("restore of golden VolumeSnapshot onto %s at %q: the guard refused=%v, the model predicts %s/%s, flags %v",
					class, size, refused, p.Path, p.Reason, p.Flags)
			}
		}
	}
	total := len(s.ClassNames()) * len(sizes)
	t.Logf("restores of the golden VolumeSnapshot: the guard refused %d of %d", refusals, total)
	if refusals == 0 || refusals == total {
		t.Errorf("the guard refused %d of %d restores: no contrast to compare the model with", refusals, total)
	}
}

// checkClassMismatchAllowed: with the parameter rule.class-mismatch
// "allow" (the sidecar's --admission-allow-class-mismatch; the sidecar is
// stopped, so it does not write its own value back), the Deny guard admits
// a disk onto another class of the golden's driver, and still refuses a
// host-assisted one, naming only its path.
func checkClassMismatchAllowed(t *testing.T, ctx context.Context, c *cluster.Cluster, a *admissionClient, golden string) {
	t.Helper()
	patch := []byte(`{"data":{"rule.class-mismatch":"allow"}}`)
	if _, err := c.Client.CoreV1().ConfigMaps(cluster.NamespaceCSI).Patch(ctx, publish.AdmissionParamsName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGuard(t, ctx, c, func() (bool, string) {
		w, err := a.create(ctx, "probe", golden, "replicated-b", "20Gi", false, nil)
		return err == nil && len(w) == 0, fmt.Sprintf("warnings %q, error %v", w, err)
	})
	_, err := a.create(ctx, "host-assisted-allowed", golden, "replicated-fixed", "20Gi", false, nil)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "CDI will take path host-assisted") || strings.Contains(err.Error(), "cross-class") {
		t.Errorf("class mismatch allowed: a host-assisted disk refused with %v, want its path only", err)
	}
}

// heldByCDI is the case persisted in Warn mode that CDI never makes (its
// class does not exist), so it stays pending.
const heldByCDI = "missing-class"

// checkWarnedWithoutTheClient: a DataVolume the guard warned about, as a
// controller would make it (the warning went to the client, no one read
// it), carries the sidecar's BadClonePathPredicted Warning naming the fix,
// and csi_clone_bad_disks counts it, while it is pending.
func checkWarnedWithoutTheClient(t *testing.T, ctx context.Context, c *cluster.Cluster, name string) {
	t.Helper()
	reason := record.EventReason(record.ReasonBadPathPredicted)
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(admissionTenant).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == reason && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "Fix: ") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("warn mode: %s: no %s Warning event naming a fix: %v", name, reason, err)
	}
	waitMetrics(t, ctx, c, func(s scrape) error {
		if v, ok := s.value("csi_clone_bad_disks", map[string]string{"namespace": admissionTenant, "reason": record.ReasonBadPathPredicted}); !ok || v != 1 {
			return fmt.Errorf("csi_clone_bad_disks{namespace=%q,reason=%q} = %v (present %v), want 1", admissionTenant, record.ReasonBadPathPredicted, v, ok)
		}
		return nil
	})
}

// admissionGolden imports the golden of flavor on class replicated, waits
// for it, makes the tenant namespace and returns the golden's name.
func admissionGolden(t *testing.T, ctx context.Context, c *cluster.Cluster, flavor string) string {
	t.Helper()
	golden := cluster.GoldenName(flavor, talosVersion)
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavor, Version: talosVersion, StorageClass: "replicated"})
	waitPhase(t, ctx, c, cluster.NamespaceGolden, golden, cdiv1.Succeeded)
	if err := c.CreateNamespace(ctx, admissionTenant); err != nil {
		t.Fatal(err)
	}
	return golden
}

// firstWant: in Deny mode the error carries the first broken rule's message.
func firstWant(want []string) []string {
	if len(want) == 0 {
		return nil
	}
	return want[:1]
}

// checkMessages: one message per wanted one, each containing it and naming
// a fix; none when none is wanted.
func checkMessages(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(want) == 0 {
		if len(got) > 0 {
			t.Errorf("%s: want silence, got %q", what, got)
		}
		return
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d messages %q, want %d", what, len(got), got, len(want))
		return
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) || !strings.Contains(got[i], "Fix: ") {
			t.Errorf("%s: message %q does not say %q and name a fix", what, got[i], w)
		}
	}
}

// applyAdmission applies deploy/admission/<variant> as docs/predict.md says.
func applyAdmission(t *testing.T, c *cluster.Cluster, variant string) {
	t.Helper()
	cache, err := os.MkdirTemp(c.Dir, "kubectl-cache-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, c, cache, "apply", "-k", deployDir+"/admission/"+variant); err != nil {
		t.Fatalf("kubectl apply -k deploy/admission/%s: %v\n%s", variant, err, out)
	}
}

// waitGuard waits until the API server enforces what probe checks
// (policies and their parameters reach the admission plugin through
// informers); on failure it shows the last probe and the policy's status.
func waitGuard(t *testing.T, ctx context.Context, c *cluster.Cluster, probe func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		ok, what := probe()
		last = what
		return ok, nil
	})
	if err != nil {
		status := "unreadable"
		if p, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, admissionPolicy, metav1.GetOptions{}); err == nil {
			status = fmt.Sprintf("%+v", p.Status)
		}
		t.Fatalf("the guard never took effect: %v; last probe: %s; policy status: %s", err, last, status)
	}
}

const admissionPolicy = "csi-clone-sidecar-golden-clones"

// checkTypeChecking waits for kube-controller-manager's type check of the
// policy and fails on any warning it reports.
func checkTypeChecking(t *testing.T, ctx context.Context, c *cluster.Cluster, policy string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
			return false, nil
		}
		for _, w := range p.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("policy %s type check: %s: %s", policy, w.FieldRef, w.Warning)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the policy was never type-checked: %v", err)
	}
}

// waitAdmissionParams waits until the sidecar's parameters hold key=want.
func waitAdmissionParams(t *testing.T, ctx context.Context, c *cluster.Cluster, key, want string) {
	t.Helper()
	waitParamsHold(t, ctx, c, map[string]string{key: want})
}

// waitParamsHold waits until the sidecar's parameters hold every key=value
// of want, and fails naming the first that never did.
func waitParamsHold(t *testing.T, ctx context.Context, c *cluster.Cluster, want map[string]string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := c.Client.CoreV1().ConfigMaps(cluster.NamespaceCSI).Get(ctx, publish.AdmissionParamsName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for k, v := range want {
			if cm.Data[k] != v {
				last = fmt.Sprintf("%s=%q, want %q", k, cm.Data[k], v)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the admission parameters never held what they should: %s", last)
	}
}
