package cdirules

import (
	"errors"
	"fmt"
)

// A clone from a VolumeSnapshot (a DataVolume's spec.source.snapshot, or a
// DataSource naming one): CDI v1.65 restores the snapshot; no clone
// strategy is chosen, so the override, the StorageProfile and the
// VolumeSnapshotClasses do not count.

// FallbackNoProvisionerMatch: the snapshot is another driver's than the
// target class's (clone/planner.go computeStrategyForSourceSnapshot).
const FallbackNoProvisionerMatch = "NoProvisionerMatch"

// FromSource: the strategy is the source's kind (a snapshot is restored),
// not a choice.
const FromSource = "source"

// Snapshot is what CDI reads of a VolumeSnapshot source and its bound
// VolumeSnapshotContent.
type Snapshot struct {
	// Exists: the VolumeSnapshot is there (missing: a CloneWithoutSource
	// Warning, no claim, until it comes).
	Exists bool
	// HasStatus: its status is set. Error is status.error's message ("" none).
	HasStatus bool
	Error     string
	// SnapshotClass is spec.volumeSnapshotClassName ("" unset).
	SnapshotClass string
	// RestoreBytes is status.restoreSize; HasRestoreSize whether it is set.
	RestoreBytes   int64
	HasRestoreSize bool
	// ContentBound: status.boundVolumeSnapshotContentName names a content
	// that exists. Driver and SourceVolumeMode are that content's
	// spec.driver and spec.sourceVolumeMode ("" unset, read as Filesystem).
	ContentBound             bool
	Driver, SourceVolumeMode string
	// AllowVolumeModeChange: the content's annotation
	// snapshot.storage.kubernetes.io/allow-volume-mode-change parses true,
	// so the external-provisioner restores it into another volume mode.
	AllowVolumeModeChange bool
}

// WaitsSourceSnapshot is what CDI waits for while a DataVolume's source
// VolumeSnapshot does not exist (a CloneWithoutSource Warning).
const WaitsSourceSnapshot = "the source VolumeSnapshot"

// CloneFromSnapshotWithClaim follows a DataVolume cloning a VolumeSnapshot
// from its spec to CDI's plan, in snapshot-clone-controller.go
// syncSnapshotClone's order: rendering and the choice of the populator path
// (syncCommon), the snapshot's existence and validateSnapshotClone
// (validateCloneAndSourceSnapshot), detectCloneSize, then the legacy
// host-assisted path or the clone populator (PlanSnapshotClaim). It returns
// the claim CDI renders (rendered false: none), its size before
// detectCloneSize, as CloneWithClaim does.
func (c Cluster) CloneFromSnapshotWithClaim(dv DataVolume, snap Snapshot) (o Outcome, claim Claim, rendered bool) {
	claim, err := RenderClaim(dv, c.Defaults, c.Env)
	if err != nil {
		return Outcome{Error: err.Error(), Render: true}, Claim{}, false
	}
	if _, err := c.UsePopulator(dv.PerDisk, claim); err != nil {
		return Outcome{Error: err.Error()}, claim, true
	}
	if !snap.Exists {
		return Outcome{Waits: WaitsSourceSnapshot}, claim, true
	}
	if err := ValidateSnapshotClone(dv, snap, c.Defaults, c.Env); err != nil {
		return Outcome{Validation: err.Error()}, claim, true
	}
	sized := claim
	if dv.Kind == KindStorage {
		sized.Bytes = SnapshotCloneSize(claim, snap)
	}
	return c.PlanSnapshotClaim(snap, sized), claim, true
}

// PlanSnapshotClaim is what CDI does with a claim it rendered from a
// snapshot source: the legacy host-assisted path, NoPopulator, when
// UsePopulator says no (snapshot-clone-controller.go initLegacyClone and
// fallbackToHostAssisted), else the clone populator (PlanSnapshot), once
// its VolumeCloneSource exists (ErrEmptySourceNamespace).
func (c Cluster) PlanSnapshotClaim(snap Snapshot, claim Claim) Outcome {
	if o, done := c.beforePopulator(claim); done {
		return o
	}
	return c.PlanSnapshot(snap, claim)
}

// ValidateSnapshotClone is snapshot-clone-controller.go validateSnapshotClone
// (with common/util.go IsSnapshotValidForClone), run on the DataVolume
// before any claim exists: a failure is the CloneValidationFailed event and
// the clone waits. A restore size of 0 is allowed when the disk has a size;
// a sized disk (a spec.storage one raised to its class's minimum supported
// size, no overhead) may not be below a known restore size.
func ValidateSnapshotClone(dv DataVolume, snap Snapshot, d Defaults, env Env) error {
	if err := SnapshotUnusable(snap); err != nil {
		return err
	}
	target := dv.Bytes
	if dv.Kind == KindStorage && target != 0 {
		if class := storageClassForEffectiveSize(dv, d, env); class != "" {
			target = EffectiveSize(target, env.Profiles[class])
		}
	}
	switch {
	case target != 0 && snap.RestoreBytes > 0:
		return validateRequestedCloneSize(snap.RestoreBytes, target)
	case target == 0 && snap.RestoreBytes == 0:
		return errors.New("size not specified by user/provisioner, can't tell how much needed for restore")
	}
	return nil
}

// SnapshotUnusable is the part of validateSnapshotClone about the
// snapshot alone (common/util.go IsSnapshotValidForClone, then its restore
// size): nil when a disk of the right size can be cloned from it.
func SnapshotUnusable(snap Snapshot) error {
	switch {
	case !snap.HasStatus:
		return errors.New("no status on source snapshot yet")
	case snap.Error != "":
		return fmt.Errorf("snapshot in error state with msg: %s", snap.Error)
	case snap.SnapshotClass == "":
		return errors.New("snapshot does not have volume snap class populated, can't clone")
	case !snap.HasRestoreSize || snap.RestoreBytes < 0:
		return errors.New("snapshot has no restore size")
	}
	return nil
}

// SnapshotCloneSize is snapshot-clone-controller.go detectCloneSize: a
// spec.storage claim without a size gets the snapshot's restore size, as
// is (no overhead).
func SnapshotCloneSize(c Claim, snap Snapshot) int64 {
	if c.Bytes != 0 {
		return c.Bytes
	}
	return snap.RestoreBytes
}

// PlanSnapshot is what the clone populator does with a claim restored from
// a snapshot. The target class must be set and exist (claimReadyForPopulation
// and validateTargetStorageClassAssignment, before any strategy). A
// cloneType annotation is then obeyed as is (clone-populator.go
// getCloneStrategy, then planner.go Plan, which knows only snapshot and copy
// for this source: obeyedSnapshot). Otherwise
// computeStrategyForSourceSnapshot: the snapshot must exist with a bound
// content; a content of another driver than the class's provisioner is
// copied (NoProvisionerMatch); no restore size is an error; a restore size
// below the claim's request on a class without expansion is copied
// (common/util.go ValidateSnapshotCloneSize); a source volume mode other
// than the claim's is copied (SameVolumeMode, unset read as Filesystem);
// else the snapshot is restored.
func (c Cluster) PlanSnapshot(snap Snapshot, claim Claim) Outcome {
	if o, refused := c.targetClassRefused(claim); refused {
		return o
	}
	switch {
	case claim.PerDisk.CloneType != nil:
		return c.obeyedSnapshot(snap, claim, *claim.PerDisk.CloneType)
	case !snap.Exists:
		return Outcome{Waits: WaitsSourceSnapshot}
	case !snap.ContentBound:
		return Outcome{Error: "volumeSnapshotContent name not found"}
	}
	o := Outcome{CloneType: StrategySnapshot, Strategy: StrategySnapshot, StrategyFrom: FromSource}
	sc := c.Classes[claim.Class]
	switch {
	case sc.Provisioner != snap.Driver:
		return c.fallback(o, FallbackNoProvisionerMatch)
	case !snap.HasRestoreSize:
		o.Error = "snapshot has no RestoreSize"
		return o
	case claim.Bytes != 0 && snap.RestoreBytes < claim.Bytes && !allowsExpansion(sc.AllowVolumeExpansion):
		return c.fallback(o, FallbackNoVolumeExpansion)
	case resolveMode(snap.SourceVolumeMode) != resolveMode(claim.VolumeMode):
		return c.fallback(o, FallbackIncompatibleVolumeModes)
	}
	return o
}

// obeyedSnapshot is planner.go Plan for a snapshot source and a strategy
// CDI did not choose: copy restores the snapshot into a tmp claim and
// copies it host-assisted (planHostAssistedFromSnapshot); snapshot restores
// it into the disk's own class and mode (planSmartCloneFromSnapshot), which
// the external-provisioner refuses for ever for another driver's snapshot
// or, unless the content allows it, another volume mode
// (provisionerRefusesRestore); the restore is made at the restore size
// (snap-clone.go createClaim, unless it is 0) and PrepClaimPhase then
// raises it to the disk's, which the API server refuses on a class without
// expansion (ErrResizeRefused); anything else is an error.
func (c Cluster) obeyedSnapshot(snap Snapshot, claim Claim, strategy string) Outcome {
	o := Outcome{CloneType: strategy, Strategy: strategy, StrategyFrom: FromAnnotation}
	switch strategy {
	case StrategyCopy:
	case StrategySnapshot:
		if o.Stuck = c.provisionerRefusesRestore(snap, claim); o.Stuck != "" {
			return o
		}
		if snap.RestoreBytes > 0 && claim.Bytes > snap.RestoreBytes && !allowsExpansion(c.Classes[claim.Class].AllowVolumeExpansion) {
			o.Error = ErrResizeRefused
		}
	default:
		o.Error = fmt.Sprintf("unknown strategy/source %s", strategy)
	}
	return o
}

// provisionerRefusesRestore is external-provisioner v6.4.0's
// getSnapshotSource (pkg/controller/controller.go) on CDI's restore claim
// (the disk's class and volume mode): the content must be the class's
// driver's; with --prevent-volume-mode-conversion (on by default) a content
// that records its source's volume mode restores only into that mode unless
// annotated snapshot.storage.kubernetes.io/allow-volume-mode-change: true.
func (c Cluster) provisionerRefusesRestore(snap Snapshot, claim Claim) string {
	if r := c.restoreDriverRefused(snap, claim); r != "" {
		return r
	}
	return restoreModeRefused(snap, claim)
}

// restoreDriverRefused: the content is not the claim's class's driver's.
func (c Cluster) restoreDriverRefused(snap Snapshot, claim Claim) string {
	if sc := c.Classes[claim.Class]; sc != nil && sc.Provisioner != snap.Driver {
		return StuckDriver
	}
	return ""
}

// restoreModeRefused: the restore would change the source's volume mode and
// the content does not allow it.
func restoreModeRefused(snap Snapshot, claim Claim) string {
	if snap.SourceVolumeMode != "" && resolveMode(claim.VolumeMode) != snap.SourceVolumeMode && !snap.AllowVolumeModeChange {
		return StuckVolumeMode
	}
	return ""
}

func allowsExpansion(b *bool) bool { return b != nil && *b }
