package fleet

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

// Bare claims: a PersistentVolumeClaim that no DataVolume made, whose
// dataSourceRef (or dataSource) names a golden's claim or a golden
// VolumeSnapshot, is a disk too. CDI plays no part in it: the
// external-provisioner asks the driver for a volume with that content
// source (a CSI clone or a snapshot restore) or refuses and leaves the
// claim Pending, so it is judged from the tap and the claim alone.

// CDI's marks on the claims it makes for a DataVolume (its target claim, the
// clone populator's tmp-pvc, a snapshot clone's tmp-source-pvc), v1.65:
// pkg/controller/common/util.go, pkg/common/common.go.
const (
	annCDIPopulatorKind  = "cdi.kubevirt.io/storage.populator.kind"
	annCDIEventSource    = "cdi.kubevirt.io/events.source"
	annCDIOwnerUID       = "cdi.kubevirt.io/ownerUID"
	annCDICreatedForDV   = "cdi.kubevirt.io/createdForDataVolume"
	labelCDIComponent    = "cdi.kubevirt.io"
	labelApp             = "app"
	labelAppCDI          = "containerized-data-importer"
	kindClaim            = "PersistentVolumeClaim"
	kindVolumeSnapshot   = "VolumeSnapshot"
	groupVolumeSnapshots = "snapshot.storage.k8s.io"
)

// ClaimSource is what a claim's content comes from when it is a bare
// claim's: its dataSourceRef, else its dataSource, naming a PVC or a
// VolumeSnapshot. Nil for a claim CDI made (CDI's own claims name the
// golden too: its tmp-pvc is the golden's CSI clone) and for any other
// source (a populator's, CDI's VolumeCloneSource among them).
func ClaimSource(pvc *corev1.PersistentVolumeClaim) *corev1.TypedObjectReference {
	ref := pvc.Spec.DataSourceRef
	if ref == nil && pvc.Spec.DataSource != nil {
		ds := pvc.Spec.DataSource
		ref = &corev1.TypedObjectReference{APIGroup: ds.APIGroup, Kind: ds.Kind, Name: ds.Name}
	}
	if ref == nil || ref.Name == "" || cdiMadeClaim(pvc) {
		return nil
	}
	group := ""
	if ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	switch {
	case ref.Kind == kindClaim && group == "":
	case ref.Kind == kindVolumeSnapshot && group == groupVolumeSnapshots:
	default:
		return nil
	}
	return ref
}

// cdiMadeClaim reports whether CDI made a claim: it is owned by a
// DataVolume or carries one of CDI's marks.
func cdiMadeClaim(pvc *corev1.PersistentVolumeClaim) bool {
	for _, o := range pvc.OwnerReferences {
		if o.Kind == "DataVolume" {
			return true
		}
	}
	for _, k := range []string{annCDIPopulatorKind, annCDIEventSource, annCDIOwnerUID, annCDICreatedForDV} {
		if _, ok := pvc.Annotations[k]; ok {
			return true
		}
	}
	_, component := pvc.Labels[labelCDIComponent]
	return component || pvc.Labels[labelApp] == labelAppCDI
}

// ClaimSourceRef is the object a bare claim's content comes from, its
// namespace the claim's own unless the dataSourceRef names one (the
// CrossNamespaceVolumeDataSource feature; the API server drops the field
// where the feature is off); snapshot tells a VolumeSnapshot from a PVC.
func ClaimSourceRef(pvc *corev1.PersistentVolumeClaim) (ref types.NamespacedName, snapshot, ok bool) {
	src := ClaimSource(pvc)
	if src == nil {
		return types.NamespacedName{}, false, false
	}
	ref = types.NamespacedName{Namespace: pvc.Namespace, Name: src.Name}
	if src.Namespace != nil && *src.Namespace != "" {
		ref.Namespace = *src.Namespace
	}
	return ref, src.Kind == kindVolumeSnapshot, true
}

// ClaimSourceClaims are the claims bare claims clone: claim goldens'
// candidates, as NamedClaims.
func ClaimSourceClaims(claims []*corev1.PersistentVolumeClaim) []types.NamespacedName {
	var out []types.NamespacedName
	for _, pvc := range claims {
		if ref, snapshot, ok := ClaimSourceRef(pvc); ok && !snapshot {
			out = append(out, ref)
		}
	}
	return out
}

// AddClaimDisks adds the bare claims among claims that clone a golden of
// the golden namespaces (after AddDataVolumes, which makes the catalog).
// A claim of a DataVolume's name is that DataVolume's, never bare; a claim
// that is a golden itself (a restore that disks clone) is a golden, never
// a disk, as a golden DataVolume is.
func (inv *Inventory) AddClaimDisks(claims []*corev1.PersistentVolumeClaim, goldenNamespaces config.Namespaces) {
	if len(claims) == 0 {
		return // most passes judge no bare claim: no index of the pass's DataVolumes
	}
	dataVolumes := make(map[types.NamespacedName]bool, len(inv.dvRefs))
	for _, ref := range inv.dvRefs {
		dataVolumes[ref] = true
	}
	var disks []*WorkerDisk
	for _, pvc := range claims {
		ref, snapshot, ok := ClaimSourceRef(pvc)
		self := types.NamespacedName{Namespace: pvc.Namespace, Name: pvc.Name}
		if !ok || !goldenNamespaces.Has(ref.Namespace) || dataVolumes[self] || inv.GoldenByRef[self] != nil {
			continue
		}
		if snapshot && inv.SnapshotGoldens[ref] == nil || !snapshot && inv.GoldenByRef[ref] == nil {
			continue
		}
		disks = append(disks, newClaimDisk(pvc, inv.BoundPV(pvc), ref, snapshot))
	}
	sort.Slice(disks, func(i, j int) bool { return disks[i].Ref().String() < disks[j].Ref().String() })
	inv.Disks = append(inv.Disks, disks...)
}

// newClaimDisk is a bare claim as a disk. Its phase speaks CDI's words, as
// every disk's does: Succeeded once the claim is bound to its volume (the
// external-provisioner made it whole: there is no copy after it), Failed
// when the claim lost it, Pending before.
func newClaimDisk(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, golden types.NamespacedName, snapshot bool) *WorkerDisk {
	d := &WorkerDisk{
		Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
		Pool: poolOf(pvc.Annotations, pvc.Labels, pvc.Namespace), Kind: DiskClone, GoldenRef: golden,
		Phase: string(cdiv1.Pending), Created: pvc.CreationTimestamp.Time,
		RequestedBytes: ClaimRequest(pvc), RequestedClass: pvc.Spec.StorageClassName,
		ClaimName: pvc.Name, AccessModes: ClaimAccessModes(pvc),
		FromPVC: !snapshot, FromSnapshot: snapshot, BareClaim: true,
	}
	if pvc.Spec.VolumeMode != nil {
		d.VolumeMode = string(*pvc.Spec.VolumeMode)
	}
	switch {
	case pvc.Status.Phase == corev1.ClaimBound && pv != nil:
		d.Phase = string(cdiv1.Succeeded)
		d.ReadySince, d.BoundSince = pv.CreationTimestamp.Time, pv.CreationTimestamp.Time
	case pvc.Status.Phase == corev1.ClaimLost:
		d.Phase, d.FailMessage = string(cdiv1.Failed), "the claim lost its volume (phase Lost)"
	}
	return d
}

// IndexByClaimSource: a bare claim by what it clones in a golden
// namespace, ClaimSourceKey's value.
const IndexByClaimSource = "claimsource"

// ClaimSourceKey is the index value of what a bare claim clones: the
// claim's namespace/name, a VolumeSnapshot's behind "snapshot:".
func ClaimSourceKey(ref types.NamespacedName, snapshot bool) string {
	if snapshot {
		return "snapshot:" + ref.String()
	}
	return ref.String()
}

// ClaimIndexers index the claim cache by what bare claims clone in the
// golden namespaces; every other claim is left out (sparse).
func ClaimIndexers(goldenNamespaces config.Namespaces) cache.Indexers {
	return cache.Indexers{IndexByClaimSource: func(obj any) ([]string, error) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
			if ref, snapshot, ok := ClaimSourceRef(pvc); ok && goldenNamespaces.Has(ref.Namespace) {
				return []string{ClaimSourceKey(ref, snapshot)}, nil
			}
		}
		return nil, nil
	}}
}

// BareClaimKeys are the keys of every claim the index holds.
func BareClaimKeys(idx cache.Indexer) []string {
	var out []string
	for _, v := range idx.ListIndexFuncValues(IndexByClaimSource) {
		keys, _ := idx.IndexKeys(IndexByClaimSource, v)
		out = append(out, keys...)
	}
	return out
}
