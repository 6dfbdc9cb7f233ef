package cloner

import (
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// objects is everything the cloner reads, from informers or from one List
// each (the report).
type objects struct {
	DataVolumes      []*cachedDataVolume
	Claims           []*corev1.PersistentVolumeClaim
	Volumes          []*corev1.PersistentVolume
	Classes          []*storagev1.StorageClass
	SnapshotContents []*unstructured.Unstructured
}

// malformedObject is an object the cloner could not read. It is reported
// (Warning event, csi_clone_malformed_objects_total) and otherwise skipped.
type malformedObject struct {
	Kind, APIVersion, Namespace, Name string
	UID                               types.UID
	ResourceVersion                   string
	Err                               string
}

// inventory is one consistent view of the catalog, the worker disks and the
// storage objects behind them, indexed for the joins the verdicts need.
type inventory struct {
	goldens     []*Golden
	goldenByRef map[types.NamespacedName]*Golden
	disks       []*WorkerDisk
	// dvRefs holds every DataVolume seen, readable or not: the ledger only
	// forgets a UID once its DataVolume is gone.
	dvRefs    map[types.UID]types.NamespacedName
	malformed []malformedObject
	// claims and volumes find a PVC by namespace/name and a PV by name:
	// in maps built from lists (the report), in the informers' stores (the
	// controller, which never copies the fleet).
	claims  func(types.NamespacedName) *corev1.PersistentVolumeClaim
	volumes func(string) *corev1.PersistentVolume
	classes classIndex
	// snapshotOf maps a snapshot handle to the volume handle it was cut from.
	snapshotOf map[string]string
}

func buildInventory(objs objects, goldenNamespace string) *inventory {
	pvcs := make(map[types.NamespacedName]*corev1.PersistentVolumeClaim, len(objs.Claims))
	pvs := make(map[string]*corev1.PersistentVolume, len(objs.Volumes))
	for _, pvc := range objs.Claims {
		pvcs[types.NamespacedName{Namespace: pvc.Namespace, Name: pvc.Name}] = pvc
	}
	for _, pv := range objs.Volumes {
		pvs[pv.Name] = pv
	}
	inv := newInventory(objs.Classes, objs.SnapshotContents,
		func(ref types.NamespacedName) *corev1.PersistentVolumeClaim { return pvcs[ref] },
		func(name string) *corev1.PersistentVolume { return pvs[name] })
	inv.addDataVolumes(objs.DataVolumes, goldenNamespace)
	return inv
}

func newInventory(classes []*storagev1.StorageClass, snapshotContents []*unstructured.Unstructured,
	claims func(types.NamespacedName) *corev1.PersistentVolumeClaim, volumes func(string) *corev1.PersistentVolume) *inventory {
	inv := &inventory{
		goldenByRef: map[types.NamespacedName]*Golden{},
		dvRefs:      map[types.UID]types.NamespacedName{},
		claims:      claims,
		volumes:     volumes,
		classes:     newClassIndex(classes),
		snapshotOf:  map[string]string{},
	}
	inv.indexSnapshotContents(snapshotContents)
	return inv
}

// addDataVolumes reads the DataVolumes, which must include every golden
// candidate, into the catalog and the worker disks.
func (inv *inventory) addDataVolumes(cached []*cachedDataVolume, goldenNamespace string) {
	dvs := inv.readDataVolumes(cached)
	inv.buildCatalog(dvs, goldenNamespace)
	inv.buildDisks(dvs, goldenNamespace)
}

// readDataVolumes converts every DataVolume it can and records the rest as
// malformed; a bad object must never stop the others from being judged.
func (inv *inventory) readDataVolumes(cached []*cachedDataVolume) []*cdiv1.DataVolume {
	out := make([]*cdiv1.DataVolume, 0, len(cached))
	for _, c := range cached {
		inv.dvRefs[c.UID] = types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		if c.readErr != "" {
			inv.malformed = append(inv.malformed, malformedDataVolume(c))
			continue
		}
		out = append(out, &c.DataVolume)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// toDataVolume converts an unstructured DataVolume; any field of the wrong
// shape is an error, never a panic.
func toDataVolume(u *unstructured.Unstructured) (dv *cdiv1.DataVolume, err error) {
	defer func() {
		if r := recover(); r != nil {
			dv, err = nil, fmt.Errorf("cannot read DataVolume: %v", r)
		}
	}()
	dv = &cdiv1.DataVolume{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dv); err != nil {
		return nil, fmt.Errorf("cannot read DataVolume: %w", err)
	}
	return dv, nil
}

func malformedDataVolume(c *cachedDataVolume) malformedObject {
	return malformedObject{
		Kind: c.Kind, APIVersion: c.APIVersion, Namespace: c.Namespace, Name: c.Name, UID: c.UID,
		ResourceVersion: c.ResourceVersion, Err: c.readErr,
	}
}

func malformedFrom(u *unstructured.Unstructured, err error) malformedObject {
	return malformedObject{
		Kind: u.GetKind(), APIVersion: u.GetAPIVersion(),
		Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(),
		ResourceVersion: u.GetResourceVersion(), Err: clip(err.Error(), 300),
	}
}

func (inv *inventory) buildCatalog(dvs []*cdiv1.DataVolume, goldenNamespace string) {
	for _, dv := range dvs {
		if isGoldenCandidate(dv, goldenNamespace) {
			g := newGolden(dv, inv)
			inv.goldens = append(inv.goldens, g)
			inv.goldenByRef[g.Ref()] = g
		}
	}
}

func (inv *inventory) buildDisks(dvs []*cdiv1.DataVolume, goldenNamespace string) {
	known := func(ref types.NamespacedName) bool { return inv.goldenByRef[ref] != nil }
	knownFlavor := func(f Flavor) bool {
		for _, g := range inv.goldens {
			if g.Flavor == f && g.Trusted() {
				return true
			}
		}
		return false
	}
	for _, dv := range dvs {
		if isGoldenCandidate(dv, goldenNamespace) {
			continue
		}
		if d, ok := classifyDisk(dv, goldenNamespace, known, knownFlavor); ok {
			inv.disks = append(inv.disks, d)
		}
	}
}

// indexSnapshotContents maps snapshot handles to their source volume
// handles; CDI deletes its tmp snapshots after a clone, so this only helps
// while they exist (the evidence loop records the link before then).
func (inv *inventory) indexSnapshotContents(us []*unstructured.Unstructured) {
	for _, u := range us {
		handle, _, err1 := unstructured.NestedString(u.Object, "status", "snapshotHandle")
		source, _, err2 := unstructured.NestedString(u.Object, "spec", "source", "volumeHandle")
		if err1 != nil || err2 != nil {
			err := err1
			if err == nil {
				err = err2
			}
			inv.malformed = append(inv.malformed, malformedFrom(u, err))
			continue
		}
		if handle != "" && source != "" {
			inv.snapshotOf[handle] = source
		}
	}
}

// claimOf is the PVC of a disk or golden, nil when CDI has not created it.
func (inv *inventory) claimOf(namespace, name string) *corev1.PersistentVolumeClaim {
	return inv.claims(types.NamespacedName{Namespace: namespace, Name: name})
}

// boundPV is the PV a claim names, nil when it names none.
func (inv *inventory) boundPV(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	if pvc == nil || pvc.Spec.VolumeName == "" {
		return nil
	}
	return inv.volumes(pvc.Spec.VolumeName)
}

// consumers counts the worker disks that name each golden.
func (inv *inventory) consumers() map[types.NamespacedName]int {
	out := map[types.NamespacedName]int{}
	for _, d := range inv.disks {
		if d.Kind == DiskClone {
			out[d.GoldenRef]++
		}
	}
	return out
}

// decodeAnnotation reads a JSON annotation into v. A value that is present
// but unreadable is reported as malformed on the owning object.
func decodeAnnotation(obj interface {
	GetAnnotations() map[string]string
}, key string, v any) (present bool, err error) {
	raw, ok := obj.GetAnnotations()[key]
	if !ok || raw == "" {
		return false, nil
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return true, fmt.Errorf("annotation %s: %w", key, err)
	}
	return true, nil
}
