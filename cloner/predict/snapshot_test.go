package predict

import (
	"testing"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
)

// A golden VolumeSnapshot is predicted by CDI's rules for a snapshot
// source (cdirules.CloneFromSnapshotWithClaim; compared with cdi-controller
// by test/e2e's differential): no strategy is chosen, the restore size and
// the content's driver and source volume mode decide, and a DataVolume
// waits for a missing snapshot before its class is looked at.
func TestSnapshotGoldenPaths(t *testing.T) {
	s := NewState(baseInputs("copy"))
	block := Target{Class: "replicated", VolumeMode: cdirules.Block, AccessModes: poolAccessModes}
	with := func(t Target, f func(*Target)) Target { f(&t); return t }
	for _, tc := range []struct {
		name   string
		g      Golden
		target Target
		want   string
	}{
		{"restored whatever the override", snapshotGolden(func(*cdirules.Snapshot) {}), block, PathSnapshotClone + "/" + ReasonSnapshotSource},
		{"a claim, restored", snapshotGolden(func(*cdirules.Snapshot) {}), with(block, func(t *Target) { t.Claimed, t.Bytes = true, 10*gi }),
			PathSnapshotClone + "/" + ReasonSnapshotSource},
		{"a claim on another driver", snapshotGolden(func(*cdirules.Snapshot) {}), with(block, func(t *Target) { t.Claimed, t.Class, t.Bytes = true, "ceph", 10*gi }),
			PathHostAssisted + "/" + ReasonNoProvisionerMatch},
		{"unrecorded source mode is Filesystem", snapshotGolden(func(s *cdirules.Snapshot) { s.SourceVolumeMode = "" }), block,
			PathHostAssisted + "/" + ReasonIncompatibleVolumeModes},
		{"larger than the restore size, no expansion", snapshotGolden(func(*cdirules.Snapshot) {}),
			with(block, func(t *Target) { t.Class, t.Bytes = "replicated-fixed", 20*gi }), PathHostAssisted + "/" + ReasonNoVolumeExpansion},
		{"below the restore size", snapshotGolden(func(*cdirules.Snapshot) {}), with(block, func(t *Target) { t.Bytes = 2 * gi }),
			PathBlocked + "/" + ReasonTargetTooSmall},
		{"missing, on a missing class", snapshotGolden(func(s *cdirules.Snapshot) { *s = cdirules.Snapshot{} }),
			with(block, func(t *Target) { t.Class = "gone" }), PathBlocked + "/" + ReasonGoldenMissing},
		{"present, on a missing class", snapshotGolden(func(*cdirules.Snapshot) {}), with(block, func(t *Target) { t.Class = "gone" }),
			PathBlocked + "/" + ReasonClassNotFound},
		{"cloneType csi-clone is unknown for a snapshot", snapshotGolden(func(*cdirules.Snapshot) {}),
			with(block, func(t *Target) { t.PerDisk = perDisk(cdirules.AnnCloneType, cdirules.StrategyCSIClone) }), PathBlocked + "/" + ReasonUnknownStrategy},
		{"cloneType snapshot onto another driver", snapshotGolden(func(*cdirules.Snapshot) {}),
			with(block, func(t *Target) {
				t.Class, t.PerDisk = "ceph", perDisk(cdirules.AnnCloneType, cdirules.StrategySnapshot)
			}),
			PathBlocked + "/" + ReasonCloneTypeRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := s.Predict(tc.g, tc.target)
			if got := p.Path + "/" + p.Reason; got != tc.want {
				t.Errorf("predicted %s (%s), want %s", got, p.Message, tc.want)
			}
		})
	}
}
