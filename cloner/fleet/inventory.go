package fleet

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

// objects is everything the cloner reads, from informers or from one List
// each (the report).
type Objects struct {
	DataVolumes      []*CachedDataVolume
	Claims           []*corev1.PersistentVolumeClaim
	Volumes          []*corev1.PersistentVolume
	Classes          []*storagev1.StorageClass
	SnapshotContents []*unstructured.Unstructured
	// Snapshots are the VolumeSnapshots of the golden namespaces.
	Snapshots []*unstructured.Unstructured
	// DataSources are what a disk's sourceRef may name.
	DataSources []*cdiv1.DataSource
}

// malformedObject is an object the cloner could not read. It is reported
// (Warning event, csi_clone_malformed_objects_total) and otherwise skipped.
type MalformedObject struct {
	Kind, APIVersion, Namespace, Name string
	UID                               types.UID
	ResourceVersion                   string
	Err                               string
}

// inventory is one consistent view of the catalog, the worker disks and the
// storage objects behind them, indexed for the joins the verdicts need.
type Inventory struct {
	// Goldens is the Talos catalog; Images the other DataVolumes and the
	// VolumeSnapshots of the golden namespaces, each a golden once a disk
	// clones it. GoldenByRef finds a DataVolume's, SnapshotGoldens a
	// VolumeSnapshot's (the two may share a name); GoldenOf a disk's.
	Goldens         []*Golden
	Images          []*Golden
	GoldenByRef     map[types.NamespacedName]*Golden
	SnapshotGoldens map[types.NamespacedName]*Golden
	Disks           []*WorkerDisk
	// dvRefs holds every DataVolume seen, readable or not: the ledger only
	// forgets a UID once its DataVolume is gone.
	dvRefs    map[types.UID]types.NamespacedName
	Malformed []MalformedObject
	// claims and volumes find a PVC by namespace/name and a PV by name:
	// in maps built from lists (the report), in the informers' stores (the
	// controller, which never copies the fleet).
	Claims  func(types.NamespacedName) *corev1.PersistentVolumeClaim
	Volumes func(string) *corev1.PersistentVolume
	// DataSource finds a DataSource by namespace/name (nil: none known), to
	// follow a disk's sourceRef as CDI does.
	DataSource func(types.NamespacedName) *cdiv1.DataSource
	// NamedClaims are the claims DataSources and disks name as their
	// source, set before AddDataVolumes: those of a golden namespace that
	// no DataVolume made are claim goldens (addClaimGoldens). The
	// controller, which reads only the disks a pass judges, names them all
	// here, so every pass sees the same goldens.
	NamedClaims []types.NamespacedName
	// CloneClaims, when set, remembers the tmp-pvcs CDI made (the
	// controller's, from its informer's events; nil in the report).
	CloneClaims *ClaimTimes
	Classes     classIndex
	// snapshotOf maps a snapshot handle to the volume handle it was cut from.
	SnapshotOf map[string]string
	// contents are the VolumeSnapshotContents by name.
	contents map[string]*unstructured.Unstructured
}

func BuildInventory(objs Objects, goldenNamespaces config.Namespaces) *Inventory {
	pvcs := make(map[types.NamespacedName]*corev1.PersistentVolumeClaim, len(objs.Claims))
	pvs := make(map[string]*corev1.PersistentVolume, len(objs.Volumes))
	sources := make(map[types.NamespacedName]*cdiv1.DataSource, len(objs.DataSources))
	for _, ds := range objs.DataSources {
		sources[types.NamespacedName{Namespace: ds.Namespace, Name: ds.Name}] = ds
	}
	for _, pvc := range objs.Claims {
		pvcs[types.NamespacedName{Namespace: pvc.Namespace, Name: pvc.Name}] = pvc
	}
	for _, pv := range objs.Volumes {
		pvs[pv.Name] = pv
	}
	inv := NewInventory(objs.Classes, objs.SnapshotContents,
		func(ref types.NamespacedName) *corev1.PersistentVolumeClaim { return pvcs[ref] },
		func(name string) *corev1.PersistentVolume { return pvs[name] })
	inv.DataSource = func(ref types.NamespacedName) *cdiv1.DataSource { return sources[ref] }
	inv.NamedClaims = append(DataSourceClaims(objs.DataSources), ClaimSourceClaims(objs.Claims)...)
	inv.AddSnapshots(objs.Snapshots, goldenNamespaces)
	inv.AddDataVolumes(objs.DataVolumes, goldenNamespaces)
	inv.AddClaimDisks(objs.Claims, goldenNamespaces)
	return inv
}

func NewInventory(classes []*storagev1.StorageClass, snapshotContents []*unstructured.Unstructured,
	claims func(types.NamespacedName) *corev1.PersistentVolumeClaim, volumes func(string) *corev1.PersistentVolume) *Inventory {
	inv := &Inventory{
		GoldenByRef:     map[types.NamespacedName]*Golden{},
		SnapshotGoldens: map[types.NamespacedName]*Golden{},
		dvRefs:          map[types.UID]types.NamespacedName{},
		Claims:          claims,
		Volumes:         volumes,
		DataSource:      func(types.NamespacedName) *cdiv1.DataSource { return nil },
		Classes:         NewClassIndex(classes),
		SnapshotOf:      map[string]string{},
		contents:        map[string]*unstructured.Unstructured{},
	}
	inv.indexSnapshotContents(snapshotContents)
	return inv
}

// addDataVolumes reads the DataVolumes, which must include every one of
// the golden namespaces, into the catalog and the worker disks.
func (inv *Inventory) AddDataVolumes(cached []*CachedDataVolume, goldenNamespaces config.Namespaces) {
	dvs := inv.readDataVolumes(cached)
	inv.buildCatalog(dvs, goldenNamespaces)
	inv.buildDisks(dvs, goldenNamespaces)
}

// readDataVolumes converts every DataVolume it can and records the rest as
// malformed; a bad object must never stop the others from being judged.
func (inv *Inventory) readDataVolumes(cached []*CachedDataVolume) []*cdiv1.DataVolume {
	out := make([]*cdiv1.DataVolume, 0, len(cached))
	for _, c := range cached {
		inv.dvRefs[c.UID] = types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		if c.ReadErr != "" {
			inv.Malformed = append(inv.Malformed, MalformedDataVolume(c))
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

func MalformedDataVolume(c *CachedDataVolume) MalformedObject {
	return MalformedObject{
		Kind: c.Kind, APIVersion: c.APIVersion, Namespace: c.Namespace, Name: c.Name, UID: c.UID,
		ResourceVersion: c.ResourceVersion, Err: c.ReadErr,
	}
}

func MalformedFrom(u *unstructured.Unstructured, err error) MalformedObject {
	return MalformedObject{
		Kind: u.GetKind(), APIVersion: u.GetAPIVersion(),
		Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(),
		ResourceVersion: u.GetResourceVersion(), Err: Clip(err.Error(), 300),
	}
}

// buildCatalog makes a golden of every DataVolume of the golden namespaces:
// a Talos one joins the catalog, any other waits in Images for a disk to
// clone it (only then do the metrics and the report show it). Then the
// claims of those namespaces that no DataVolume made are goldens where
// NamedClaims or a DataVolume's source names them (addClaimGoldens).
func (inv *Inventory) buildCatalog(dvs []*cdiv1.DataVolume, goldenNamespaces config.Namespaces) {
	dvClaims := map[types.NamespacedName]bool{}
	named := slices.Clone(inv.NamedClaims)
	for _, dv := range dvs {
		if ref, ok := ClonedPVC(dv, inv.DataSource); ok {
			named = append(named, ref)
		}
		if !goldenNamespaces.Has(dv.Namespace) {
			continue
		}
		dvClaims[types.NamespacedName{Namespace: dv.Namespace, Name: ClaimName(dv)}] = true
		if namesItsGolden(dv) {
			continue
		}
		g := newGolden(dv, inv)
		if g.IsImage() {
			inv.Images = append(inv.Images, g)
		} else {
			inv.Goldens = append(inv.Goldens, g)
		}
		inv.GoldenByRef[g.Ref()] = g
	}
	inv.addClaimGoldens(named, goldenNamespaces, dvClaims)
}

// GoldenOf is the golden a disk names (nil: none known).
func (inv *Inventory) GoldenOf(d *WorkerDisk) *Golden {
	if d.FromSnapshot {
		return inv.SnapshotGoldens[d.GoldenRef]
	}
	return inv.GoldenByRef[d.GoldenRef]
}

func (inv *Inventory) buildDisks(dvs []*cdiv1.DataVolume, goldenNamespaces config.Namespaces) {
	known := func(ref types.NamespacedName) bool { return inv.GoldenByRef[ref] != nil }
	knownFlavor := func(f Flavor) bool {
		for _, g := range inv.Goldens {
			if g.Flavor == f && g.Trusted() {
				return true
			}
		}
		return false
	}
	for _, dv := range dvs {
		if goldenNamespaces.Has(dv.Namespace) && !namesItsGolden(dv) {
			continue // a golden
		}
		if d, ok := classifyDisk(dv, goldenNamespaces, inv.DataSource, known, knownFlavor); ok {
			inv.Disks = append(inv.Disks, d)
		}
	}
}

// namesItsGolden: a DataVolume of a golden namespace that carries the golden
// annotation is a disk made there (a snapshot is restored where it lives),
// never a golden; a Talos golden is one whatever it carries.
func namesItsGolden(dv *cdiv1.DataVolume) bool {
	_, ok := dv.Annotations[AnnGolden]
	return ok && !isTalosGolden(dv)
}

// indexSnapshotContents maps snapshot handles to their source volume
// handles; CDI deletes its tmp snapshots after a clone, so this only helps
// while they exist (the evidence loop records the link before then).
func (inv *Inventory) indexSnapshotContents(us []*unstructured.Unstructured) {
	for _, u := range us {
		handle, _, err1 := unstructured.NestedString(u.Object, "status", "snapshotHandle")
		source, _, err2 := unstructured.NestedString(u.Object, "spec", "source", "volumeHandle")
		if err1 != nil || err2 != nil {
			err := err1
			if err == nil {
				err = err2
			}
			inv.Malformed = append(inv.Malformed, MalformedFrom(u, err))
			continue
		}
		if handle != "" && source != "" {
			inv.SnapshotOf[handle] = source
		}
		inv.contents[u.GetName()] = u
	}
}

// claimOf is the PVC of a disk or golden, nil when CDI has not created it.
func (inv *Inventory) ClaimOf(namespace, name string) *corev1.PersistentVolumeClaim {
	return inv.Claims(types.NamespacedName{Namespace: namespace, Name: name})
}

// boundPV is the PV a claim names, nil when it names none.
func (inv *Inventory) BoundPV(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	if pvc == nil || pvc.Spec.VolumeName == "" {
		return nil
	}
	return inv.Volumes(pvc.Spec.VolumeName)
}

// consumers counts the worker disks that name each golden.
func (inv *Inventory) Consumers() map[types.NamespacedName]int {
	out := map[types.NamespacedName]int{}
	for _, d := range inv.Disks {
		if d.Kind == DiskClone {
			out[d.GoldenRef]++
		}
	}
	return out
}

// decodeAnnotation reads a JSON annotation into v. A value that is present
// but unreadable is reported as malformed on the owning object.
func DecodeAnnotation(obj interface {
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

// goldenForFlavor is the trusted golden of a flavor (the first by name).
func (inv *Inventory) GoldenForFlavor(f Flavor) *Golden {
	for _, g := range inv.Goldens {
		if g.Flavor == f && g.Trusted() {
			return g
		}
	}
	return nil
}

// NotedCloneClaim is when CDI made the tmp-pvc of target, as CloneClaims
// noted it (zero: not noted, or no CloneClaims).
func (inv *Inventory) NotedCloneClaim(target *corev1.PersistentVolumeClaim) time.Time {
	if target == nil || target.UID == "" {
		return time.Time{}
	}
	return inv.CloneClaims.Of(target.UID)
}

// CloneClaimOf is CDI's tmp-pvc-<uid> of a target claim, nil when CDI has not
// made it (or already re-bound its volume and deleted it).
func (inv *Inventory) CloneClaimOf(d *WorkerDisk, target *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	if target == nil || target.UID == "" {
		return nil
	}
	return inv.ClaimOf(d.GoldenRef.Namespace, CdiTmpPVCPrefix+string(target.UID))
}
