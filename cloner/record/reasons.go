package record

// Verdicts: exactly one per worker disk.
const (
	// VerdictPending: not finished yet (including while the golden imports).
	VerdictPending = "pending"
	// VerdictCSIClone: the promise held, a CSI clone of the golden's volume.
	VerdictCSIClone = "csi-clone"
	// VerdictSnapshotClone: a CSI snapshot of the golden, restored.
	VerdictSnapshotClone = "snapshot-clone"
	// VerdictHostAssisted: a blank volume filled by pods over the network.
	VerdictHostAssisted = "host-assisted"
	// VerdictHTTPImport: a worker importing its image from the Factory.
	VerdictHTTPImport = "http-import"
	// VerdictStuck: a requested clone that does not progress: a definite
	// error of the driver, a golden that is gone, or not finished after
	// --stuck-after.
	VerdictStuck = "stuck"
	// VerdictFailed: CDI gave up on the DataVolume, refused the clone, or
	// reports an error on it (clonePhase Error).
	VerdictFailed = "failed"
	// VerdictUnknown: finished, but neither the tap nor CDI recorded how.
	VerdictUnknown = "unknown"
)

// Where a verdict's mechanism came from.
const (
	// SourceCSITap: the sidecar saw the CreateVolume itself.
	SourceCSITap = "csi-tap"
	// SourceCDI: the volume was made while no sidecar watched; CDI's
	// cdi.kubevirt.io/cloneType annotation is all there is.
	SourceCDI = "cdi-annotations"
	// SourceDataVolume: an HTTP import, known from the DataVolume's spec.
	SourceDataVolume = "datavolume-spec"
	// SourceNone: nothing finished yet.
	SourceNone = "none"
)

// Reasons a disk is bad: the label values of csi_clone_bad_disks and the
// keys of findings. Three are verdicts, the rest findings on top of one.
const (
	ReasonHostAssisted  = "host-assisted"
	ReasonStuck         = "stuck"
	ReasonFailed        = "failed"
	ReasonClassMismatch = "class-mismatch"
	ReasonTooSmall      = "too-small"
	ReasonResizeMissing = "resize-missing"
	ReasonResizeFailed  = "resize-failed"
	ReasonUnknownGolden = "unknown-golden"
	ReasonInvalidGolden = "invalid-golden"
	ReasonFailedGolden  = "failed-golden"
	ReasonCDIDisagrees  = "cdi-disagrees"
	ReasonWrongSource   = "wrong-source"
	// ReasonNotReadWriteMany: a worker disk whose claim is (or, as CDI
	// renders it, will be) without ReadWriteMany: KubeVirt cannot
	// live-migrate the worker's VM.
	ReasonNotReadWriteMany = "not-read-write-many"
	// ReasonPredictionWrong: the verdict contradicts the clone path
	// predicted for the disk before it was made (predictions.go).
	ReasonPredictionWrong = "prediction-wrong"
	// ReasonBadPathPredicted: a disk not decided yet whose predicted path is
	// one the admission guard warns about (predictions.go); in Warn mode the
	// guard's warning reaches only the client that made the DataVolume.
	ReasonBadPathPredicted = "bad-path-predicted"
)

// reasonInfo is the Event reason (CamelCase) and the fix a message names.
type reasonInfo struct {
	Event string
	Fix   string
}

var reasonInfos = map[string]reasonInfo{
	ReasonHostAssisted: {"HostAssistedClone",
		"put the pool on the golden's StorageClass (same CSI driver, same volume mode, allowVolumeExpansion: true) so CDI can clone at the storage layer"},
	ReasonStuck: {"CloneStuck",
		"fix what the message names (the driver's error, or a golden that is gone: recreate it); a node-local class cannot clone a volume it does not hold, so put the pool on a replicated class; then delete the DataVolume to retry if the clone does not resume"},
	ReasonFailed: {"CloneFailed",
		"fix what CDI's message names (the clone token, a quota in the golden's namespace, a disk smaller than the golden), then recreate the DataVolume if CDI does not recover by itself"},
	ReasonClassMismatch: {"StorageClassMismatch",
		"set the pool's storageClass to the golden's class (an empty class is resolved to the default before comparing)"},
	ReasonTooSmall: {"DiskSmallerThanGolden",
		"raise the pool's diskSize to at least the golden's size: a clone target cannot be smaller than its source"},
	ReasonResizeMissing: {"ResizeMissing",
		"enable allowVolumeExpansion on the StorageClass and check csi-resizer; the volume is smaller than the disk asked for"},
	ReasonResizeFailed: {"ResizeFailed",
		"the driver refused to grow the disk's volume: fix what its error names (e.g. free space in the storage pool); csi-resizer retries by itself"},
	ReasonUnknownGolden: {"UnknownGolden",
		"add the flavor to the golden catalog (kubernetes-worker-image) or point the pool at an existing golden"},
	ReasonInvalidGolden: {"InvalidGoldenName",
		"use a lowercase alphanumeric schematicID and a vMAJOR.MINOR.PATCH version, as the catalog names them"},
	ReasonFailedGolden: {"GoldenImportFailed",
		"fix the golden's import (Factory URL, network, storage) and recreate the golden DataVolume"},
	ReasonCDIDisagrees: {"CloneTypeDisagrees",
		"trust the storage layer's record; check CDI's StorageProfile cloneStrategy and the driver's clone support"},
	ReasonWrongSource: {"CloneSourceMismatch",
		"the volume was cloned from something other than the golden's volume; recreate the disk from the golden"},
	ReasonNotReadWriteMany: {"WorkerDiskNotReadWriteMany",
		"give the pool's StorageClass a StorageProfile whose first claimPropertySet offers ReadWriteMany (on LINSTOR: a replicated DRBD class, volumeMode Block), as the worker template takes its access modes from the profile; a worker disk made without it keeps its access modes: recreate it once the profile is fixed"},
	ReasonBadPathPredicted: {"BadClonePathPredicted",
		"apply the prediction's fix the message names before CDI copies the disk, or delete the DataVolume and recreate it once fixed; the admission guard in Deny mode refuses such a DataVolume"},
	ReasonPredictionWrong: {"ClonePathMispredicted",
		"the verdict stands (it is the storage layer's record); the prediction missed a rule: compare CDI's fallback reason and the driver error in the clone-evidence annotation with the predicted reason, and report it"},
}

// EventReason is the CamelCase Event reason for a bad reason.
func EventReason(reason string) string { return reasonInfos[reason].Event }

// Fix is the remedy named in messages and the report for a bad reason.
func Fix(reason string) string { return reasonInfos[reason].Fix }

// badVerdict maps a verdict to its bad reason, "" when the verdict is fine.
func badVerdict(verdict string) string {
	switch verdict {
	case VerdictHostAssisted:
		return ReasonHostAssisted
	case VerdictStuck:
		return ReasonStuck
	case VerdictFailed:
		return ReasonFailed
	}
	return ""
}
