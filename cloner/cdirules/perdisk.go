package cdirules

import (
	"fmt"
	"strconv"
)

// The per-disk annotations CDI reads on a clone DataVolume. CDI copies every
// annotation of the DataVolume onto the claim it creates
// (datavolume/controller-base.go newPersistentVolumeClaim), so the claim
// carries them too.
const (
	// AnnCloneType: the clone populator obeys a strategy already on the
	// claim as is (populators/clone-populator.go getCloneStrategy,
	// getSavedCloneStrategy), skipping the planner's choice, its validation
	// and its fallbacks.
	AnnCloneType = "cdi.kubevirt.io/cloneType"
	// AnnUsePopulator: "false" sends the DataVolume down the legacy
	// host-assisted path, "true" to the populators even without a CSIDriver
	// object; a value strconv.ParseBool refuses is an error CDI retries for
	// ever (datavolume/controller-base.go shouldUseCDIPopulator).
	AnnUsePopulator = "cdi.kubevirt.io/storage.usePopulator"
	// AnnPermissiveClone: present (any value), the planner skips its size
	// check (clone/planner.go validateSourcePVC). CDI sets it itself for a
	// clone it sized (pvc-clone-controller.go detectCloneSize).
	AnnPermissiveClone = "cdi.kubevirt.io/permissiveClone"

	// NoPopulatorMessage is the legacy path's fallback message
	// (datavolume/clone-controller-base.go NoPopulatorMessage).
	NoPopulatorMessage = "In tree storage class does not support snapshot/clone"
)

// PerDisk are the per-disk annotations of a DataVolume (or of its claim).
type PerDisk struct {
	// CloneType is cdi.kubevirt.io/cloneType as written; nil: absent.
	CloneType *string
	// UsePopulator is cdi.kubevirt.io/storage.usePopulator as written; nil:
	// absent.
	UsePopulator *string
	// Permissive: cdi.kubevirt.io/permissiveClone is present.
	Permissive bool
}

// PerDiskOf reads the per-disk annotations from an object's annotations.
func PerDiskOf(annotations map[string]string) PerDisk {
	var p PerDisk
	if v, ok := annotations[AnnCloneType]; ok {
		p.CloneType = &v
	}
	if v, ok := annotations[AnnUsePopulator]; ok {
		p.UsePopulator = &v
	}
	_, p.Permissive = annotations[AnnPermissiveClone]
	return p
}

// Annotations writes the per-disk annotations back as annotations (nil when
// there are none).
func (p PerDisk) Annotations() map[string]string {
	if p.CloneType == nil && p.UsePopulator == nil && !p.Permissive {
		return nil
	}
	out := map[string]string{}
	if p.CloneType != nil {
		out[AnnCloneType] = *p.CloneType
	}
	if p.UsePopulator != nil {
		out[AnnUsePopulator] = *p.UsePopulator
	}
	if p.Permissive {
		out[AnnPermissiveClone] = "true"
	}
	return out
}

// UsePopulator is datavolume/controller-base.go shouldUseCDIPopulator: the
// annotation when present (an error when strconv.ParseBool refuses it; CDI
// returns the error from its sync, retries with backoff, and the
// DataVolume stays Pending with no claim and no event), else whether the
// claim's class's provisioner has a CSIDriver object
// (datavolume/util.go storageClassCSIDriverExists).
func (c Cluster) UsePopulator(p PerDisk, claim Claim) (bool, error) {
	if p.UsePopulator != nil {
		use, err := strconv.ParseBool(*p.UsePopulator)
		if err != nil {
			return false, fmt.Errorf("%s %q: %w", AnnUsePopulator, *p.UsePopulator, err)
		}
		return use, nil
	}
	name := claim.Class
	if !claim.HasClass {
		name = c.Defaults.Kubernetes
	}
	sc := c.Classes[name]
	return sc != nil && c.CSIDrivers[sc.Provisioner], nil
}

// obeyed is what the clone populator does with a strategy already on the
// claim (getSavedCloneStrategy): no choice, no validation, no fallback;
// clone/planner.go Plan plans it as it is, and a storage-layer clone larger
// than its source then fails where the fallback would have copied
// (resizeRefused).
func (c Cluster) obeyed(src Source, claim Claim, strategy string) Outcome {
	o := Outcome{CloneType: strategy, Strategy: strategy, StrategyFrom: FromAnnotation}
	switch strategy {
	case StrategyCopy:
		return o
	case StrategyCSIClone, StrategySnapshot:
		if strategy == StrategySnapshot {
			if o = c.planSnapshot(o, claim); o.Error != "" {
				return o
			}
		}
		if o.Stuck = c.provisionerRefuses(src, claim); o.Stuck != "" {
			return o
		}
		return c.resizeRefused(o, src, claim)
	}
	o.Error = fmt.Sprintf("unknown strategy/source %s", strategy)
	return o
}

// What the external-provisioner refuses when CDI obeys a cloneType it would
// not have chosen (Outcome.Stuck).
const (
	// StuckDriver: the source volume is another driver's
	// ("claim in dataSource not bound or invalid", or the snapshot content
	// "is not handled by CSI driver of StorageClass").
	StuckDriver = "driver"
	// StuckVolumeMode: the claim asks another volume mode than the
	// source's ("must have the same volume mode for cloning", or a restore
	// that "modifies the mode of the source volume").
	StuckVolumeMode = "volume mode"
)

// provisionerRefuses is external-provisioner v6.4.0's getPVCSource and
// getSnapshotSource (pkg/controller/controller.go) on the claim CDI makes
// for an obeyed storage-layer clone: CDI's tmp claim has the disk's class and
// volume mode; the provisioner checks the source's driver first, then the
// volume mode (a snapshot restore refuses a mode change, its
// --prevent-volume-mode-conversion is on by default). It retries for ever.
func (c Cluster) provisionerRefuses(src Source, claim Claim) string {
	driver := src.Driver
	if driver == "" {
		if sc := c.Classes[src.Class]; sc != nil {
			driver = sc.Provisioner
		}
	}
	if sc := c.Classes[claim.Class]; sc != nil && driver != "" && sc.Provisioner != driver {
		return StuckDriver
	}
	mode := claim.VolumeMode
	if mode == "" {
		mode = Filesystem
	}
	if src.VolumeMode != "" && mode != src.VolumeMode {
		return StuckVolumeMode
	}
	return ""
}

// ErrResizeRefused is the words of the API server's PersistentVolumeClaimResize
// admission, which CDI records as the clone's error.
const ErrResizeRefused = "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"

// resizeRefused: a storage-layer clone makes its temporary claim at the
// source's capacity (clone/csi-clone.go createClaim; a snapshot restores at
// its size), then clone/prep-claim.go PrepClaimPhase raises the claim's
// request to the disk's. On a class without allowVolumeExpansion the API
// server refuses that update and the clone fails with its words.
func (c Cluster) resizeRefused(o Outcome, src Source, claim Claim) Outcome {
	sc := c.Classes[claim.Class]
	expand := sc != nil && sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
	if src.CapacityBytes > 0 && claim.Bytes > src.CapacityBytes && !expand {
		o.Error = ErrResizeRefused
	}
	return o
}

// planSnapshot is clone/planner.go planSnapshotFromPVC's choice of the
// snapshot class: GetCompatibleVolumeSnapshotClass of the target claim
// alone, its class's provisioner and its own StorageProfile's
// status.snapshotClass (the strategy's choice compared both claims').
func (c Cluster) planSnapshot(o Outcome, claim Claim) Outcome {
	sc := c.Classes[claim.Class]
	if sc == nil {
		o.Error = ErrNoCompatibleSnapshotClass
		return o
	}
	named := ""
	if sp := c.Profiles[claim.Class]; sp != nil && sp.Status.SnapshotClass != nil {
		named = *sp.Status.SnapshotClass
	}
	_, found, missing := SnapshotClassFor(c.SnapshotClasses, sc.Provisioner, named)
	switch {
	case missing:
		o.Error = snapshotClassNotFound(named)
	case !found:
		o.Error = ErrNoCompatibleSnapshotClass
	}
	return o
}

// ErrNoCompatibleSnapshotClass is planSnapshotFromPVC's error when the
// target claim alone finds no VolumeSnapshotClass.
const ErrNoCompatibleSnapshotClass = "no compatible volumesnapshotclass"

// snapshotClassNotFound is the API's NotFound error for a named
// VolumeSnapshotClass (common/util.go GetVolumeSnapshotClass returns it).
func snapshotClassNotFound(name string) string {
	return fmt.Sprintf("volumesnapshotclasses.snapshot.storage.k8s.io %q not found", name)
}

// AdvisesCopy reports whether CDI's capabilities table advises the copy
// strategy for a provisioner (storagecapabilities.go
// CloneStrategyByProvisionerKey, the entries of CloneStrategyHostAssisted):
// a StorageProfile of its class derives copy whatever VolumeSnapshotClasses
// exist.
func AdvisesCopy(provisioner string) bool {
	switch provisioner {
	case "csi-powerstore.dellemc.com", "vpc.block.csi.ibm.io", "topolvm.cybozu.com", "topolvm.io":
		return true
	}
	return false
}
