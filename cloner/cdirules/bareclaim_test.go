package cdirules

import "testing"

// TestClaimCloneRefusalInTheProvisionersOrder: external-provisioner v6.4.0
// getPVCSource on a bare claim, over each of its checks the model reads
// (the request against the source's, the source volume's driver, the
// volume modes) and their order: the size is checked before the driver.
func TestClaimCloneRefusalInTheProvisionersOrder(t *testing.T) {
	c := cluster("")
	src := Source{Class: "replicated", Driver: linstor, VolumeMode: Block, RequestBytes: 5 * gi, CapacityBytes: 5 * gi}
	fsSrc := src
	fsSrc.VolumeMode = Filesystem
	for _, tc := range []struct {
		name  string
		src   Source
		claim Claim
		want  string
	}{
		{"larger, same class and mode", src, Claim{Class: "replicated", VolumeMode: Block, Bytes: 20 * gi}, ""},
		{"the source's size", src, Claim{Class: "replicated", VolumeMode: Block, Bytes: 5 * gi}, ""},
		{"another class of the driver", src, Claim{Class: "fixed", VolumeMode: Block, Bytes: 20 * gi}, ""},
		{"smaller", src, Claim{Class: "replicated", VolumeMode: Block, Bytes: 5*gi - 1}, StuckTooSmall},
		{"another driver", src, Claim{Class: "ceph", VolumeMode: Block, Bytes: 20 * gi}, StuckDriver},
		{"smaller, of another driver: the size first", src, Claim{Class: "ceph", VolumeMode: Block, Bytes: gi}, StuckTooSmall},
		{"Filesystem from Block", src, Claim{Class: "replicated", VolumeMode: Filesystem, Bytes: 20 * gi}, StuckVolumeMode},
		{"unset mode from Block", src, Claim{Class: "replicated", Bytes: 20 * gi}, StuckVolumeMode},
		{"Block from Filesystem", fsSrc, Claim{Class: "replicated", VolumeMode: Block, Bytes: 20 * gi}, StuckVolumeMode},
		{"another driver and mode: the driver first", src, Claim{Class: "ceph", VolumeMode: Filesystem, Bytes: 20 * gi}, StuckDriver},
	} {
		if got := c.ClaimCloneRefusal(tc.src, tc.claim); got != tc.want {
			t.Errorf("%s: refusal %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestClaimRestoreRefusalInTheProvisionersOrder: getSnapshotSource on a
// bare claim: the content's driver, then the request against the restore
// size (none recorded: not checked), then the volume mode unless the content
// allows the change.
func TestClaimRestoreRefusalInTheProvisionersOrder(t *testing.T) {
	c := cluster("")
	snap := Snapshot{Exists: true, HasStatus: true, SnapshotClass: "snaps", RestoreBytes: 5 * gi, HasRestoreSize: true,
		ContentBound: true, Driver: linstor, SourceVolumeMode: Block}
	noSize, allowed := snap, snap
	noSize.HasRestoreSize, noSize.RestoreBytes = false, 0
	allowed.AllowVolumeModeChange = true
	for _, tc := range []struct {
		name  string
		snap  Snapshot
		claim Claim
		want  string
	}{
		{"larger, same driver and mode", snap, Claim{Class: "replicated", VolumeMode: Block, Bytes: 20 * gi}, ""},
		{"smaller", snap, Claim{Class: "replicated", VolumeMode: Block, Bytes: gi}, StuckTooSmall},
		{"smaller, no restore size", noSize, Claim{Class: "replicated", VolumeMode: Block, Bytes: gi}, ""},
		{"another driver", snap, Claim{Class: "ceph", VolumeMode: Block, Bytes: 20 * gi}, StuckDriver},
		{"smaller, of another driver: the driver first", snap, Claim{Class: "ceph", VolumeMode: Block, Bytes: gi}, StuckDriver},
		{"another mode", snap, Claim{Class: "replicated", VolumeMode: Filesystem, Bytes: 20 * gi}, StuckVolumeMode},
		{"another mode, allowed", allowed, Claim{Class: "replicated", VolumeMode: Filesystem, Bytes: 20 * gi}, ""},
		{"smaller and another mode: the size first", snap, Claim{Class: "replicated", VolumeMode: Filesystem, Bytes: gi}, StuckTooSmall},
	} {
		if got := c.ClaimRestoreRefusal(tc.snap, tc.claim); got != tc.want {
			t.Errorf("%s: refusal %q, want %q", tc.name, got, tc.want)
		}
	}
}
