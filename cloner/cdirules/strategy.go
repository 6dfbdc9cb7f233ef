package cdirules

import (
	"sort"

	storagev1 "k8s.io/api/storage/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The strategies CDI knows (the values of cdi.kubevirt.io/cloneType).
const (
	StrategyCopy     = string(cdiv1.CloneStrategyHostAssisted)
	StrategySnapshot = string(cdiv1.CloneStrategySnapshot)
	StrategyCSIClone = string(cdiv1.CloneStrategyCsiClone)
)

// Strategies lists them.
var Strategies = []string{StrategyCopy, StrategySnapshot, StrategyCSIClone}

// KnownStrategy reports whether CDI's planner can plan a strategy
// (clone/planner.go Plan: any other value is "unknown strategy/source").
func KnownStrategy(s string) bool {
	return s == StrategyCopy || s == StrategySnapshot || s == StrategyCSIClone
}

// Where a StorageProfile's status.cloneStrategy comes from
// (storageprofile-controller.go reconcileCloneStrategy).
const (
	OriginProfileSpec     = "profile-spec"     // spec.cloneStrategy
	OriginClassAnnotation = "class-annotation" // the class's cdi.kubevirt.io/clone-strategy
	OriginDerived         = "derived"          // CDI's capabilities table, else snapshot with a VolumeSnapshotClass, else copy
)

// ProfileStrategyOrigin says which rule of reconcileCloneStrategy gives a
// class's StorageProfile its status.cloneStrategy.
func ProfileStrategyOrigin(sc *storagev1.StorageClass, sp *cdiv1.StorageProfile) string {
	if sp != nil && sp.Spec.CloneStrategy != nil {
		return OriginProfileSpec
	}
	if sc != nil {
		if _, ok := sc.Annotations[AnnCloneStrategy]; ok {
			return OriginClassAnnotation
		}
	}
	return OriginDerived
}

// ProfileStrategy is storageprofile-controller.go reconcileCloneStrategy:
// the profile's spec.cloneStrategy as written; else the class annotation
// (copy, snapshot, csi-clone; any other value becomes "", which the planner
// cannot plan, getCloneStrategyFromStorageClass); else the strategy of CDI's
// capabilities table for the provisioner (advised, "" when the provisioner
// is not in it, as LINSTOR's is not), else snapshot; snapshot needs a
// VolumeSnapshotClass of the driver (hasSnapshotClass), else copy.
func ProfileStrategy(sc *storagev1.StorageClass, specStrategy *string, advised string, hasSnapshotClass bool) string {
	if specStrategy != nil {
		return *specStrategy
	}
	if sc != nil {
		if v, ok := sc.Annotations[AnnCloneStrategy]; ok {
			if KnownStrategy(v) {
				return v
			}
			return ""
		}
	}
	strategy := StrategyCopy
	if hasSnapshotClass {
		strategy = StrategySnapshot
	}
	if advised != "" {
		strategy = advised
	}
	if strategy == StrategySnapshot && !hasSnapshotClass {
		return StrategyCopy
	}
	return strategy
}

// Where the planner took its strategy from (clone/planner.go
// computeStrategyForSourcePVC).
const (
	FromOverride = "override" // the CDI resource's cloneStrategyOverride
	FromProfile  = "profile"  // the target class's StorageProfile status.cloneStrategy
	FromDefault  = "default"  // neither: snapshot
	// FromAnnotation: the claim's cdi.kubevirt.io/cloneType, obeyed as is
	// (populators/clone-populator.go getCloneStrategy).
	FromAnnotation = "annotation"
)

// PlannerStrategy is the strategy computeStrategyForSourcePVC starts from:
// the active CDI's cloneStrategyOverride, else the target class's
// StorageProfile status.cloneStrategy, else snapshot.
func PlannerStrategy(override *cdiv1.CDICloneStrategy, sp *cdiv1.StorageProfile) (string, string) {
	if override != nil {
		return string(*override), FromOverride
	}
	if sp != nil && sp.Status.CloneStrategy != nil {
		return string(*sp.Status.CloneStrategy), FromProfile
	}
	return StrategySnapshot, FromDefault
}

// ActiveCDI is common/util.go GetActiveCDI: the only CDI resource, or among
// several the only one not in phase Error. problem says why there is none.
func ActiveCDI(cdis []*cdiv1.CDI) (active *cdiv1.CDI, problem string) {
	cands := cdis
	if len(cdis) > 1 {
		cands = nil
		for _, c := range cdis {
			if c.Status.Phase != "Error" {
				cands = append(cands, c)
			}
		}
	}
	switch {
	case len(cdis) == 0:
		return nil, "no CDI resource exists"
	case len(cands) == 0:
		return nil, "every CDI resource is in phase Error"
	case len(cands) > 1:
		return nil, "several CDI resources are active"
	}
	return cands[0], ""
}

// SnapshotClass is what CDI reads of a VolumeSnapshotClass.
type SnapshotClass struct {
	Name, Driver string
	Default      bool // annotation snapshot.storage.kubernetes.io/is-default-class: "true"
}

// SnapshotClassFor is common/util.go GetVolumeSnapshotClass: a named class
// must exist (missing: an error, found false) and be of the driver; else the
// driver's default class, else its first by name. name "" means none named.
func SnapshotClassFor(classes []SnapshotClass, driver, named string) (name string, found bool, missing bool) {
	if named != "" {
		for _, c := range classes {
			if c.Name == named {
				return named, c.Driver == driver, false
			}
		}
		return "", false, true
	}
	byName := append([]SnapshotClass(nil), classes...)
	sort.Slice(byName, func(i, j int) bool { return byName[i].Name < byName[j].Name })
	var cands []string
	for _, c := range byName {
		if c.Driver != driver {
			continue
		}
		if c.Default {
			return c.Name, true, false
		}
		cands = append(cands, c.Name)
	}
	if len(cands) == 0 {
		return "", false, false
	}
	return cands[0], true, false
}
