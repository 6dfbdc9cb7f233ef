package fleet

import (
	"fmt"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

// AnnAllowVolumeModeChange on a VolumeSnapshotContent lets the
// external-provisioner restore it into another volume mode
// (external-provisioner pkg/controller/controller.go getSnapshotSource,
// strconv.ParseBool of the value).
const AnnAllowVolumeModeChange = "snapshot.storage.kubernetes.io/allow-volume-mode-change"

// ReadSnapshot reads what CDI and the external-provisioner read of a
// golden VolumeSnapshot and its bound content (cdirules.Snapshot): nil vs
// is a missing snapshot. CDI's snapshot-clone-controller.go
// validateSnapshotClone reads status, status.error (its message, "no
// details" without one), spec.volumeSnapshotClassName;
// detectCloneSize status.restoreSize; planner.go
// computeStrategyForSourceSnapshot the content named by
// status.boundVolumeSnapshotContentName (content looks it up; false: gone),
// its spec.driver and spec.sourceVolumeMode; the external-provisioner its
// allow-volume-mode-change annotation. A field of the wrong type or a
// restore size that does not parse is an error: the object is malformed.
func ReadSnapshot(vs *unstructured.Unstructured, content func(name string) (*unstructured.Unstructured, bool)) (cdirules.Snapshot, error) {
	if vs == nil {
		return cdirules.Snapshot{}, nil
	}
	s := cdirules.Snapshot{Exists: true}
	var err error
	if s.SnapshotClass, _, err = unstructured.NestedString(vs.Object, "spec", "volumeSnapshotClassName"); err != nil {
		return s, err
	}
	if raw, ok := vs.Object["status"]; !ok || raw == nil {
		return s, nil // status: null decodes as no status, as CDI's typed client reads it
	}
	status, _, err := unstructured.NestedMap(vs.Object, "status")
	if err != nil {
		return s, err
	}
	s.HasStatus = true
	if e, ok := status["error"]; ok && e != nil {
		s.Error = "no details"
		if msg, ok, err := unstructured.NestedString(status, "error", "message"); err != nil {
			return s, err
		} else if ok {
			s.Error = msg
		}
	}
	if s.RestoreBytes, s.HasRestoreSize, err = restoreSize(status); err != nil {
		return s, err
	}
	name, _, err := unstructured.NestedString(status, "boundVolumeSnapshotContentName")
	if err != nil || name == "" {
		return s, err
	}
	c, found := content(name)
	if !found {
		return s, nil
	}
	s.ContentBound = true
	if s.Driver, _, err = unstructured.NestedString(c.Object, "spec", "driver"); err != nil {
		return s, err
	}
	if s.SourceVolumeMode, _, err = unstructured.NestedString(c.Object, "spec", "sourceVolumeMode"); err != nil {
		return s, err
	}
	s.AllowVolumeModeChange, _ = strconv.ParseBool(c.GetAnnotations()[AnnAllowVolumeModeChange])
	return s, nil
}

// restoreSize is status.restoreSize, a quantity (a string, or a number as
// JSON may carry it).
func restoreSize(status map[string]any) (int64, bool, error) {
	v, ok := status["restoreSize"]
	if !ok || v == nil {
		return 0, false, nil
	}
	var text string
	switch x := v.(type) {
	case string:
		text = x
	case int64:
		return x, true, nil
	case float64:
		text = strconv.FormatFloat(x, 'f', -1, 64)
	default:
		return 0, false, fmt.Errorf("status.restoreSize: %T, not a quantity", v)
	}
	q, err := resource.ParseQuantity(text)
	if err != nil {
		return 0, false, fmt.Errorf("status.restoreSize %q: %w", text, err)
	}
	return q.Value(), true, nil
}

// AddSnapshots makes an image golden of every VolumeSnapshot of the golden
// namespaces (a disk restoring one is a clone of it); one that cannot be
// read is malformed and skipped. Call it before AddDataVolumes, which
// classifies the disks against them.
func (inv *Inventory) AddSnapshots(snapshots []*unstructured.Unstructured, goldenNamespaces config.Namespaces) {
	sort.Slice(snapshots, func(i, j int) bool {
		a, b := snapshots[i], snapshots[j]
		return a.GetNamespace() < b.GetNamespace() || a.GetNamespace() == b.GetNamespace() && a.GetName() < b.GetName()
	})
	content := func(name string) (*unstructured.Unstructured, bool) {
		c, ok := inv.contents[name]
		return c, ok
	}
	for _, vs := range snapshots {
		if !goldenNamespaces.Has(vs.GetNamespace()) {
			continue
		}
		s, err := ReadSnapshot(vs, content)
		if err != nil {
			inv.Malformed = append(inv.Malformed, MalformedFrom(vs, err))
			continue
		}
		g := inv.snapshotGolden(vs, s)
		inv.Images = append(inv.Images, g)
		inv.SnapshotGoldens[g.Ref()] = g
	}
}

// snapshotGolden is the golden of a readable VolumeSnapshot: sized at its
// restore size, of its content's source volume mode, on the class of the
// claim it was cut from while that claim exists.
func (inv *Inventory) snapshotGolden(vs *unstructured.Unstructured, s cdirules.Snapshot) *Golden {
	g := &Golden{Namespace: vs.GetNamespace(), Name: vs.GetName(), UID: vs.GetUID(), Created: vs.GetCreationTimestamp().Time,
		Image: ImageIdentity(vs.GetName(), vs.GetAnnotations()), Phase: string(cdiv1.Pending), Snapshot: &s,
		RequestedBytes: s.RestoreBytes, CapacityBytes: s.RestoreBytes, VolumeMode: s.SourceVolumeMode,
		Class: ClassResolution{How: ClassUnresolved}}
	if ready, _, _ := unstructured.NestedBool(vs.Object, "status", "readyToUse"); ready {
		g.Phase = string(cdiv1.Succeeded)
	}
	if name, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName"); name != "" {
		if c := inv.contents[name]; c != nil {
			g.SnapshotHandle, _, _ = unstructured.NestedString(c.Object, "status", "snapshotHandle")
		}
	}
	if claim, _, _ := unstructured.NestedString(vs.Object, "spec", "source", "persistentVolumeClaimName"); claim != "" {
		if pvc := inv.ClaimOf(g.Namespace, claim); pvc != nil && pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName != "" {
			g.Class = ClassResolution{Name: *pvc.Spec.StorageClassName, How: ClassFromSnapshotSource}
		}
	}
	return g
}
