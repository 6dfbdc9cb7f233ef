package fleet

import (
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
)

// How a class was resolved, in the order the rules are tried.
const (
	ClassFromBoundPV = "bound-pv"     // the PV the disk is bound to: frozen
	ClassFromClaim   = "claim"        // the PVC CDI created (class already filled in)
	ClassRequested   = "requested"    // spelled out on the DataVolume
	ClassVirtDefault = "virt-default" // storageclass.kubevirt.io/is-default-virt-class
	ClassK8sDefault  = "default"      // storageclass.kubernetes.io/is-default-class
	ClassUnresolved  = "unresolved"   // empty, and no default exists
	// ClassFromSnapshotSource: a golden VolumeSnapshot's, the class of the
	// claim it was cut from while that claim exists.
	ClassFromSnapshotSource = "snapshot-source"
)

// ClassResolution is a resolved StorageClass name and the rule that gave it.
type ClassResolution struct {
	Name string `json:"name"`
	How  string `json:"how"`
}

// Resolved reports whether a class name was found; comparisons only happen
// between two resolved classes.
func (r ClassResolution) Resolved() bool { return r.How != ClassUnresolved }

// classIndex answers "which class is the default" the way CDI and Kubernetes do.
type classIndex struct {
	ByName      map[string]*storagev1.StorageClass
	virtDefault string
	k8sDefault  string
}

func NewClassIndex(classes []*storagev1.StorageClass) classIndex {
	ci := classIndex{ByName: make(map[string]*storagev1.StorageClass, len(classes))}
	for _, sc := range classes {
		ci.ByName[sc.Name] = sc
	}
	d := cdirules.DefaultClasses(classes)
	ci.virtDefault, ci.k8sDefault = d.Virt, d.Kubernetes
	return ci
}

// resolveRequested resolves the class of a spec.storage DataVolume as CDI
// renders its claim (datavolume/util.go, GetStorageClassByNameWithVirtFallback):
// a nil class falls back to the virtualization default unless the content
// type is archive (CDI reads any other value, or none, as kubevirt), then to
// the Kubernetes default. An explicit "" is not a fallback: CDI looks up a
// class named "" and keeps "", which Kubernetes reads as "no class".
func (ci classIndex) ResolveRequested(requested *string, contentType string) ClassResolution {
	return ci.resolveRequestedFor(requested, contentType, false)
}

// resolveRequestedFor resolves a DataVolume's class; pvcSpec says it spells
// its claim as spec.pvc, which CDI copies as it is: its nil class is then
// filled in by Kubernetes, with the Kubernetes default only.
func (ci classIndex) resolveRequestedFor(requested *string, contentType string, pvcSpec bool) ClassResolution {
	if requested != nil {
		return ClassResolution{Name: *requested, How: ClassRequested}
	}
	kind := cdirules.KindStorage
	if pvcSpec {
		kind = cdirules.KindPVC
	}
	switch name := cdirules.FallbackClass(kind, contentType, cdirules.Defaults{Virt: ci.virtDefault, Kubernetes: ci.k8sDefault}); {
	case name == "":
		return ClassResolution{How: ClassUnresolved}
	case name == ci.virtDefault && kind == cdirules.KindStorage && cdirules.ContentType(contentType) == cdirules.ContentKubeVirt:
		return ClassResolution{Name: name, How: ClassVirtDefault}
	default:
		return ClassResolution{Name: name, How: ClassK8sDefault}
	}
}

// resolveClass gives the class a spec.storage volume really has or will
// have; see resolveClassFor.
func (ci classIndex) ResolveClass(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume,
	requested *string, contentType string) ClassResolution {
	return ci.resolveClassFor(pvc, pv, requested, contentType, false)
}

// resolveDiskClass gives a worker disk's class.
func (ci classIndex) ResolveDiskClass(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, d *WorkerDisk) ClassResolution {
	return ci.resolveClassFor(pvc, pv, d.RequestedClass, d.ContentType, d.FromPVCSpec)
}

// resolveClassFor gives the class a volume really has or will have. A bound
// volume keeps the class it was bound with, whatever the default becomes
// later; a claim CDI already created carries the class CDI resolved; only a
// DataVolume with no claim yet is resolved from today's defaults, by the
// rule of its spec kind.
func (ci classIndex) resolveClassFor(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume,
	requested *string, contentType string, pvcSpec bool) ClassResolution {
	if pv != nil && pvc != nil && pvc.Status.Phase == corev1.ClaimBound {
		return ClassResolution{Name: pv.Spec.StorageClassName, How: ClassFromBoundPV}
	}
	if pvc != nil && pvc.Spec.StorageClassName != nil {
		return ClassResolution{Name: *pvc.Spec.StorageClassName, How: ClassFromClaim}
	}
	return ci.resolveRequestedFor(requested, contentType, pvcSpec)
}

// kubernetesDefault is what an empty class of a spec.pvc DataVolume
// becomes: the Kubernetes default only (datavolume/util.go applies the
// virtualization default to spec.storage alone).
func (ci classIndex) KubernetesDefault() ClassResolution {
	if ci.k8sDefault == "" {
		return ClassResolution{How: ClassUnresolved}
	}
	return ClassResolution{Name: ci.k8sDefault, How: ClassK8sDefault}
}
