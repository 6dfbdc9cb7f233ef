package cdirules

// A bare claim (a PVC no DataVolume made) whose dataSourceRef names a PVC or
// a VolumeSnapshot never reaches CDI: external-provisioner v6.4.0 asks the
// driver for the clone or the restore itself (pkg/controller/controller.go
// getPVCSource, getSnapshotSource) or refuses it, retrying for ever with a
// ProvisioningFailed event each time. The checks it makes on CDI's own
// temporary claims (provisionerRefuses, provisionerRefusesRestore) are the
// same functions; a bare claim is also refused when it asks less than its
// source. A source not bound yet only delays the provisioning: it is not
// checked here.

// StuckTooSmall: the claim asks less than its source ("new PVC request must
// be greater than or equal in size to the specified PVC data source", or
// "requested volume size ... is less than the size ... for the source
// snapshot").
const StuckTooSmall = "size"

// ClaimCloneRefusal is getPVCSource on a bare claim of src, in its order:
// the request against the source's request, then the source volume's
// driver and volume mode (provisionerRefuses). "" when it asks the driver
// for the clone.
func (c Cluster) ClaimCloneRefusal(src Source, claim Claim) string {
	if claim.Bytes < src.RequestBytes {
		return StuckTooSmall
	}
	return c.provisionerRefuses(src, claim)
}

// ClaimRestoreRefusal is getSnapshotSource on a bare claim of snap, in its
// order: the content's driver, the request against the restore size, the
// volume mode (the two checks of provisionerRefusesRestore, around the
// size). "" when it asks the driver for the restore.
func (c Cluster) ClaimRestoreRefusal(snap Snapshot, claim Claim) string {
	if r := c.restoreDriverRefused(snap, claim); r != "" {
		return r
	}
	if snap.HasRestoreSize && claim.Bytes < snap.RestoreBytes {
		return StuckTooSmall
	}
	return restoreModeRefused(snap, claim)
}
