package fleet

import (
	"bytes"
	"sort"
	"strings"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

// What the informers keep. Each object is trimmed as it enters the cache
// (informer transforms) to the fields the cloner reads: the verdicts, the
// evidence, the report and the events. Kept: name, namespace, UID,
// resourceVersion, creation and deletion time, the annotations in
// readAnnotations, a verdict record only as its digest (recorddigest.go)
// (every other annotation, the labels, owner references,
// finalizers and managedFields go), and a DataVolume's status with its
// conditions. Dropped too: the spec fields nothing here reads (a PV's node
// affinity, volume attributes, mount options; a DataVolume's checkpoints,
// selectors and preallocation). Strings most disks share (namespaces, class
// and driver names, short annotation values such as a verdict word or a
// pool name) are interned, so 10,000 disks hold one copy of each. A
// DataVolume is kept typed instead of as an unstructured map, which is
// several times larger. The per-disk cost this gives is in the README's
// Scale section.

const AnnLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// cachedDataVolume is a DataVolume as the cache keeps it: typed and trimmed,
// or, when it cannot be read, only its identity and readErr, so that a bad
// object is reported and skipped without stopping the others.
type CachedDataVolume struct {
	cdiv1.DataVolume
	ReadErr string
}

// readAnnotations are the annotations a reader of the cache uses, on
// DataVolumes, PVCs and PVs. An annotation read from a cached object must be
// listed here (TestCacheKeepsWhatTheClonerReads).
var ReadAnnotations = []string{
	AnnSchematicID, AnnTalosVersion, AnnGolden, AnnPool, // the feature's, on DataVolumes
	AnnImageName,                                                      // vm-default-images', on its goldens
	AnnCloneVerdict, AnnCloneEvidence, AnnDriverError, AnnCSIEvidence, // ours, on PVCs and PVs
	AnnCDICloneType, AnnCDIFallbackReason, AnnCDIClonePhase, AnnCDICloneError, // CDI's, on PVCs
	cdirules.AnnContentType, cdirules.AnnVirtualSize, cdirules.AnnSourceCapacity, // CDI's, on a golden's PVC
	cdirules.AnnUsePopulator, cdirules.AnnPermissiveClone, // per disk, on DataVolumes (cloneType is AnnCDICloneType)
	AnnAllowVolumeModeChange, // the external-provisioner's, on VolumeSnapshotContents (cached whole but managedFields)
}

// ReadLabels are the labels a reader of the cache uses: the pool of a disk
// without the pool annotation (vm-disk's release).
var ReadLabels = []string{LabelInstance}

// internMax bounds the annotation values interned: verdict words, clone
// types, pool and golden names repeat across the fleet; evidence JSON is
// unique per disk.
const internMax = 128

// intern returns the canonical copy of a string many cached objects share.
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

func internPtr(s *string) *string {
	if s == nil {
		return nil
	}
	v := intern(*s)
	return &v
}

// sharedTable holds one copy of each value many cached objects carry the
// same: nearly every disk of a fleet asks for and gets one of a few sizes,
// and the disks of a pool carry the same golden and pool annotations. Each
// such value is a map of several hundred bytes per object. Informer objects
// are never written to, so sharing one map among them is safe. A table is
// bounded: past sharedTableMax distinct values, new ones stay unshared.
type sharedTable[V any] struct {
	mu     sync.Mutex
	values map[string]V
}

const sharedTableMax = 4096

// share returns the table's copy of v, whose content key is.
func (t *sharedTable[V]) share(key string, v V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if shared, ok := t.values[key]; ok {
		return shared
	}
	if t.values == nil {
		t.values = map[string]V{}
	}
	if len(t.values) < sharedTableMax {
		t.values[key] = v
	}
	return v
}

var (
	sharedResources   sharedTable[corev1.ResourceList]
	sharedAnnotations sharedTable[map[string]string]
)

// internResources returns the shared copy of a resource list.
func internResources(rl corev1.ResourceList) corev1.ResourceList {
	if len(rl) == 0 {
		return nil
	}
	names := make([]string, 0, len(rl))
	for name := range rl {
		names = append(names, string(name))
	}
	sort.Strings(names)
	var key strings.Builder
	for _, name := range names {
		q := rl[corev1.ResourceName(name)]
		key.WriteString(name + "=" + q.String() + "\x00")
	}
	return sharedResources.share(key.String(), rl)
}

// The usual access modes and volume modes, shared like the resource lists.
var (
	sharedAccessModes = map[corev1.PersistentVolumeAccessMode][]corev1.PersistentVolumeAccessMode{}
	sharedVolumeModes = map[corev1.PersistentVolumeMode]*corev1.PersistentVolumeMode{}
)

func init() {
	for _, m := range []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod} {
		sharedAccessModes[m] = []corev1.PersistentVolumeAccessMode{m}
	}
	for _, m := range []corev1.PersistentVolumeMode{corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem} {
		sharedVolumeModes[m] = &m
	}
}

// accessModes returns the shared copy of a single usual access mode.
func accessModes(ms []corev1.PersistentVolumeAccessMode) []corev1.PersistentVolumeAccessMode {
	if len(ms) == 1 {
		if shared, ok := sharedAccessModes[ms[0]]; ok {
			return shared
		}
	}
	return ms
}

func volumeMode(m *corev1.PersistentVolumeMode) *corev1.PersistentVolumeMode {
	if m != nil {
		if shared, ok := sharedVolumeModes[*m]; ok {
			return shared
		}
	}
	return m
}

// trimMeta keeps of an object's metadata what a reader of the cache uses.
// The annotations are copied into a new map keyed by readAnnotations' own
// strings, so the decoded map and its keys are freed.
func trimMeta(m *metav1.ObjectMeta) {
	kept := metav1.ObjectMeta{Name: m.Name, Namespace: intern(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp}
	var key strings.Builder // the kept annotations, shared when all are short
	shareable := true
	for _, k := range ReadAnnotations {
		v, ok := m.Annotations[k]
		if !ok {
			continue
		}
		if kept.Annotations == nil {
			kept.Annotations = make(map[string]string, 4)
		}
		if len(v) <= internMax {
			v = intern(v)
			key.WriteString(k + "=" + v + "\x00")
		} else {
			shareable = false // evidence: unique per object
		}
		kept.Annotations[k] = v
	}
	if kept.Annotations != nil && shareable {
		kept.Annotations = sharedAnnotations.share(key.String(), kept.Annotations)
	}
	for _, k := range ReadLabels {
		if v, ok := m.Labels[k]; ok {
			if kept.Labels == nil {
				kept.Labels = make(map[string]string, 1)
			}
			kept.Labels[k] = intern(v)
		}
	}
	*m = kept
}

// cacheDataVolume is the DataVolume informer's transform.
func CacheDataVolume(obj any) (any, error) {
	switch o := obj.(type) {
	case *CachedDataVolume:
		return o, nil // already transformed (a watch-list's items are passed twice)
	case *unstructured.Unstructured:
		return ReadDataVolume(o), nil
	}
	return obj, nil
}

// readDataVolume converts and trims an unstructured DataVolume.
func ReadDataVolume(u *unstructured.Unstructured) *CachedDataVolume {
	dv, err := toDataVolume(u)
	if err != nil {
		c := &CachedDataVolume{ReadErr: Clip(err.Error(), 300)}
		c.TypeMeta = metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}
		c.ObjectMeta = metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(),
			ResourceVersion: u.GetResourceVersion(), CreationTimestamp: u.GetCreationTimestamp()}
		return c
	}
	for _, key := range perDiskInputs {
		if isCDIsOwn(dv.ManagedFields, key) {
			delete(dv.Annotations, key)
		}
	}
	trimMeta(&dv.ObjectMeta)
	spec := cdiv1.DataVolumeSpec{Source: dv.Spec.Source, SourceRef: dv.Spec.SourceRef, ContentType: dv.Spec.ContentType}
	if s := dv.Spec.Storage; s != nil {
		spec.Storage = &cdiv1.StorageSpec{AccessModes: accessModes(s.AccessModes), Resources: resources(s.Resources),
			VolumeMode: volumeMode(s.VolumeMode), StorageClassName: internPtr(s.StorageClassName)}
	}
	if p := dv.Spec.PVC; p != nil {
		spec.PVC = claimSpec(p)
	}
	dv.Spec = spec
	dv.Status = dataVolumeStatus(dv.Status)
	return &CachedDataVolume{DataVolume: *dv}
}

// perDiskInputs are the DataVolume annotations CDI obeys for one disk, and
// also writes there itself once it has decided: the strategy it chose
// (cloneType) and whether it used its populators (storage.usePopulator).
var perDiskInputs = []string{cdirules.AnnCloneType, cdirules.AnnUsePopulator, cdirules.AnnPermissiveClone}

// isCDIsOwn tells whether a DataVolume's annotation key is CDI's own record
// of a decision, not a per-disk input: whoever writes the DataVolume's
// status is CDI, so the annotation is CDI's when every field manager owning
// it also writes the status. A user's (kubectl, Helm, virt-controller's
// dataVolumeTemplates) stays theirs: CDI writing the same value takes no
// ownership. TestCDIsOwnCloneTypeIsNoPerDiskInput (test/e2e) reads the
// managedFields cdi-controller v1.65 leaves.
func isCDIsOwn(fields []metav1.ManagedFieldsEntry, key string) bool {
	statusWriters := map[string]bool{}
	for _, f := range fields {
		// The status subresource, or the status itself where a CRD has none.
		if f.Subresource == "status" || (f.FieldsV1 != nil && bytes.Contains(f.FieldsV1.Raw, statusField)) {
			statusWriters[f.Manager] = true
		}
	}
	field := []byte(`"f:` + key + `"`)
	owned := false
	for _, f := range fields {
		if f.Subresource != "" || f.FieldsV1 == nil || !bytes.Contains(f.FieldsV1.Raw, field) {
			continue
		}
		if !statusWriters[f.Manager] {
			return false
		}
		owned = true
	}
	return owned
}

// statusField is how managedFields name the status.
var statusField = []byte(`"f:status":`)

// dataVolumeStatus keeps a DataVolume's phase, claim, restarts and
// conditions, their repeated words shared.
func dataVolumeStatus(st cdiv1.DataVolumeStatus) cdiv1.DataVolumeStatus {
	out := cdiv1.DataVolumeStatus{ClaimName: st.ClaimName, Phase: cdiv1.DataVolumePhase(intern(string(st.Phase))), RestartCount: st.RestartCount}
	if len(st.Conditions) > 0 {
		// Sized once: appended, CDI's three conditions took room for
		// four (448 bytes a DataVolume instead of 352, 1 MB at 10,000).
		out.Conditions = make([]cdiv1.DataVolumeCondition, 0, len(st.Conditions))
	}
	for _, c := range st.Conditions {
		c.Type = cdiv1.DataVolumeConditionType(intern(string(c.Type)))
		c.Status = corev1.ConditionStatus(intern(string(c.Status)))
		c.Reason = intern(c.Reason)
		if len(c.Message) <= internMax {
			c.Message = intern(c.Message)
		}
		out.Conditions = append(out.Conditions, c)
	}
	return out
}

// TrimClaim keeps of a claim what the cloner reads; of its data source
// only a bare claim's (ClaimSource), as its dataSourceRef.
func TrimClaim(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	source := trimSource(ClaimSource(pvc))
	trimMeta(&pvc.ObjectMeta)
	pvc.Spec = *claimSpec(&pvc.Spec)
	pvc.Spec.DataSourceRef = source
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: pvc.Status.Phase, Capacity: internResources(pvc.Status.Capacity)}
	return pvc
}

func trimSource(ref *corev1.TypedObjectReference) *corev1.TypedObjectReference {
	if ref == nil {
		return nil
	}
	out := &corev1.TypedObjectReference{APIGroup: internPtr(ref.APIGroup), Kind: intern(ref.Kind), Name: ref.Name}
	if ref.Namespace != nil {
		out.Namespace = internPtr(ref.Namespace)
	}
	return out
}

func resources(r corev1.VolumeResourceRequirements) corev1.VolumeResourceRequirements {
	return corev1.VolumeResourceRequirements{Requests: internResources(r.Requests), Limits: internResources(r.Limits)}
}

// claimSpec is the part of a PVC's spec (or a DataVolume's spec.pvc) the
// cloner reads.
func claimSpec(p *corev1.PersistentVolumeClaimSpec) *corev1.PersistentVolumeClaimSpec {
	return &corev1.PersistentVolumeClaimSpec{AccessModes: accessModes(p.AccessModes), Resources: resources(p.Resources),
		VolumeMode: volumeMode(p.VolumeMode), StorageClassName: internPtr(p.StorageClassName), VolumeName: p.VolumeName}
}

// cacheVolume is the PV transform for the default golden namespace.
var CacheVolume = CacheVolumeFor(config.Namespaces{config.DefaultGoldenNamespace})

// cacheVolumeFor is the PV informer's transform: the CSI source keeps only
// the driver and the handle; a PV of another kind keeps no source at all.
// A golden's PV (claimed in a golden namespace) keeps its node affinity too:
// the clone-path prediction reads where a golden's volume lives.
func CacheVolumeFor(goldenNamespaces config.Namespaces) cache.TransformFunc {
	return func(obj any) (any, error) {
		pv, ok := obj.(*corev1.PersistentVolume)
		if !ok {
			return obj, nil
		}
		trimMeta(&pv.ObjectMeta)
		var src corev1.PersistentVolumeSource
		if c := pv.Spec.CSI; c != nil {
			src.CSI = &corev1.CSIPersistentVolumeSource{Driver: intern(c.Driver), VolumeHandle: c.VolumeHandle}
		}
		pv.Spec.PersistentVolumeSource = src
		pv.Spec.MountOptions = nil
		pv.Spec.StorageClassName = intern(pv.Spec.StorageClassName)
		pv.Spec.Capacity = internResources(pv.Spec.Capacity)
		pv.Spec.AccessModes, pv.Spec.VolumeMode = accessModes(pv.Spec.AccessModes), volumeMode(pv.Spec.VolumeMode)
		pv.Status.Message, pv.Status.Reason = "", ""
		r := pv.Spec.ClaimRef
		if r == nil || !goldenNamespaces.Has(r.Namespace) {
			pv.Spec.NodeAffinity = nil
		}
		if r != nil {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: intern(r.Namespace), Name: r.Name, UID: r.UID}
		}
		return pv, nil
	}
}

// cacheUnstructured is the transform of the other dynamic informers
// (VolumeSnapshotContents): only managedFields go.
func CacheUnstructured(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
	}
	return obj, nil
}
