package cdirules

import (
	"fmt"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Source is what CDI reads of the source claim of a clone (the golden's PVC).
type Source struct {
	// Class is the claim's class; Driver its bound PV's CSI driver ("":
	// unbound, the class's provisioner is used, clone/common.go GetCommonDriver).
	Class, Driver string
	// VolumeMode is the claim's (Block or Filesystem).
	VolumeMode string
	// RequestBytes is spec.resources.requests.storage, CapacityBytes
	// status.capacity.storage (0: not bound yet).
	RequestBytes, CapacityBytes int64
	// ContentType is the annotation cdi.kubevirt.io/storage.contentType as
	// written ("" none).
	ContentType string
	// VirtualSize is the image's virtual size CDI recorded on the claim
	// (annotations cdi.Kubervirt.io/virtualSize, valid while
	// cdi.Kubervirt.io/sourceCapacity equals the capacity); 0 unknown.
	VirtualSize int64
}

// NeedsImageSize reports whether CDI sizes a clone of this source with a size-detection
// pod reading the image's virtual size (pvc-clone-controller.go
// detectCloneSize: a Filesystem source whose content type is explicitly
// kubevirt).
func (s Source) NeedsImageSize() bool {
	return resolveMode(s.VolumeMode) == Filesystem && s.ContentType == ContentKubeVirt
}

// CloneSize is pvc-clone-controller.go detectCloneSize for a spec.storage
// clone: the request a claim without a size gets (the source's capacity,
// or its image's virtual size, inflated for a Filesystem target), and
// whether CDI marks the clone permissive (skipping the planner's size
// validation). known is false while the size needs an image size CDI has
// not recorded (the size-detection pod has not run). A claim with a size
// keeps it.
func CloneSize(c Claim, src Source, d Defaults, env Env) (bytes int64, permissive, known bool) {
	sizeRequired := c.Bytes == 0
	if !sizeRequired && (c.VolumeMode != Block || !src.NeedsImageSize()) {
		return c.Bytes, false, true
	}
	target := src.CapacityBytes
	if src.NeedsImageSize() {
		if src.VirtualSize == 0 {
			return c.Bytes, false, false
		}
		target = src.VirtualSize
	}
	if !sizeRequired {
		return c.Bytes, c.Bytes >= target, true
	}
	permissive = src.CapacityBytes > target
	return Inflate(target, c.VolumeMode, c.Class, c.HasClass, d, env), permissive, true
}

// ValidateClone is pvc-clone-controller.go validateClone, run on the
// DataVolume before any claim exists (a failure is the CloneValidationFailed
// event, and the clone waits for ever): content types must match; a spec.pvc
// request, or a sized spec.storage one of a Block source (raised to the
// minimum supported size, no overhead), may not be below the source claim's
// request.
func ValidateClone(dv DataVolume, src Source, d Defaults, env Env) error {
	target := ContentType(dv.ContentType)
	if source := ContentType(src.ContentType); source != target {
		return fmt.Errorf("Source contentType (%s) and target contentType (%s) do not match", source, target)
	}
	switch {
	case dv.Kind == KindPVC:
		return validateRequestedCloneSize(src.RequestBytes, dv.Bytes)
	case dv.Bytes != 0 && resolveMode(src.VolumeMode) == Block:
		bytes := dv.Bytes
		if class := storageClassForEffectiveSize(dv, d, env); class != "" {
			bytes = EffectiveSize(bytes, env.Profiles[class])
		}
		return validateRequestedCloneSize(src.RequestBytes, bytes)
	}
	return nil
}

// storageClassForEffectiveSize is the class common/util.go
// GetEffectiveStorageResources looks the minimum size up for: the
// DataVolume's class with the virtualization fallback, if it exists.
func storageClassForEffectiveSize(dv DataVolume, d Defaults, env Env) string {
	name := ""
	if dv.Class != nil {
		name = *dv.Class
	} else {
		name = FallbackClass(KindStorage, dv.ContentType, d)
	}
	if env.Classes[name] == nil {
		return ""
	}
	return name
}

// validateRequestedCloneSize is common/util.go ValidateRequestedCloneSize.
func validateRequestedCloneSize(source, target int64) error {
	if source == 0 || target == 0 {
		return fmt.Errorf("source/target missing storage resource requests")
	}
	if source > target {
		return fmt.Errorf("target resources requests storage size is smaller than the source %d < %d", target, source)
	}
	return nil
}

// LargestImage is the largest image size whose Filesystem claim, with the
// overhead, fits capacity (the inverse of RequiredSpace, in whole MiB).
func LargestImage(capacity int64, overhead float64) int64 {
	lo, hi := int64(0), capacity/alignment
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if RequiredSpace(overhead, mid*alignment) <= capacity {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo * alignment
}

// DataSourcePVC is the PVC a DataVolume's sourceRef to a DataSource clones
// (datavolume/clone-controller-base.go populateSourceIfSourceRef): the
// DataSource's spec.source.pvc, or its status.source.pvc when it refers to
// another DataSource. A PVC namespace "" is read as the DataVolume's own
// (findSourcePvc), not the DataSource's. nil: no PVC (a snapshot, or not
// ready).
func DataSourcePVC(ds *cdiv1.DataSource) *cdiv1.DataVolumeSourcePVC {
	return dataSourceSource(ds).PVC
}

// DataSourceSnapshot is the VolumeSnapshot a DataVolume's sourceRef to a
// DataSource clones, resolved as DataSourcePVC resolves a PVC (a namespace
// "" is the DataVolume's own); nil: none.
func DataSourceSnapshot(ds *cdiv1.DataSource) *cdiv1.DataVolumeSourceSnapshot {
	return dataSourceSource(ds).Snapshot
}

// dataSourceSource is populateSourceIfSourceRef's source: the spec's, or
// the status's when the spec refers to another DataSource.
func dataSourceSource(ds *cdiv1.DataSource) cdiv1.DataSourceSource {
	if ds.Spec.Source.DataSource != nil {
		return ds.Status.Source
	}
	return ds.Spec.Source
}
