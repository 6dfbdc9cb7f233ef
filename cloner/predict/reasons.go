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
	// ReasonSnapshotSource: the golden is a VolumeSnapshot, which CDI
	// restores without choosing a strategy (computeStrategyForSourceSnapshot).
	ReasonSnapshotSource = "snapshot-source"
	// Host-assisted fallbacks, CDI's own (planner.go, clone-controller-base.go).
	ReasonCopyStrategy = "copy-strategy"
	// ReasonDerivedCopy: nobody set copy; CDI derived it for a driver absent
	// from its capabilities table without a VolumeSnapshotClass.
	ReasonDerivedCopy              = "derived-copy"
	ReasonNoPopulator              = "no-populator"
	ReasonNoVolumeSnapshotClass    = "no-volume-snapshot-class"
	ReasonIncompatibleProvisioners = "incompatible-provisioners"
	ReasonIncompatibleVolumeModes  = "incompatible-volume-modes"
	ReasonNoVolumeExpansion        = "no-volume-expansion"
	// ReasonNoProvisionerMatch: a golden VolumeSnapshot's content is another
	// driver's than the target class's.
	ReasonNoProvisionerMatch = "no-provisioner-match"
	// Blocked: no disk will be made.
	ReasonGoldenFailed          = "golden-failed"
	ReasonClassUnresolved       = "class-unresolved"
	ReasonClassNotFound         = "class-not-found"
	ReasonNoActiveCDI           = "no-active-cdi"
	ReasonTargetTooSmall        = "target-too-small"
	ReasonSnapshotClassNotFound = "snapshot-class-not-found"
	ReasonNodeLocalTarget       = "node-local-target"
	ReasonContentTypeMismatch   = "content-type-mismatch"
	ReasonUnknownStrategy       = "unknown-strategy"
	ReasonClaimInvalid          = "claim-invalid"
	// ReasonGoldenMissing: the golden VolumeSnapshot the disk names does not
	// exist (CloneWithoutSource); ReasonSnapshotUnusable: it has no status,
	// an error, no VolumeSnapshotClass name or no restore size.
	ReasonGoldenMissing    = "golden-missing"
	ReasonSnapshotUnusable = "snapshot-unusable"
	// ReasonSourceNamespaceUnset: the disk's DataSource names its golden
	// without a namespace (cdirules.ErrEmptySourceNamespace).
	ReasonSourceNamespaceUnset = "source-namespace-unset"
	// Per-disk annotations (cdirules.PerDisk).
	// ReasonCloneTypeAnnotation: the DataVolume's cdi.kubevirt.io/cloneType
	// (csi-clone or snapshot) is obeyed as is.
	ReasonCloneTypeAnnotation = "clone-type-annotation"
	// ReasonCloneTypeCopy: the DataVolume's cdi.kubevirt.io/cloneType is copy.
	ReasonCloneTypeCopy = "clone-type-copy"
	// ReasonPopulatorOff: the DataVolume's cdi.kubevirt.io/storage.usePopulator
	// is false: CDI's legacy path, NoPopulator.
	ReasonPopulatorOff = "populator-off"
	// ReasonUsePopulatorInvalid: its value does not parse; CDI retries for
	// ever and the DataVolume stays Pending without a claim.
	ReasonUsePopulatorInvalid = "use-populator-invalid"
	// ReasonCloneTypeNoExpansion: the DataVolume's cloneType (csi-clone or
	// snapshot) is obeyed for a disk larger than the golden on a class
	// without allowVolumeExpansion: the clone fails where CDI would copy.
	ReasonCloneTypeNoExpansion = "clone-type-no-expansion"
	// ReasonCloneTypeRefused: the DataVolume's cloneType (csi-clone or
	// snapshot) is obeyed onto a class of another driver or another volume
	// mode than the golden's: the external-provisioner refuses CDI's clone
	// claim for ever (ProvisioningFailed on the tmp-pvc).
	ReasonCloneTypeRefused = "clone-type-refused"
	// A bare claim's (Target.DataSource): ReasonDataSource, the
	// external-provisioner asks the driver for the clone or the restore
	// itself; ReasonProvisionerRefuses, it refuses the claim for ever
	// (cdirules.ClaimCloneRefusal, ClaimRestoreRefusal).
	ReasonDataSource         = "data-source"
	ReasonProvisionerRefuses = "provisioner-refuses"
)

// Reasons lists every reason.
var Reasons = []string{ReasonCDIOverride, ReasonStorageProfile, ReasonDefaultSnapshot, ReasonCopyStrategy,
	ReasonNoPopulator, ReasonNoVolumeSnapshotClass, ReasonIncompatibleProvisioners, ReasonIncompatibleVolumeModes,
	ReasonNoVolumeExpansion, ReasonGoldenFailed, ReasonClassUnresolved, ReasonClassNotFound, ReasonNoActiveCDI,
	ReasonTargetTooSmall, ReasonSnapshotClassNotFound, ReasonNodeLocalTarget, ReasonDerivedCopy, ReasonContentTypeMismatch,
	ReasonUnknownStrategy, ReasonClaimInvalid, ReasonCloneTypeAnnotation, ReasonCloneTypeCopy, ReasonPopulatorOff,
	ReasonUsePopulatorInvalid, ReasonCloneTypeNoExpansion, ReasonCloneTypeRefused, ReasonSnapshotSource,
	ReasonNoProvisionerMatch, ReasonGoldenMissing, ReasonSnapshotUnusable, ReasonSourceNamespaceUnset,
	ReasonDataSource, ReasonProvisionerRefuses}

// fixDerived is the fix when CDI itself chose the copy: give the class a
// strategy, or give the driver a VolumeSnapshotClass.
const fixDerived = "set spec.cloneStrategy: csi-clone on the class's StorageProfile (or cloneStrategyOverride: csi-clone on the CDI resource); " +
	"for a driver CDI's capabilities table does not list, a VolumeSnapshotClass for it also does (for one it advises copy for, it does not)"

var fixes = map[string]string{
	ReasonCDIOverride:              "",
	ReasonStorageProfile:           "",
	ReasonDefaultSnapshot:          "",
	ReasonSnapshotSource:           "",
	ReasonNoProvisionerMatch:       "clone the golden VolumeSnapshot onto a class of its content's driver, or snapshot the golden on the pool's driver",
	ReasonGoldenMissing:            "create the VolumeSnapshot the disk names (or name an existing one), in the namespace it names",
	ReasonSourceNamespaceUnset:     "set the namespace of the golden in the DataSource (spec.source.pvc.namespace or spec.source.snapshot.namespace), and recreate the disk",
	ReasonSnapshotUnusable:         "wait until the golden VolumeSnapshot is ready, or recreate it with a VolumeSnapshotClass (spec.volumeSnapshotClassName) on a driver that reports its restore size",
	ReasonCopyStrategy:             "remove the copy strategy where it is set: cloneStrategyOverride on the CDI resource, spec.cloneStrategy on the class's StorageProfile, or the class's cdi.kubevirt.io/clone-strategy annotation (or set it to csi-clone)",
	ReasonDerivedCopy:              fixDerived,
	ReasonNoPopulator:              "use a class of a CSI driver (one with a CSIDriver object), as the golden's",
	ReasonNoVolumeSnapshotClass:    "create a VolumeSnapshotClass for the class's driver (named by neither StorageProfile, or by both), or set spec.cloneStrategy: csi-clone on the class's StorageProfile (or cloneStrategyOverride: csi-clone on the CDI resource)",
	ReasonIncompatibleProvisioners: "put the pool on a class of the golden's CSI driver, best the golden's own class",
	ReasonIncompatibleVolumeModes:  "give the disk the golden's volume mode (volumeMode on the DataVolume, or the StorageProfile's claimPropertySets)",
	ReasonNoVolumeExpansion:        "set allowVolumeExpansion: true on the class, or size the disk so its claim is at most the golden's capacity (an empty diskSize: CDI sizes the disk at the golden)",
	ReasonGoldenFailed:             "fix the golden's import (Factory URL, network, storage) and recreate the golden DataVolume",
	ReasonClassUnresolved:          "name a StorageClass on the pool, or mark one default (storageclass.kubevirt.io/is-default-virt-class)",
	ReasonClassNotFound:            "create the StorageClass or name an existing one on the pool",
	ReasonNoActiveCDI:              "keep exactly one CDI resource that is not in phase Error",
	ReasonTargetTooSmall:           "raise the pool's diskSize so the disk's claim is at least the golden's claim (a spec.storage Filesystem golden's claim carries CDI's filesystem overhead), or leave it empty",
	ReasonSnapshotClassNotFound:    "create the VolumeSnapshotClass the StorageProfiles name, or clear their snapshotClass",
	ReasonNodeLocalTarget:          "put the pool on the golden's class (a replicated one), or import a golden on the node-local class",
	ReasonContentTypeMismatch:      "clone with the golden's contentType (kubevirt: leave contentType unset)",
	ReasonUnknownStrategy:          "set the StorageProfile's spec.cloneStrategy (or the class's cdi.kubevirt.io/clone-strategy annotation, or the DataVolume's cdi.kubevirt.io/cloneType) to csi-clone, snapshot or copy",
	ReasonClaimInvalid:             "give the disk a volumeMode and accessModes, or give the class's StorageProfile claimPropertySets",
	ReasonCloneTypeAnnotation:      "",
	ReasonCloneTypeCopy:            "remove the annotation cdi.kubevirt.io/cloneType: copy from the DataVolume (CDI then chooses the strategy), or set it to csi-clone",
	ReasonPopulatorOff:             "remove the annotation cdi.kubevirt.io/storage.usePopulator: \"false\" from the DataVolume (or its template)",
	ReasonUsePopulatorInvalid:      "set the DataVolume's annotation cdi.kubevirt.io/storage.usePopulator to \"true\" or \"false\", or remove it",
	ReasonCloneTypeRefused:         "put the disk on the golden's class (same driver and volume mode), or remove the annotation cdi.kubevirt.io/cloneType from the DataVolume (CDI then picks a path it can run)",
	ReasonCloneTypeNoExpansion:     "set allowVolumeExpansion: true on the class, size the disk at most the golden's capacity, or remove the annotation cdi.kubevirt.io/cloneType from the DataVolume (CDI then copies host-assisted)",
	ReasonDataSource:               "",
	ReasonProvisionerRefuses:       "recreate the claim on a class of the golden's CSI driver, in the golden's volume mode, asking at least the golden's size",
}

// Fix is the remedy for a reason; "" for the good ones.
func Fix(reason string) string { return fixes[reason] }

func bytesText(b int64) string { return resource.NewQuantity(b, resource.BinarySI).String() }
