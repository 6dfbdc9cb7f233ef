package predict

import "k8s.io/apimachinery/pkg/api/resource"

// Reasons: why a path is predicted, the label values of
// csi_clone_path_predicted. A closed set; each has a fix (Fix).
const (
	// The three a clone at the storage layer can have: where CDI took its
	// strategy from (computeStrategyForSourcePVC).
	ReasonCDIOverride     = "cdi-override"
	ReasonStorageProfile  = "storage-profile"
	ReasonDefaultSnapshot = "default-snapshot"
	// Host-assisted fallbacks, CDI's own (planner.go, clone-controller-base.go).
	ReasonCopyStrategy             = "copy-strategy"
	ReasonNoPopulator              = "no-populator"
	ReasonNoVolumeSnapshotClass    = "no-volume-snapshot-class"
	ReasonIncompatibleProvisioners = "incompatible-provisioners"
	ReasonIncompatibleVolumeModes  = "incompatible-volume-modes"
	ReasonNoVolumeExpansion        = "no-volume-expansion"
	// Blocked: no disk will be made.
	ReasonGoldenFailed          = "golden-failed"
	ReasonClassUnresolved       = "class-unresolved"
	ReasonClassNotFound         = "class-not-found"
	ReasonNoActiveCDI           = "no-active-cdi"
	ReasonTargetTooSmall        = "target-too-small"
	ReasonSnapshotClassNotFound = "snapshot-class-not-found"
	ReasonNodeLocalTarget       = "node-local-target"
)

// Reasons lists every reason.
var Reasons = []string{ReasonCDIOverride, ReasonStorageProfile, ReasonDefaultSnapshot, ReasonCopyStrategy,
	ReasonNoPopulator, ReasonNoVolumeSnapshotClass, ReasonIncompatibleProvisioners, ReasonIncompatibleVolumeModes,
	ReasonNoVolumeExpansion, ReasonGoldenFailed, ReasonClassUnresolved, ReasonClassNotFound, ReasonNoActiveCDI,
	ReasonTargetTooSmall, ReasonSnapshotClassNotFound, ReasonNodeLocalTarget}

var fixes = map[string]string{
	ReasonCDIOverride:              "",
	ReasonStorageProfile:           "",
	ReasonDefaultSnapshot:          "",
	ReasonCopyStrategy:             "remove cloneStrategyOverride: copy from the CDI resource (or spec.cloneStrategy: copy from the class's StorageProfile)",
	ReasonNoPopulator:              "use a class of a CSI driver (one with a CSIDriver object), as the golden's",
	ReasonNoVolumeSnapshotClass:    "create a VolumeSnapshotClass for the class's driver, or set the StorageProfile's cloneStrategy to csi-clone",
	ReasonIncompatibleProvisioners: "put the pool on a class of the golden's CSI driver, best the golden's own class",
	ReasonIncompatibleVolumeModes:  "give the disk the golden's volume mode (volumeMode on the DataVolume, or the StorageProfile's claimPropertySets)",
	ReasonNoVolumeExpansion:        "set allowVolumeExpansion: true on the class, or put the pool on the golden's class",
	ReasonGoldenFailed:             "fix the golden's import (Factory URL, network, storage) and recreate the golden DataVolume",
	ReasonClassUnresolved:          "name a StorageClass on the pool, or mark one default (storageclass.kubevirt.io/is-default-virt-class)",
	ReasonClassNotFound:            "create the StorageClass or name an existing one on the pool",
	ReasonNoActiveCDI:              "keep exactly one CDI resource that is not in phase Error",
	ReasonTargetTooSmall:           "raise the pool's diskSize to at least the golden's size",
	ReasonSnapshotClassNotFound:    "create the VolumeSnapshotClass the StorageProfiles name, or clear their snapshotClass",
	ReasonNodeLocalTarget:          "put the pool on the golden's class (a replicated one), or import a golden on the node-local class",
}

// Fix is the remedy for a reason; "" for the good ones.
func Fix(reason string) string { return fixes[reason] }

func bytesText(b int64) string { return resource.NewQuantity(b, resource.BinarySI).String() }
