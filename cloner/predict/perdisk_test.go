package predict

import (
	"strings"
	"testing"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
)

// CDI derives copy for a driver its capabilities table advises copy for,
// whatever VolumeSnapshotClasses exist: the message must not send the user
// to create one (storagecapabilities.go CloneStrategyByProvisionerKey).
func TestDerivedCopyOfAnAdvisedCopyDriver(t *testing.T) {
	in := withProfile(baseInputs(""), profile("lvm", "copy", ""))
	in.Classes = append(in.Classes, class("lvm", "topolvm.io", true))
	in.CSIDrivers = append(in.CSIDrivers, "topolvm.io")
	p := NewState(in).Predict(golden, Target{Class: "lvm", VolumeMode: "Block", AccessModes: poolAccessModes})
	if p.Reason != ReasonDerivedCopy || !strings.Contains(p.Message, "advises copy") || strings.Contains(p.Message, "has no VolumeSnapshotClass") {
		t.Errorf("%s/%s: %s", p.Path, p.Reason, p.Message)
	}
	p = NewState(withProfile(baseInputs(""), profile("replicated", "copy", ""))).Predict(golden,
		Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes})
	if p.Reason != ReasonDerivedCopy || !strings.Contains(p.Message, "has no VolumeSnapshotClass") {
		t.Errorf("a driver outside the table: %s/%s: %s", p.Path, p.Reason, p.Message)
	}
}

// A prediction from a claim reads the claim's permissiveClone: CDI wrote it
// when it sized the disk (detectCloneSize), and then skips the size check.
func TestClaimedPredictionReadsPermissiveClone(t *testing.T) {
	s := NewState(baseInputs("csi-clone"))
	tg := Target{Class: "replicated", VolumeMode: "Block", Bytes: golden.RequestedBytes - 1<<20, Claimed: true}
	if p := s.Predict(golden, tg); p.Reason != ReasonTargetTooSmall {
		t.Errorf("without permissiveClone: %s/%s", p.Path, p.Reason)
	}
	tg.PerDisk = cdirules.PerDiskOf(map[string]string{cdirules.AnnPermissiveClone: "true"})
	if p := s.Predict(golden, tg); p.Path != PathCSIClone {
		t.Errorf("with permissiveClone: %s/%s (%s)", p.Path, p.Reason, p.Message)
	}
}
