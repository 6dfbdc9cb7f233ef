package cloner

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// TestCacheKeepsWhatTheClonerReads: the transforms drop managedFields and
// unread spec, and keep every annotation a reader uses and the DataVolume's
// conditions; applying one twice changes nothing (a watch-list's items are
// passed through it twice).
func TestCacheKeepsWhatTheClonerReads(t *testing.T) {
	var w world
	w.class(testClass, nil, t0)
	g, _ := w.golden(testSID, testVer)
	dv := w.worker("tenant-a", "d1", "p", g, 20*gi, ptrTo(testClass))
	pvc, pv := w.cloned(dv, testClass, "csi-clone", 20*gi, tapClone("golden-vol", 6*gi, 20*gi))
	dv.Status.Conditions = append(dv.Status.Conditions, cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeRunning,
		Status: corev1.ConditionFalse, Reason: "Completed", Message: "Clone Complete"})
	managed := []metav1.ManagedFieldsEntry{{Manager: "cdi-controller", Operation: metav1.ManagedFieldsOperationUpdate}}
	for _, m := range []*metav1.ObjectMeta{&dv.ObjectMeta, &pvc.ObjectMeta, &pv.ObjectMeta} {
		m.ManagedFields = managed
		m.Annotations[annLastApplied] = `{"big":"copy"}`
	}
	pvc.Annotations["cdi.kubevirt.io/clonePhase"] = "Succeeded"
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{}}
	pv.Spec.CSI.VolumeAttributes = map[string]string{"linstor": "props"}

	u := toUnstructured(t, dv)
	got := mustTransform(cacheDataVolume(u)).(*cachedDataVolume)
	if again := mustTransform(cacheDataVolume(got)); again != got {
		t.Fatal("transforming a cached DataVolume again changed it")
	}
	if got.readErr != "" || got.ManagedFields != nil || got.Annotations[annLastApplied] != "" {
		t.Fatalf("DataVolume kept %v / %v (err %q)", got.ManagedFields, got.Annotations, got.readErr)
	}
	if got.Annotations[AnnPool] != "p" || got.Annotations[AnnGolden] != g.Name || len(got.Status.Conditions) != 2 ||
		got.Status.Conditions[1].Message != "Clone Complete" || got.Spec.Source.PVC.Name != g.Name || requestedBytes(&got.DataVolume) != 20*gi {
		t.Fatalf("DataVolume lost what the cloner reads: %+v", got.DataVolume)
	}
	claim := mustTransform(cacheClaim(pvc.DeepCopy())).(*corev1.PersistentVolumeClaim)
	if claim.ManagedFields != nil || claim.Annotations[annLastApplied] != "" || claim.Annotations["cdi.kubevirt.io/clonePhase"] != "Succeeded" ||
		claim.Annotations[AnnCDICloneType] != "csi-clone" || claimRequest(claim) != 20*gi || claim.Spec.VolumeName != pv.Name {
		t.Fatalf("PVC cached as %+v", claim)
	}
	vol := mustTransform(cacheVolume(pv.DeepCopy())).(*corev1.PersistentVolume)
	if vol.ManagedFields != nil || vol.Spec.NodeAffinity != nil || vol.Spec.CSI.VolumeAttributes != nil ||
		csiHandle(vol) != csiHandle(pv) || vol.Annotations[AnnCSIEvidence] == "" || vol.Spec.ClaimRef.UID != pvc.UID {
		t.Fatalf("PV cached as %+v", vol)
	}
}

// TestUnreadableDataVolumeIsCachedAsItsIdentity: a DataVolume that cannot
// be read is kept with its reason, to be reported, not dropped.
func TestUnreadableDataVolumeIsCachedAsItsIdentity(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
		"metadata": map[string]any{"name": "broken", "namespace": "tenant-x", "uid": "u-1", "resourceVersion": "7"},
		"spec":     "not an object",
	}}
	got := mustTransform(cacheDataVolume(u)).(*cachedDataVolume)
	m := malformedDataVolume(got)
	if got.readErr == "" || m.Name != "broken" || m.UID != "u-1" || m.ResourceVersion != "7" || m.Kind != "DataVolume" {
		t.Fatalf("unreadable DataVolume cached as %+v", m)
	}
}
