package cloner

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// BenchmarkCacheBytesPerDisk measures what one finished worker disk costs
// in the informers' caches, indexes included: its DataVolume, PVC and PV as
// CDI, the provisioner, the tap and the verdict leave them (CDI's
// annotations, labels, owner reference, managedFields), decoded from their
// wire form as an informer gets them (protobuf for the PVC and PV, JSON for
// the DataVolume), transformed and stored with the controller's indexers
// and UID maps.
// It reports the live heap per disk after a GC; the README's Scale section
// quotes it.
func BenchmarkCacheBytesPerDisk(b *testing.B) {
	const disks = 2000
	wire := wireFleet(b, disks)
	var perDisk float64
	for b.Loop() {
		perDisk = cachedBytes(b, wire) / disks
	}
	b.ReportMetric(perDisk, "bytes/disk")
}

// wireDisk is one disk's three objects as the API server sends them.
type wireDisk struct{ dv, pvc, pv []byte }

func wireFleet(b *testing.B, n int) []wireDisk {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	managed := []metav1.ManagedFieldsEntry{{Manager: "cdi-controller", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{".":{},"f:cdi.kubevirt.io/storage.contentType":{}}}}`)}}}
	// A csi-clone record as the verdict engine writes it.
	recordJSON := func(golden, pool, volume string) string {
		return record.MustJSON(record.Record{Verdict: record.VerdictCSIClone, Source: record.SourceCSITap, Message: "CSI clone of volume golden-vol",
			Golden: golden, SchematicID: clonertest.TestSID, Version: clonertest.TestVer, Pool: pool, Volume: volume, GoldenVolume: "golden-vol",
			ContentSource: "volume:golden-vol", Class: clonertest.TestClass, GoldenClass: clonertest.TestClass, DiskBytes: 20 * clonertest.Gi, GoldenBytes: 6 * clonertest.Gi,
			CapacityBytes: 20 * clonertest.Gi, CDICloneType: "csi-clone", DurationSeconds: 14.2, Since: clonertest.T0,
			Predicted: "csi-clone", PredictedReason: "storage-profile"})
	}
	out := make([]wireDisk, n)
	for i := range out {
		ns := fmt.Sprintf("tenant-%03d", i%200)
		dv := w.Worker(ns, fmt.Sprintf("kubernetes-md%d-%05d-system", i%3, i), fmt.Sprintf("kubernetes-%s-md%d", ns, i%3), g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
		pvc, pv := w.Cloned(dv, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, clonertest.TapClone("golden-vol", 6*clonertest.Gi, 20*clonertest.Gi))
		pv.Spec.CSI.VolumeHandle = pv.Name // as LINSTOR names its volumes
		for k, v := range cdiClaimAnnotations(string(dv.UID)) {
			pvc.Annotations[k] = v
		}
		pvc.Annotations[fleet.AnnCloneVerdict] = record.VerdictCSIClone
		pvc.Annotations[fleet.AnnCloneEvidence] = recordJSON(g.Namespace+"/"+g.Name, dv.Annotations[fleet.AnnPool], pv.Spec.CSI.VolumeHandle)
		pvc.Labels = map[string]string{"app": "containerized-data-importer", "app.kubernetes.io/component": "storage"}
		pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume", Name: dv.Name, UID: dv.UID}}
		pv.Annotations["pv.kubernetes.io/provisioned-by"] = "linstor.csi.linbit.com"
		dv.Annotations["cdi.kubevirt.io/storage.usePopulator"] = "true"
		dv.Status.Conditions = finishedConditions(dv.Name)
		for _, m := range []*metav1.ObjectMeta{&dv.ObjectMeta, &pvc.ObjectMeta, &pv.ObjectMeta} {
			m.ManagedFields = managed
		}
		raw, err := json.Marshal(clonertest.ToUnstructured(b, dv).Object)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = wireDisk{dv: raw, pvc: mustMarshal(b, pvc), pv: mustMarshal(b, pv)}
	}
	return out
}

func cdiClaimAnnotations(dvUID string) map[string]string {
	return map[string]string{
		"cdi.kubevirt.io/createdForDataVolume": dvUID, "cdi.kubevirt.io/storage.contentType": "kubevirt",
		"cdi.kubevirt.io/storage.pod.phase": "Succeeded", "cdi.kubevirt.io/storage.condition.running": "false",
		"cdi.kubevirt.io/storage.condition.running.message": "Clone Complete", "cdi.kubevirt.io/storage.condition.running.reason": "Completed",
		"cdi.kubevirt.io/clonePhase": "Succeeded", "pv.kubernetes.io/bind-completed": "yes",
		"volume.kubernetes.io/storage-provisioner": "linstor.csi.linbit.com",
	}
}

func mustMarshal(b *testing.B, m interface{ Marshal() ([]byte, error) }) []byte {
	raw, err := m.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// cachedBytes decodes and caches every disk and returns the live heap they
// hold.
func cachedBytes(b *testing.B, wire []wireDisk) float64 {
	c := &Controller{cfg: clonertest.TestConfig()}
	dvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, fleet.DataVolumeIndexers(c.cfg.GoldenNamespaces()))
	pvcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	claimUIDs, dataVolumeUIDs := fleet.NewUIDKeys(), fleet.NewUIDKeys()
	pvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexByHandle: fleet.PvHandleIndex})
	before := liveHeap()
	for _, d := range wire {
		u := &unstructured.Unstructured{}
		pvc, pv := &corev1.PersistentVolumeClaim{}, &corev1.PersistentVolume{}
		if err := json.Unmarshal(d.dv, &u.Object); err != nil {
			b.Fatal(err)
		}
		if err := pvc.Unmarshal(d.pvc); err != nil {
			b.Fatal(err)
		}
		if err := pv.Unmarshal(d.pv); err != nil {
			b.Fatal(err)
		}
		cachedDV, cachedPVC := mustTransform(fleet.CacheDataVolume(u)), mustTransform(record.CacheClaim(pvc))
		mustAdd(b, dvs, cachedDV)
		mustAdd(b, pvcs, cachedPVC)
		dataVolumeUIDs.Set(cachedDV, true)
		claimUIDs.Set(cachedPVC, true)
		mustAdd(b, pvs, mustTransform(fleet.CacheVolume(pv)))
	}
	held := liveHeap() - before
	runtime.KeepAlive([]cache.Indexer{dvs, pvcs, pvs})
	runtime.KeepAlive([]*fleet.UIDKeys{claimUIDs, dataVolumeUIDs})
	return held
}

func mustAdd(b *testing.B, s cache.Indexer, obj any) {
	if err := s.Add(obj); err != nil {
		b.Fatal(err)
	}
}

func liveHeap() float64 {
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

// BenchmarkClaimEvent measures what one PVC watch event costs the watch's
// reader: decoding the claim from its wire form and the informer's
// transform, when its verdict record changed (digested anew) and when it
// did not (kube-controller-manager's status rewrite after each verdict
// patch: the cached digest is reused).
func BenchmarkClaimEvent(b *testing.B) {
	wire := wireFleet(b, 1)[0].pvc
	decode := func() *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := pvc.Unmarshal(wire); err != nil {
			b.Fatal(err)
		}
		return pvc
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	addToStore := func(obj any) {
		if err := store.Add(obj); err != nil {
			b.Fatal(err)
		}
	}
	addToStore(mustTransform(record.CacheClaim(decode())))
	for _, bc := range []struct {
		name      string
		transform cache.TransformFunc
	}{{"record-changed", record.CacheClaim}, {"record-unchanged", record.CacheClaimFrom(store.GetByKey)}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				mustTransform(bc.transform(decode()))
			}
		})
	}
}

// finishedConditions are the conditions cdi-controller leaves on a
// finished DataVolume (datavolume/conditions.go: Bound, Ready, Running).
func finishedConditions(claim string) []cdiv1.DataVolumeCondition {
	at := metav1.NewTime(clonertest.T0)
	return []cdiv1.DataVolumeCondition{
		{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionTrue, LastHeartbeatTime: at, LastTransitionTime: at, Reason: "Bound", Message: "PVC " + claim + " Bound"},
		{Type: cdiv1.DataVolumeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: at, LastTransitionTime: at},
		{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, LastHeartbeatTime: at, LastTransitionTime: at, Reason: "Completed"},
	}
}
