// Package clonertest builds the worlds the cloner's tests judge: goldens,
// worker disks, claims and volumes shaped as CDI, the PV controller and the
// provisioner shape them, and a settable clock. Only tests import it.
package clonertest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// Test fixtures shaped as CDI, the PV controller and the provisioner shape
// them (domain.md section 2). They build objects; they do not fake behaviour.

const (
	TestSID   = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	TestVer   = "v1.13.2"
	TestClass = "replicated"
	Gi        = int64(1) << 30
)

var T0 = time.Date(2026, 11, 8, 12, 0, 0, 0, time.UTC)

func GoldenName(sid, ver string) string { return "talos-worker-" + sid + "-" + ver }

// world is a set of cluster objects for one test.
type World struct {
	Dvs    []*cdiv1.DataVolume
	Raw    []*unstructured.Unstructured
	Pvcs   []*corev1.PersistentVolumeClaim
	Pvs    []*corev1.PersistentVolume
	Scs    []*storagev1.StorageClass
	Vscs   []*unstructured.Unstructured
	NextID int
}

func (w *World) uid(prefix string) types.UID {
	w.NextID++
	return types.UID(fmt.Sprintf("%s-0000-0000-0000-%012d", prefix, w.NextID))
}

func (w *World) Class(name string, ann map[string]string, created time.Time) *storagev1.StorageClass {
	exp := true
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: name, Annotations: ann, CreationTimestamp: metav1.NewTime(created)},
		Provisioner:          "linstor.csi.linbit.com",
		AllowVolumeExpansion: &exp,
	}
	w.Scs = append(w.Scs, sc)
	return sc
}

func Qty(b int64) resource.Quantity { return *resource.NewQuantity(b, resource.BinarySI) }

// dataVolume builds a DataVolume with spec.storage of the given size/class.
func (w *World) DataVolume(ns, name string, size int64, class *string) *cdiv1.DataVolume {
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: w.uid("dv"), Annotations: map[string]string{},
			CreationTimestamp: metav1.NewTime(T0)},
		Spec: cdiv1.DataVolumeSpec{Storage: &cdiv1.StorageSpec{
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: Qty(size)}},
			StorageClassName: class,
		}},
	}
	w.Dvs = append(w.Dvs, dv)
	return dv
}

func Succeed(dv *cdiv1.DataVolume, at time.Time) {
	dv.Status.Phase = cdiv1.Succeeded
	dv.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(at)}}
}

// claim builds the PVC CDI makes for a DataVolume; bound to a new PV when
// handle is not empty.
func (w *World) Claim(dv *cdiv1.DataVolume, class string, request, capacity int64, handle string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	block := corev1.PersistentVolumeBlock
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: dv.Namespace, Name: dv.Name, UID: w.uid("pvc"), Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeMode: &block,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: Qty(request)}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	w.Pvcs = append(w.Pvcs, pvc)
	if handle == "" {
		return pvc, nil
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(w.uid("pv")), Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName: class, VolumeMode: &block,
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: Qty(capacity)},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "linstor.csi.linbit.com", VolumeHandle: handle}},
			ClaimRef:               &corev1.ObjectReference{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
		},
	}
	w.Pvs = append(w.Pvs, pv)
	pvc.Spec.VolumeName = pv.Name
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: Qty(capacity)}
	return pvc, pv
}

// golden adds an imported golden of 6Gi on class testClass.
func (w *World) Golden(sid, ver string) (*cdiv1.DataVolume, *corev1.PersistentVolume) {
	dv := w.DataVolume(config.DefaultGoldenNamespace, GoldenName(sid, ver), 6*Gi, publish.PtrTo(TestClass))
	dv.Annotations[fleet.AnnSchematicID], dv.Annotations[fleet.AnnTalosVersion] = sid, ver
	dv.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{
		URL: "https://factory.talos.dev/image/" + sid + "/" + ver + "/openstack-amd64.raw.xz"}}
	Succeed(dv, T0.Add(-time.Hour))
	_, pv := w.Claim(dv, TestClass, 6*Gi, 6*Gi, "golden-vol-"+fleet.Clip(sid, 8)+"-"+ver)
	return dv, pv
}

// worker adds a worker disk DataVolume cloning golden g.
func (w *World) Worker(ns, name, pool string, g *cdiv1.DataVolume, size int64, class *string) *cdiv1.DataVolume {
	dv := w.DataVolume(ns, name, size, class)
	dv.Annotations[fleet.AnnGolden], dv.Annotations[fleet.AnnPool] = g.Name, pool
	dv.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: g.Namespace, Name: g.Name}}
	dv.Status.Phase = cdiv1.CloneScheduled
	return dv
}

// cloned finishes a worker as CDI does: claim bound to a volume, cloneType
// annotated, optional tap evidence on the PV.
func (w *World) Cloned(dv *cdiv1.DataVolume, class, cloneType string, capacity int64, ev *fleet.VolumeEvidence) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	Succeed(dv, T0.Add(time.Minute))
	pvc, pv := w.Claim(dv, class, fleet.RequestedBytes(dv), capacity, "vol-"+dv.Name)
	if cloneType != "" {
		pvc.Annotations[fleet.AnnCDICloneType] = cloneType
	}
	if ev != nil {
		pv.Annotations[fleet.AnnCSIEvidence] = record.MustJSON(ev)
	}
	return pvc, pv
}

// tapClone is the evidence of a CSI clone of src grown to size.
func TapClone(src string, from, size int64) *fleet.VolumeEvidence {
	ev := &fleet.VolumeEvidence{Name: "pvc-x", Claim: "cozy-public/tmp-pvc-x", FirstAttempt: T0, Created: T0.Add(2 * time.Second),
		Attempts: 1, RequiredBytes: from, CapacityBytes: from, SourceVolume: src, Block: true}
	if size > from {
		ev.Expansions = []fleet.Expansion{{At: T0.Add(5 * time.Second), RequiredBytes: size, CapacityBytes: size, Code: "OK"}}
	}
	return ev
}

func (w *World) Objects(t *testing.T) fleet.Objects {
	t.Helper()
	o := fleet.Objects{Claims: w.Pvcs, Volumes: w.Pvs, Classes: w.Scs, SnapshotContents: w.Vscs}
	for _, dv := range w.Dvs {
		o.DataVolumes = append(o.DataVolumes, fleet.ReadDataVolume(ToUnstructured(t, dv)))
	}
	for _, u := range w.Raw {
		o.DataVolumes = append(o.DataVolumes, fleet.ReadDataVolume(u))
	}
	return o
}

func ToUnstructured(t testing.TB, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// judgeAll evaluates the world at now with cfg and returns records by DV name.
func (w *World) JudgeAll(t *testing.T, cfg config.Config, now time.Time) (map[string]*record.Record, *verdict.Evaluation) {
	t.Helper()
	inv := fleet.BuildInventory(w.Objects(t), cfg.GoldenNamespaces())
	ev := verdict.Evaluate(inv, cfg, now)
	out := map[string]*record.Record{}
	for _, a := range ev.Assessments {
		out[a.Disk.Name] = a.Record
	}
	return out, ev
}

func TestConfig() config.Config {
	cfg := config.DefaultConfig()
	cfg.LedgerNamespace = "cozy-linstor"
	return cfg
}

// configAt is testConfig with its clock stopped at at.
func ConfigAt(at time.Time) config.Config {
	cfg := TestConfig()
	cfg.Now = NewClock(at).Now
	return cfg
}

func ReasonsOf(r *record.Record) map[string]bool {
	out := map[string]bool{}
	for _, x := range r.BadReasons() {
		out[x] = true
	}
	return out
}

// clock is a settable test clock.
type clock struct{ ns atomic.Int64 }

func NewClock(t time.Time) *clock { c := &clock{}; c.Set(t); return c }
func (c *clock) Set(t time.Time)  { c.ns.Store(t.UnixNano()) }
func (c *clock) Now() time.Time   { return time.Unix(0, c.ns.Load()).UTC() }

// condition sets a DataVolume condition as CDI's updateCondition does.
func Condition(dv *cdiv1.DataVolume, typ cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, reason, msg string, at time.Time) {
	c := cdiv1.DataVolumeCondition{Type: typ, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(at), LastHeartbeatTime: metav1.NewTime(at)}
	for i := range dv.Status.Conditions {
		if dv.Status.Conditions[i].Type == typ {
			dv.Status.Conditions[i] = c
			return
		}
	}
	dv.Status.Conditions = append(dv.Status.Conditions, c)
}

// pendingTarget is the disk's claim as CDI's populator path makes it:
// Pending, no volume, clone type chosen.
func (w *World) PendingTarget(dv *cdiv1.DataVolume) *corev1.PersistentVolumeClaim {
	pvc, _ := w.Claim(dv, TestClass, fleet.RequestedBytes(dv), 0, "")
	pvc.Annotations[fleet.AnnCDICloneType] = "csi-clone"
	return pvc
}

// tmpClaim is CDI's tmp-pvc-<target uid> in the golden's namespace, bound to
// a volume cloned from the golden, carrying the tap's evidence.
func (w *World) TmpClaim(target *corev1.PersistentVolumeClaim, ev *fleet.VolumeEvidence) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	tmp := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: config.DefaultGoldenNamespace, Name: fleet.CdiTmpPVCPrefix + string(target.UID)}}
	pvc, pv := w.Claim(tmp, TestClass, fleet.ClaimRequest(target), 6*Gi, "vol-tmp-"+string(target.UID))
	if ev != nil {
		pv.Annotations[fleet.AnnCSIEvidence] = record.MustJSON(ev)
	}
	return pvc, pv
}

// without drops the objects named ns/name (DataVolumes and claims) from the
// world, as a deletion does.
func (w *World) Without(ns, name string) {
	dvs := w.Dvs[:0]
	for _, dv := range w.Dvs {
		if dv.Namespace != ns || dv.Name != name {
			dvs = append(dvs, dv)
		}
	}
	w.Dvs = dvs
	pvcs := w.Pvcs[:0]
	for _, pvc := range w.Pvcs {
		if pvc.Namespace != ns || pvc.Name != name {
			pvcs = append(pvcs, pvc)
		}
	}
	w.Pvcs = pvcs
}

// csiCloneForced: CDI's cloneStrategyOverride csi-clone and a CSIDriver
// object for the driver, as the loopback stack runs CDI.
func CsiCloneForced() predict.Inputs {
	s := cdiv1.CloneStrategyCsiClone
	return predict.Inputs{CDIs: []*cdiv1.CDI{{Spec: cdiv1.CDISpec{CloneStrategyOverride: &s}}}, CSIDrivers: []string{TestDriver}}
}

// DerivedProfiles are the StorageProfiles CDI derives for classes of
// LINSTOR's driver (pkg/storagecapabilities): claimPropertySets ReadWriteMany
// Block, ReadWriteOnce Block, ReadWriteOnce Filesystem.
func DerivedProfiles(classes ...string) []*cdiv1.StorageProfile {
	block, fs := corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem
	set := func(mode *corev1.PersistentVolumeMode, am corev1.PersistentVolumeAccessMode) cdiv1.ClaimPropertySet {
		return cdiv1.ClaimPropertySet{VolumeMode: mode, AccessModes: []corev1.PersistentVolumeAccessMode{am}}
	}
	out := make([]*cdiv1.StorageProfile, 0, len(classes))
	for _, c := range classes {
		out = append(out, &cdiv1.StorageProfile{
			TypeMeta:   metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "StorageProfile"},
			ObjectMeta: metav1.ObjectMeta{Name: c},
			Status: cdiv1.StorageProfileStatus{ClaimPropertySets: []cdiv1.ClaimPropertySet{
				set(&block, corev1.ReadWriteMany), set(&block, corev1.ReadWriteOnce), set(&fs, corev1.ReadWriteOnce)}},
		})
	}
	return out
}

// cdiAtDefaults: csiCloneForced with a CDIConfig that reports CDI's default
// filesystem overhead (0.06).
func CdiAtDefaults() predict.Inputs {
	in := CsiCloneForced()
	in.CDIConfigs = []*cdiv1.CDIConfig{{Status: cdiv1.CDIConfigStatus{FilesystemOverhead: &cdiv1.FilesystemOverhead{Global: "0.06"}}}}
	return in
}

// judgeWithCDI judges the world with the prediction of cdiAtDefaults.
func (w *World) JudgeWithCDI(t *testing.T, now time.Time) map[string]*record.Record {
	t.Helper()
	cfg := TestConfig()
	inv := fleet.BuildInventory(w.Objects(t), cfg.GoldenNamespaces())
	recs := map[string]*record.Record{}
	for _, a := range verdict.EvaluateWith(inv, cfg, now, verdict.BuildPredictor(CdiAtDefaults(), inv)).Assessments {
		recs[a.Disk.Name] = a.Record
	}
	return recs
}

const TestDriver = "linstor.csi.linbit.com"

// predictionWorld: a golden on testClass, a class without expansion, and
// two finished worker disks whose volumes the tap saw created blank.
func PredictionWorld(t *testing.T) (*World, *cdiv1.DataVolume) {
	t.Helper()
	var w World
	w.Class(TestClass, nil, T0)
	w.Class("fixed", nil, T0).AllowVolumeExpansion = new(bool)
	g, _ := w.Golden(TestSID, TestVer)
	blank := TapClone("", 20*Gi, 20*Gi)
	w.Cloned(w.Worker("tenant-a", "fixed-a", "p", g, 20*Gi, publish.PtrTo("fixed")), "fixed", "copy", 20*Gi, blank)
	w.Cloned(w.Worker("tenant-a", "same-a", "p", g, 20*Gi, publish.PtrTo(TestClass)), TestClass, "copy", 20*Gi, blank)
	return &w, g
}

// BareClaim adds a claim no DataVolume made whose dataSourceRef names the
// claim of golden g (in g's namespace), created at T0; bound at T0+1m to a
// volume whose tap evidence is ev when ev is not nil.
func (w *World) BareClaim(ns, name string, g *cdiv1.DataVolume, size int64, ev *fleet.VolumeEvidence) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	owner := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	handle := ""
	if ev != nil {
		handle = "vol-" + name
	}
	pvc, pv := w.Claim(owner, TestClass, size, size, handle)
	pvc.CreationTimestamp = metav1.NewTime(T0)
	pvc.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: g.Name, Namespace: &g.Namespace}
	if pv != nil {
		pv.CreationTimestamp = metav1.NewTime(T0.Add(time.Minute))
		pv.Annotations[fleet.AnnCSIEvidence] = record.MustJSON(ev)
	}
	return pvc, pv
}
