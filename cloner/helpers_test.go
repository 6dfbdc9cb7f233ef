package cloner

import (
	"fmt"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Test fixtures shaped as CDI, the PV controller and the provisioner shape
// them (domain.md section 2). They build objects; they do not fake behaviour.

const (
	testSID   = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	testVer   = "v1.13.2"
	testClass = "replicated"
	gi        = int64(1) << 30
)

var t0 = time.Date(2026, 11, 8, 12, 0, 0, 0, time.UTC)

func goldenName(sid, ver string) string { return "talos-worker-" + sid + "-" + ver }

// world is a set of cluster objects for one test.
type world struct {
	dvs    []*cdiv1.DataVolume
	raw    []*unstructured.Unstructured
	pvcs   []*corev1.PersistentVolumeClaim
	pvs    []*corev1.PersistentVolume
	scs    []*storagev1.StorageClass
	vscs   []*unstructured.Unstructured
	nextID int
}

func (w *world) uid(prefix string) types.UID {
	w.nextID++
	return types.UID(fmt.Sprintf("%s-0000-0000-0000-%012d", prefix, w.nextID))
}

func (w *world) class(name string, ann map[string]string, created time.Time) *storagev1.StorageClass {
	exp := true
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: name, Annotations: ann, CreationTimestamp: metav1.NewTime(created)},
		Provisioner:          "linstor.csi.linbit.com",
		AllowVolumeExpansion: &exp,
	}
	w.scs = append(w.scs, sc)
	return sc
}

func qty(b int64) resource.Quantity { return *resource.NewQuantity(b, resource.BinarySI) }

// dataVolume builds a DataVolume with spec.storage of the given size/class.
func (w *world) dataVolume(ns, name string, size int64, class *string) *cdiv1.DataVolume {
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: w.uid("dv"), Annotations: map[string]string{},
			CreationTimestamp: metav1.NewTime(t0)},
		Spec: cdiv1.DataVolumeSpec{Storage: &cdiv1.StorageSpec{
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: qty(size)}},
			StorageClassName: class,
		}},
	}
	w.dvs = append(w.dvs, dv)
	return dv
}

func succeed(dv *cdiv1.DataVolume, at time.Time) {
	dv.Status.Phase = cdiv1.Succeeded
	dv.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(at)}}
}

// claim builds the PVC CDI makes for a DataVolume; bound to a new PV when
// handle is not empty.
func (w *world) claim(dv *cdiv1.DataVolume, class string, request, capacity int64, handle string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	block := corev1.PersistentVolumeBlock
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: dv.Namespace, Name: dv.Name, UID: w.uid("pvc"), Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeMode: &block,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: qty(request)}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	w.pvcs = append(w.pvcs, pvc)
	if handle == "" {
		return pvc, nil
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(w.uid("pv")), Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName: class, VolumeMode: &block,
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: qty(capacity)},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "linstor.csi.linbit.com", VolumeHandle: handle}},
			ClaimRef:               &corev1.ObjectReference{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
		},
	}
	w.pvs = append(w.pvs, pv)
	pvc.Spec.VolumeName = pv.Name
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: qty(capacity)}
	return pvc, pv
}

// golden adds an imported golden of 6Gi on class testClass.
func (w *world) golden(sid, ver string) (*cdiv1.DataVolume, *corev1.PersistentVolume) {
	dv := w.dataVolume(config.DefaultGoldenNamespace, goldenName(sid, ver), 6*gi, publish.PtrTo(testClass))
	dv.Annotations[fleet.AnnSchematicID], dv.Annotations[fleet.AnnTalosVersion] = sid, ver
	dv.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{
		URL: "https://factory.talos.dev/image/" + sid + "/" + ver + "/openstack-amd64.raw.xz"}}
	succeed(dv, t0.Add(-time.Hour))
	_, pv := w.claim(dv, testClass, 6*gi, 6*gi, "golden-vol-"+fleet.Clip(sid, 8)+"-"+ver)
	return dv, pv
}

// worker adds a worker disk DataVolume cloning golden g.
func (w *world) worker(ns, name, pool string, g *cdiv1.DataVolume, size int64, class *string) *cdiv1.DataVolume {
	dv := w.dataVolume(ns, name, size, class)
	dv.Annotations[fleet.AnnGolden], dv.Annotations[fleet.AnnPool] = g.Name, pool
	dv.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: g.Namespace, Name: g.Name}}
	dv.Status.Phase = cdiv1.CloneScheduled
	return dv
}

// cloned finishes a worker as CDI does: claim bound to a volume, cloneType
// annotated, optional tap evidence on the PV.
func (w *world) cloned(dv *cdiv1.DataVolume, class, cloneType string, capacity int64, ev *fleet.VolumeEvidence) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	succeed(dv, t0.Add(time.Minute))
	pvc, pv := w.claim(dv, class, fleet.RequestedBytes(dv), capacity, "vol-"+dv.Name)
	if cloneType != "" {
		pvc.Annotations[fleet.AnnCDICloneType] = cloneType
	}
	if ev != nil {
		pv.Annotations[fleet.AnnCSIEvidence] = record.MustJSON(ev)
	}
	return pvc, pv
}

// tapClone is the evidence of a CSI clone of src grown to size.
func tapClone(src string, from, size int64) *fleet.VolumeEvidence {
	ev := &fleet.VolumeEvidence{Name: "pvc-x", Claim: "cozy-public/tmp-pvc-x", FirstAttempt: t0, Created: t0.Add(2 * time.Second),
		Attempts: 1, RequiredBytes: from, CapacityBytes: from, SourceVolume: src, Block: true}
	if size > from {
		ev.Expansions = []fleet.Expansion{{At: t0.Add(5 * time.Second), RequiredBytes: size, CapacityBytes: size, Code: "OK"}}
	}
	return ev
}

func (w *world) objects(t *testing.T) fleet.Objects {
	t.Helper()
	o := fleet.Objects{Claims: w.pvcs, Volumes: w.pvs, Classes: w.scs, SnapshotContents: w.vscs}
	for _, dv := range w.dvs {
		o.DataVolumes = append(o.DataVolumes, fleet.ReadDataVolume(toUnstructured(t, dv)))
	}
	for _, u := range w.raw {
		o.DataVolumes = append(o.DataVolumes, fleet.ReadDataVolume(u))
	}
	return o
}

func toUnstructured(t testing.TB, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// judgeAll evaluates the world at now with cfg and returns records by DV name.
func (w *world) judgeAll(t *testing.T, cfg config.Config, now time.Time) (map[string]*record.Record, *verdict.Evaluation) {
	t.Helper()
	inv := fleet.BuildInventory(w.objects(t), cfg.GoldenNamespace)
	ev := verdict.Evaluate(inv, cfg, now)
	out := map[string]*record.Record{}
	for _, a := range ev.Assessments {
		out[a.Disk.Name] = a.Record
	}
	return out, ev
}

func testConfig() config.Config {
	cfg := config.DefaultConfig()
	cfg.LedgerNamespace = "cozy-linstor"
	return cfg
}

// configAt is testConfig with its clock stopped at at.
func configAt(at time.Time) config.Config {
	cfg := testConfig()
	cfg.Now = newClock(at).now
	return cfg
}

func reasonsOf(r *record.Record) map[string]bool {
	out := map[string]bool{}
	for _, x := range r.BadReasons() {
		out[x] = true
	}
	return out
}
