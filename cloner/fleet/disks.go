package fleet

import (
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

// Kinds of worker disk.
const (
	DiskClone      = "clone"       // source.pvc or a DataSource names a golden (or the golden annotation is set)
	DiskHTTPImport = "http-import" // source.http from a Factory URL of a known flavor
)

// WorkerDisk is one worker disk DataVolume and what CDI made of it, or a
// bare claim (BareClaim) and what the external-provisioner made of it.
type WorkerDisk struct {
	Namespace, Name string
	UID             types.UID
	Pool            string
	Kind            string
	// GoldenRef is the golden a clone disk names (source.pvc, else the
	// golden annotation). Flavor is set for HTTP imports (from the URL).
	GoldenRef    types.NamespacedName
	Flavor       Flavor
	Phase        string
	RestartCount int32
	Created      time.Time
	// ReadySince is when CDI declared the disk ready (zero until then).
	ReadySince time.Time
	// BoundSince is when CDI saw the disk's claim bound (its Bound
	// condition's turn to True; zero while it is not).
	BoundSince time.Time
	// FailMessage is CDI's message when the DataVolume failed.
	FailMessage    string
	RequestedBytes int64
	// RequestedClass and ContentType are the DataVolume's own, before any
	// resolution.
	RequestedClass *string
	ContentType    string
	// FromPVCSpec: the DataVolume spells its claim as spec.pvc (CDI applies
	// only the Kubernetes default class to it), not spec.storage.
	FromPVCSpec bool
	// VolumeMode and AccessModes are the DataVolume's own ("" / nil unset).
	VolumeMode  string
	AccessModes []string
	ClaimName   string
	// Conditions are CDI's Running, Ready and Bound conditions: their
	// reasons and messages explain why a clone does not progress.
	Conditions []CDICondition
	// FromPVC: the DataVolume clones a PVC (source.pvc, or sourceRef to a
	// DataSource of a PVC), the case CDI's clone planner and so the
	// clone-path prediction cover.
	FromPVC bool
	// PerDisk are the DataVolume's own annotations CDI obeys for this disk
	// alone (cloneType, storage.usePopulator, permissiveClone).
	PerDisk cdirules.PerDisk
	// UnqualifiedSource: it reaches its golden through a DataSource that
	// names the golden without a namespace (cdirules.ErrEmptySourceNamespace).
	UnqualifiedSource bool
	// FromSnapshot: the DataVolume restores a golden VolumeSnapshot
	// (source.snapshot, or sourceRef to a DataSource of one); GoldenRef
	// names the snapshot.
	FromSnapshot bool
	// BareClaim: the disk is a PersistentVolumeClaim no DataVolume made
	// (claimdisks.go); its Name is the claim's, and CDI has no part in it.
	BareClaim bool
}

// Ref is the disk's namespace/name.
func (d *WorkerDisk) Ref() types.NamespacedName {
	return types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
}

// Finished reports whether CDI considers the DataVolume done.
func (d *WorkerDisk) Finished() bool { return d.Phase == string(cdiv1.Succeeded) }

// Failed reports whether CDI gave up on the DataVolume.
func (d *WorkerDisk) Failed() bool { return d.Phase == string(cdiv1.Failed) }

// classifyDisk decides whether a DataVolume is a worker disk. A clone disk
// reaches a golden through source.pvc or through sourceRef to a DataSource
// (followed as CDI follows it), naming a known golden or a Talos-golden-shaped
// name in a golden namespace, or carries the golden annotation (which
// wins); one restoring a VolumeSnapshot of a golden namespace
// (source.snapshot or a DataSource of one) clones that golden; an
// HTTP-import disk fetches a Factory URL of a flavor the catalog knows.
func classifyDisk(dv *cdiv1.DataVolume, goldenNamespaces config.Namespaces, dataSource func(types.NamespacedName) *cdiv1.DataSource,
	known func(types.NamespacedName) bool, knownFlavor func(Flavor) bool) (*WorkerDisk, bool) {
	ann := dv.Annotations[AnnGolden]
	src := dv.Spec.Source
	d := newDisk(dv)
	if ref, ok := ClonedPVC(dv, dataSource); ok {
		goldenShaped := goldenNamespaces.Has(ref.Namespace) && strings.HasPrefix(ref.Name, goldenNamePrefix)
		if !known(ref) && !goldenShaped && ann == "" {
			return nil, false
		}
		d.Kind, d.GoldenRef, d.FromPVC = DiskClone, ref, true
		d.UnqualifiedSource = unqualifiedSource(dv, dataSource)
		return d, true
	}
	if ref, ok := ClonedSnapshot(dv, dataSource); ok && ann == "" && goldenNamespaces.Has(ref.Namespace) {
		d.Kind, d.GoldenRef, d.FromSnapshot = DiskClone, ref, true
		return d, true
	}
	switch {
	case src != nil && src.HTTP != nil:
		f, ok := FactoryFlavor(src.HTTP.URL)
		if !ok || !knownFlavor(f) {
			return nil, false
		}
		d.Kind, d.Flavor = DiskHTTPImport, f
	case ann != "":
		d.Kind, d.GoldenRef = DiskClone, GoldenAnnotationRef(ann, goldenNamespaces.Primary())
	default:
		return nil, false
	}
	return d, true
}

// ClonedPVC is the PVC a DataVolume clones: its source.pvc, or the PVC its
// sourceRef's DataSource names (cdirules.DataSourcePVC). A namespace left
// empty is the DataVolume's own, as CDI reads both. False: it clones no PVC
// (another source, a snapshot, a DataSource not known or not resolved).
func ClonedPVC(dv *cdiv1.DataVolume, dataSource func(types.NamespacedName) *cdiv1.DataSource) (types.NamespacedName, bool) {
	if src := clonedSource(dv, dataSource); src != nil && src.PVC != nil {
		return qualifiedSource(dv, src.PVC.Namespace, src.PVC.Name)
	}
	return types.NamespacedName{}, false
}

// ClonedSnapshot is the VolumeSnapshot a DataVolume clones: its
// source.snapshot, or the snapshot its sourceRef's DataSource names
// (cdirules.DataSourceSnapshot). Unlike a PVC's, a namespace left empty stays
// empty: CDI's snapshot-clone controller looks the snapshot up as named
// (validateCloneAndSourceSnapshot) and never finds it (CloneWithoutSource).
func ClonedSnapshot(dv *cdiv1.DataVolume, dataSource func(types.NamespacedName) *cdiv1.DataSource) (types.NamespacedName, bool) {
	if src := clonedSource(dv, dataSource); src != nil && src.Snapshot != nil && src.Snapshot.Name != "" {
		return types.NamespacedName{Namespace: src.Snapshot.Namespace, Name: src.Snapshot.Name}, true
	}
	return types.NamespacedName{}, false
}

// clonedSource is a DataVolume's source, or the one its sourceRef's
// DataSource gives it (clone-controller-base.go populateSourceIfSourceRef);
// nil when neither is known.
func clonedSource(dv *cdiv1.DataVolume, dataSource func(types.NamespacedName) *cdiv1.DataSource) *cdiv1.DataVolumeSource {
	switch src, ref := dv.Spec.Source, dv.Spec.SourceRef; {
	case src != nil:
		return src
	case ref != nil && ref.Kind == cdiv1.DataVolumeDataSource:
		if ds := dataSource(DataSourceRef(dv)); ds != nil {
			return &cdiv1.DataVolumeSource{PVC: cdirules.DataSourcePVC(ds), Snapshot: cdirules.DataSourceSnapshot(ds)}
		}
	}
	return nil
}

// qualifiedSource is a source named by namespace and name, an empty
// namespace read as the DataVolume's; false without a name.
func qualifiedSource(dv *cdiv1.DataVolume, namespace, name string) (types.NamespacedName, bool) {
	if name == "" {
		return types.NamespacedName{}, false
	}
	if namespace == "" {
		namespace = dv.Namespace
	}
	return types.NamespacedName{Namespace: namespace, Name: name}, true
}

// unqualifiedSource reports whether a DataVolume's source PVC comes from a
// DataSource naming it without a namespace (cdirules.ErrEmptySourceNamespace;
// CDI's webhook refuses a source.pvc without one).
func unqualifiedSource(dv *cdiv1.DataVolume, dataSource func(types.NamespacedName) *cdiv1.DataSource) bool {
	src := clonedSource(dv, dataSource)
	return dv.Spec.Source == nil && src != nil && src.PVC != nil && src.PVC.Namespace == ""
}

// DataSourceRef is the DataSource a DataVolume's sourceRef names (its own
// namespace when the ref names none); zero when it has no such sourceRef.
func DataSourceRef(dv *cdiv1.DataVolume) types.NamespacedName {
	ref := dv.Spec.SourceRef
	if ref == nil || ref.Kind != cdiv1.DataVolumeDataSource {
		return types.NamespacedName{}
	}
	out := types.NamespacedName{Namespace: dv.Namespace, Name: ref.Name}
	if ref.Namespace != nil && *ref.Namespace != "" {
		out.Namespace = *ref.Namespace
	}
	return out
}

// diskPool is the pool a disk is counted in: the worker pool annotation,
// else the Helm release (vm-disk's app.kubernetes.io/instance), else its
// namespace.
func diskPool(dv *cdiv1.DataVolume) string {
	return poolOf(dv.Annotations, dv.Labels, dv.Namespace)
}

func poolOf(annotations, labels map[string]string, namespace string) string {
	if p := annotations[AnnPool]; p != "" {
		return p
	}
	if p := labels[LabelInstance]; p != "" {
		return p
	}
	return namespace
}

func newDisk(dv *cdiv1.DataVolume) *WorkerDisk {
	d := &WorkerDisk{
		Namespace: dv.Namespace, Name: dv.Name, UID: dv.UID,
		Pool:  diskPool(dv),
		Phase: string(dv.Status.Phase), RestartCount: dv.Status.RestartCount,
		Created:        dv.CreationTimestamp.Time,
		ReadySince:     readySince(dv),
		BoundSince:     boundSince(dv),
		RequestedBytes: RequestedBytes(dv),
		RequestedClass: requestedClass(dv),
		ContentType:    string(dv.Spec.ContentType),
		FromPVCSpec:    dv.Spec.Storage == nil && dv.Spec.PVC != nil,
		ClaimName:      ClaimName(dv),
		Conditions:     cdiConditions(dv),
		PerDisk:        cdirules.PerDiskOf(dv.Annotations),
	}
	if dv.Status.Phase == cdiv1.Failed {
		d.FailMessage = conditionMessage(dv)
	}
	d.VolumeMode, d.AccessModes = requestedModes(dv)
	return d
}

// goldenAnnotationRef reads the golden annotation: "<name>" (in the golden
// namespace) or "<namespace>/<name>".
func GoldenAnnotationRef(v, goldenNamespace string) types.NamespacedName {
	if ns, name, ok := strings.Cut(v, "/"); ok {
		return types.NamespacedName{Namespace: ns, Name: name}
	}
	return types.NamespacedName{Namespace: goldenNamespace, Name: v}
}

// factoryFlavor reads (schematicID, version) from an Image Factory URL,
// <factory>/image/<schematicID>/<version>/<file>. Only well-formed flavors are
// returned: the URL is user input.
func FactoryFlavor(raw string) (Flavor, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return Flavor{}, false
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	for i := 0; i+2 < len(parts); i++ {
		if parts[i] != "image" {
			continue
		}
		f := Flavor{SchematicID: parts[i+1], Version: parts[i+2]}
		if len(flavorProblems(f)) == 0 {
			return f, true
		}
	}
	return Flavor{}, false
}

// requestedBytes is the DataVolume's requested size (spec.storage, else spec.pvc).
func RequestedBytes(dv *cdiv1.DataVolume) int64 {
	var rl corev1.ResourceList
	switch {
	case dv.Spec.Storage != nil:
		rl = dv.Spec.Storage.Resources.Requests
	case dv.Spec.PVC != nil:
		rl = dv.Spec.PVC.Resources.Requests
	}
	if q, ok := rl[corev1.ResourceStorage]; ok {
		return q.Value()
	}
	return 0
}

// requestedModes are the DataVolume's own volume mode and access modes.
func requestedModes(dv *cdiv1.DataVolume) (string, []string) {
	var mode *corev1.PersistentVolumeMode
	var ams []corev1.PersistentVolumeAccessMode
	switch {
	case dv.Spec.Storage != nil:
		mode, ams = dv.Spec.Storage.VolumeMode, dv.Spec.Storage.AccessModes
	case dv.Spec.PVC != nil:
		mode, ams = dv.Spec.PVC.VolumeMode, dv.Spec.PVC.AccessModes
	}
	var out []string
	for _, am := range ams {
		out = append(out, string(am))
	}
	if mode == nil {
		return "", out
	}
	return string(*mode), out
}

func requestedClass(dv *cdiv1.DataVolume) *string {
	switch {
	case dv.Spec.Storage != nil:
		return dv.Spec.Storage.StorageClassName
	case dv.Spec.PVC != nil:
		return dv.Spec.PVC.StorageClassName
	}
	return nil
}

func ClaimName(dv *cdiv1.DataVolume) string {
	if dv.Status.ClaimName != "" {
		return dv.Status.ClaimName
	}
	return dv.Name
}

// conditionMessage is the most telling condition message CDI left.
func conditionMessage(dv *cdiv1.DataVolume) string {
	for _, t := range []cdiv1.DataVolumeConditionType{cdiv1.DataVolumeRunning, cdiv1.DataVolumeReady, cdiv1.DataVolumeBound} {
		for _, c := range dv.Status.Conditions {
			if c.Type == t && c.Message != "" {
				return Clip(c.Message, 300)
			}
		}
	}
	return ""
}

func claimCapacity(pvc *corev1.PersistentVolumeClaim) int64 {
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		return q.Value()
	}
	return 0
}

// ClaimAccessModes are a claim's spec.accessModes, as names; a single mode
// (nearly every claim) is a shared slice, not to be modified, so a full
// pass over a large fleet allocates nothing for it.
func ClaimAccessModes(pvc *corev1.PersistentVolumeClaim) []string {
	if len(pvc.Spec.AccessModes) == 1 {
		if shared, ok := singleAccessModes[pvc.Spec.AccessModes[0]]; ok {
			return shared
		}
	}
	out := make([]string, len(pvc.Spec.AccessModes))
	for i, m := range pvc.Spec.AccessModes {
		out[i] = string(m)
	}
	return out
}

var singleAccessModes = map[corev1.PersistentVolumeAccessMode][]string{
	corev1.ReadWriteOnce: {string(corev1.ReadWriteOnce)}, corev1.ReadWriteMany: {string(corev1.ReadWriteMany)},
	corev1.ReadOnlyMany: {string(corev1.ReadOnlyMany)}, corev1.ReadWriteOncePod: {string(corev1.ReadWriteOncePod)},
}

func ClaimRequest(pvc *corev1.PersistentVolumeClaim) int64 {
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		return q.Value()
	}
	return 0
}

func CsiHandle(pv *corev1.PersistentVolume) string {
	if pv == nil || pv.Spec.CSI == nil {
		return ""
	}
	return pv.Spec.CSI.VolumeHandle
}
