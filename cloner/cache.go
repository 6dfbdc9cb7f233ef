package cloner

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// What the informers keep. Each object is trimmed as it enters the cache
// (informer transforms) to the fields the cloner reads: the verdicts, the
// evidence, the report and the events. Always kept: name, namespace, UID,
// resourceVersion, creation and deletion time, labels, owner references and
// every annotation but kubectl's last-applied copy (CDI's cdi.kubevirt.io/*
// and this project's keys are read), and a DataVolume's whole status with
// its conditions. Dropped: managedFields (often the largest part), and the
// spec fields nothing here reads (a PV's node affinity, volume attributes,
// mount options; a DataVolume's checkpoints, selectors and preallocation).
// A DataVolume is kept typed instead of as an unstructured map, which is
// several times larger. The per-disk cost this gives is in the README's
// Scale section.

const annLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// cachedDataVolume is a DataVolume as the cache keeps it: typed and trimmed,
// or, when it cannot be read, only its identity and readErr, so that a bad
// object is reported and skipped without stopping the others.
type cachedDataVolume struct {
	cdiv1.DataVolume
	readErr string
}

// trimMeta drops what no reader of the cache uses from an object's metadata.
func trimMeta(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	if _, ok := m.Annotations[annLastApplied]; ok {
		delete(m.Annotations, annLastApplied)
	}
}

// cacheDataVolume is the DataVolume informer's transform.
func cacheDataVolume(obj any) (any, error) {
	switch o := obj.(type) {
	case *cachedDataVolume:
		return o, nil // already transformed (a watch-list's items are passed twice)
	case *unstructured.Unstructured:
		return readDataVolume(o), nil
	}
	return obj, nil
}

// readDataVolume converts and trims an unstructured DataVolume.
func readDataVolume(u *unstructured.Unstructured) *cachedDataVolume {
	dv, err := toDataVolume(u)
	if err != nil {
		c := &cachedDataVolume{readErr: clip(err.Error(), 300)}
		c.TypeMeta = metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}
		c.ObjectMeta = metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(),
			ResourceVersion: u.GetResourceVersion(), CreationTimestamp: u.GetCreationTimestamp()}
		return c
	}
	trimMeta(&dv.ObjectMeta)
	spec := cdiv1.DataVolumeSpec{Source: dv.Spec.Source, SourceRef: dv.Spec.SourceRef, ContentType: dv.Spec.ContentType}
	if s := dv.Spec.Storage; s != nil {
		spec.Storage = &cdiv1.StorageSpec{AccessModes: s.AccessModes, Resources: s.Resources,
			VolumeMode: s.VolumeMode, StorageClassName: s.StorageClassName}
	}
	if p := dv.Spec.PVC; p != nil {
		spec.PVC = &corev1.PersistentVolumeClaimSpec{AccessModes: p.AccessModes, Resources: p.Resources,
			VolumeMode: p.VolumeMode, StorageClassName: p.StorageClassName, VolumeName: p.VolumeName}
	}
	dv.Spec = spec
	return &cachedDataVolume{DataVolume: *dv}
}

// cacheClaim is the PVC informer's transform.
func cacheClaim(obj any) (any, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return obj, nil
	}
	trimMeta(&pvc.ObjectMeta)
	pvc.Spec.Selector = nil
	pvc.Status.Conditions = nil
	pvc.Status.AllocatedResources, pvc.Status.AllocatedResourceStatuses = nil, nil
	return pvc, nil
}

// cacheVolume is the PV transform for the default golden namespace.
var cacheVolume = cacheVolumeFor(DefaultGoldenNamespace)

// cacheVolumeFor is the PV informer's transform: the CSI source keeps only
// the driver and the handle; a PV of another kind keeps no source at all.
// A golden's PV (claimed in goldenNamespace) keeps its node affinity too:
// the clone-path prediction reads where a golden's volume lives.
func cacheVolumeFor(goldenNamespace string) cache.TransformFunc {
	return func(obj any) (any, error) {
		pv, ok := obj.(*corev1.PersistentVolume)
		if !ok {
			return obj, nil
		}
		trimMeta(&pv.ObjectMeta)
		var src corev1.PersistentVolumeSource
		if c := pv.Spec.CSI; c != nil {
			src.CSI = &corev1.CSIPersistentVolumeSource{Driver: c.Driver, VolumeHandle: c.VolumeHandle}
		}
		pv.Spec.PersistentVolumeSource = src
		pv.Spec.MountOptions = nil
		r := pv.Spec.ClaimRef
		if r == nil || r.Namespace != goldenNamespace {
			pv.Spec.NodeAffinity = nil
		}
		if r != nil {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: r.Namespace, Name: r.Name, UID: r.UID}
		}
		return pv, nil
	}
}

// cacheUnstructured is the transform of the other dynamic informers
// (VolumeSnapshotContents): only managedFields go.
func cacheUnstructured(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
	}
	return obj, nil
}
