package cdirules

import (
	"fmt"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// CDI's reasons for a host-assisted fallback (clone/planner.go; NoPopulator
// is the DataVolume controller's legacy path), and for a refused clone.
const (
	FallbackNoPopulator              = "NoPopulator"
	FallbackNoVolumeSnapshotClass    = "NoVolumeSnapshotClass"
	FallbackIncompatibleProvisioners = "IncompatibleProvisioners"
	FallbackIncompatibleVolumeModes  = "IncompatibleVolumeModes"
	FallbackNoVolumeExpansion        = "NoVolumeExpansion"
	CloneValidationFailed            = "CloneValidationFailed"
)

// Fallbacks lists CDI's fallback reasons.
var Fallbacks = []string{FallbackNoPopulator, FallbackNoVolumeSnapshotClass, FallbackIncompatibleProvisioners,
	FallbackIncompatibleVolumeModes, FallbackNoVolumeExpansion}

// Cluster is what the planner reads besides the two claims.
type Cluster struct {
	Env
	Defaults        Defaults
	CDIs            []*cdiv1.CDI
	SnapshotClasses []SnapshotClass
	// CSIDrivers are the names of the CSIDriver objects.
	CSIDrivers map[string]bool
}

// Outcome is what CDI does with one clone.
type Outcome struct {
	// CloneType is the strategy it runs (cdi.kubevirt.io/cloneType: copy,
	// snapshot, csi-clone; or an unknown value it cannot plan); "" when it
	// does not get that far.
	CloneType string
	// Strategy is the strategy chosen before any fallback, StrategyFrom
	// where it came from (FromOverride, ...).
	Strategy, StrategyFrom string
	// Fallback is the reason of a host-assisted fallback ("" none).
	Fallback string
	// Validation is set when CDI refuses the clone's sizes or content
	// (CloneValidationFailed), Error when it fails another way, retried
	// for ever; Waits says what it waits for, something that may come.
	Validation, Error, Waits string
	// Stuck is set when CDI plans a storage-layer clone the external-provisioner
	// below it refuses for ever (StuckDriver, StuckVolumeMode): the clone
	// stays in CDI's CSIClone or SnapshotClone phase.
	Stuck string
	// Render: Error is CDI's failure to render the claim (an ErrClaimNotValid
	// event on the DataVolume).
	Render bool
}

// Refused reports whether CDI never makes the disk (or not until something
// changes): a validation failure, an error, a wait.
func (o Outcome) Refused() bool {
	return o.Validation != "" || o.Error != "" || o.Waits != "" || o.Stuck != ""
}

// StorageLayer reports whether CDI clones at the storage layer (csi-clone
// or snapshot).
func (o Outcome) StorageLayer() bool {
	return !o.Refused() && (o.CloneType == StrategyCSIClone || o.CloneType == StrategySnapshot)
}

// Clone follows a clone DataVolume from its spec to CDI's plan, in
// pvc-clone-controller.go syncClone's order: rendering (RenderClaim, in
// syncCommon), the choice of the populator path (UsePopulator, also in
// syncCommon), validation (ValidateClone), sizing (CloneSize), then the
// legacy path or the planner (PlanClaim).
func (c Cluster) Clone(dv DataVolume, src Source) Outcome {
	o, _, _ := c.CloneWithClaim(dv, src)
	return o
}

// CloneWithClaim is Clone with the claim CDI renders (rendered false: none;
// its size before CloneSize), so a caller needing both renders it once.
func (c Cluster) CloneWithClaim(dv DataVolume, src Source) (o Outcome, claim Claim, rendered bool) {
	claim, err := RenderClaim(dv, c.Defaults, c.Env)
	if err != nil {
		return Outcome{Error: err.Error(), Render: true}, Claim{}, false
	}
	return c.cloneRendered(dv, src, claim), claim, true
}

// cloneRendered is Clone once CDI rendered the DataVolume's claim.
func (c Cluster) cloneRendered(dv DataVolume, src Source, claim Claim) Outcome {
	if _, err := c.UsePopulator(dv.PerDisk, claim); err != nil {
		return Outcome{Error: err.Error()}
	}
	if err := ValidateClone(dv, src, c.Defaults, c.Env); err != nil {
		return Outcome{Validation: err.Error()}
	}
	if dv.Kind == KindStorage {
		bytes, perm, known := CloneSize(claim, src, c.Defaults, c.Env)
		if !known {
			return Outcome{Waits: "the image size of the source (a size-detection pod)"}
		}
		// detectCloneSize writes permissiveClone on the DataVolume, whence
		// the claim.
		claim.Bytes = bytes
		claim.PerDisk.Permissive = claim.PerDisk.Permissive || perm
	}
	return c.PlanClaim(src, claim)
}

// PlanClaim is what CDI does with a claim it rendered: the legacy
// host-assisted path, NoPopulator, when UsePopulator says no
// (pvc-clone-controller.go syncClone, clone-controller-base.go
// fallbackToHostAssisted), else Plan, once its VolumeCloneSource exists
// (ErrEmptySourceNamespace).
func (c Cluster) PlanClaim(src Source, claim Claim) Outcome {
	if o, done := c.beforePopulator(claim); done {
		return o
	}
	return c.Plan(src, claim)
}

// beforePopulator is what the DataVolume controller decides about a claim
// before the clone populator plans it, whatever the source
// (pvc-clone-controller.go syncClone, snapshot-clone-controller.go
// syncSnapshotClone): the legacy path, or a VolumeCloneSource it cannot
// create. done is false when the populator plans the claim.
func (c Cluster) beforePopulator(claim Claim) (o Outcome, done bool) {
	use, err := c.UsePopulator(claim.PerDisk, claim)
	switch {
	case err != nil:
		return Outcome{Error: err.Error()}, true
	case !use:
		return Outcome{CloneType: StrategyCopy, Fallback: FallbackNoPopulator}, true
	case claim.UnqualifiedSource:
		return Outcome{Error: ErrEmptySourceNamespace}, true
	}
	return Outcome{}, false
}

// ErrEmptySourceNamespace is the API server's refusal of the
// VolumeCloneSource CDI creates, on the populator path, in the source's
// namespace as the DataVolume names it (clone-controller-base.go
// reconcileVolumeCloneSourceCR, cc.GetCloneSourceInfo): a source copied from
// a DataSource without a namespace (CDI's webhook refuses one written in
// the DataVolume itself) is found in the DataVolume's namespace, validated
// and sized, its claim made, then this fails every sync and the clone
// never starts.
const ErrEmptySourceNamespace = "an empty namespace may not be set during creation"

// Plan is clone/planner.go computeStrategyForSourcePVC and Plan for a claim
// CDI created: the target class must be set and exist
// (validateTargetStorageClassAssignment); a strategy already on the claim
// is obeyed as is (obeyed); else the target's request (raised to the
// minimum size) may not be below the source's unless the claim is
// permissive (validateSourcePVC), then the strategy (PlannerStrategy), the
// snapshot class, validateAdvancedClonePVC's fallbacks, and the plan's own
// snapshot class (planSnapshot).
func (c Cluster) Plan(src Source, claim Claim) Outcome {
	if o, refused := c.targetClassRefused(claim); refused {
		return o
	}
	if claim.PerDisk.CloneType != nil {
		return c.obeyed(src, claim, *claim.PerDisk.CloneType)
	}
	if !claim.PerDisk.Permissive {
		if err := validateRequestedCloneSize(src.RequestBytes, EffectiveSize(claim.Bytes, c.Profiles[claim.Class])); err != nil {
			return Outcome{Validation: err.Error()}
		}
	}
	active, problem := ActiveCDI(c.CDIs)
	if active == nil {
		return Outcome{Error: problem}
	}
	strategy, from := PlannerStrategy(active.Spec.CloneStrategyOverride, c.Profiles[claim.Class])
	o := Outcome{CloneType: strategy, Strategy: strategy, StrategyFrom: from}
	driver := c.commonDriver(src, claim)
	if strategy == StrategySnapshot {
		if driver == "" {
			return c.fallback(o, FallbackNoVolumeSnapshotClass)
		}
		_, found, missing := SnapshotClassFor(c.SnapshotClasses, driver, c.commonSnapshotClass(src.Class, claim.Class))
		if missing {
			o.Error = snapshotClassNotFound(c.commonSnapshotClass(src.Class, claim.Class))
			return o
		}
		if !found {
			return c.fallback(o, FallbackNoVolumeSnapshotClass)
		}
	}
	if strategy == StrategySnapshot || strategy == StrategyCSIClone {
		if o, done := c.advanced(o, src, claim, driver); done {
			return o
		}
	}
	if strategy == StrategySnapshot {
		return c.planSnapshot(o, claim)
	}
	if !KnownStrategy(strategy) {
		o.Error = fmt.Sprintf("unknown strategy/source %s", strategy)
	}
	return o
}

// targetClassRefused is validateTargetStorageClassAssignment, for either
// source: the claim must have a class, not "", that exists.
func (c Cluster) targetClassRefused(claim Claim) (Outcome, bool) {
	switch {
	case !claim.HasClass:
		return Outcome{Waits: "a StorageClass for the claim"}, true
	case claim.Class == "":
		return Outcome{Error: "claim has emptystring storageclass, will not work"}, true
	case c.Classes[claim.Class] == nil:
		return Outcome{Error: "target storage class not found"}, true
	}
	return Outcome{}, false
}

// advanced is validateAdvancedClonePVC.
func (c Cluster) advanced(o Outcome, src Source, claim Claim, driver string) (Outcome, bool) {
	switch {
	case driver == "":
		return c.fallback(o, FallbackIncompatibleProvisioners), true
	case resolveMode(src.VolumeMode) != claim.VolumeMode:
		return c.fallback(o, FallbackIncompatibleVolumeModes), true
	case src.CapacityBytes == 0 || claim.Bytes == 0:
		o.Error = "source/target size info missing"
		return o, true
	}
	sc := c.Classes[claim.Class]
	expand := sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
	if src.CapacityBytes < claim.Bytes && !expand {
		return c.fallback(o, FallbackNoVolumeExpansion), true
	}
	return o, false
}

func (c Cluster) fallback(o Outcome, reason string) Outcome {
	o.CloneType, o.Fallback = StrategyCopy, reason
	return o
}

// commonDriver is clone/common.go GetCommonDriver: the source's bound PV's
// driver (else its class's provisioner) must be the target class's
// provisioner; "" when they differ or one is unknown.
func (c Cluster) commonDriver(src Source, claim Claim) string {
	sd := src.Driver
	if sd == "" {
		sc := c.Classes[src.Class]
		if sc == nil {
			return ""
		}
		sd = sc.Provisioner
	}
	if td := c.Classes[claim.Class].Provisioner; td != sd {
		return ""
	}
	return sd
}

// commonSnapshotClass is clone/common.go getCommonSnapshotClass: the
// StorageProfiles of both classes name the same status.snapshotClass.
func (c Cluster) commonSnapshotClass(classes ...string) string {
	var out string
	for i, name := range classes {
		sp := c.Profiles[name]
		if sp == nil || sp.Status.SnapshotClass == nil {
			return ""
		}
		if i > 0 && *sp.Status.SnapshotClass != out {
			return ""
		}
		out = *sp.Status.SnapshotClass
	}
	return out
}
