package predict

import (
	"slices"
	"strings"
	"testing"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The edges of CDI's rules that make mutation testing (make mutation,
// docs/testing.md) find a test: each case pins one comparison.

// common/util.go GetActiveCDI: a lone CDI resource is the active one,
// whatever its phase; among several, the only one not in phase Error.
func TestActiveCDIFollowsGetActiveCDI(t *testing.T) {
	errored := func(override cdiv1.CDICloneStrategy) *cdiv1.CDI {
		c := cdi(override)
		c.Status.Phase = "Error"
		return c
	}
	for _, tc := range []struct {
		name    string
		cdis    []*cdiv1.CDI
		problem string // "" when one is active
	}{
		{"a lone CDI in phase Error is active", []*cdiv1.CDI{errored("csi-clone")}, ""},
		{"none", nil, "no CDI resource exists"},
		{"two, both in phase Error", []*cdiv1.CDI{errored("csi-clone"), errored("csi-clone")}, "every CDI resource is in phase Error"},
		{"two, one in phase Error", []*cdiv1.CDI{errored("copy"), cdi("csi-clone")}, ""},
		{"two active", []*cdiv1.CDI{cdi("csi-clone"), cdi("csi-clone")}, "several CDI resources are active"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInputs("")
			in.CDIs = tc.cdis
			p := NewState(in).Predict(golden, Target{Class: "replicated", VolumeMode: "Block"})
			if tc.problem == "" {
				if p.Path != PathCSIClone || p.Reason != ReasonCDIOverride {
					t.Errorf("got %s/%s (%s), want the active CDI's csi-clone override", p.Path, p.Reason, p.Message)
				}
				return
			}
			if p.Reason != ReasonNoActiveCDI || !strings.HasPrefix(p.Message, tc.problem+":") {
				t.Errorf("got %s (%s), want %s saying %q", p.Reason, p.Message, ReasonNoActiveCDI, tc.problem)
			}
		})
	}
}

// GetCommonDriver: before the golden's claim is bound its driver is its
// class's provisioner.
func TestUnboundGoldenTakesItsClassesDriver(t *testing.T) {
	g := withPhase(golden, "ImportInProgress")
	g.Driver = ""
	if p := NewState(baseInputs("csi-clone")).Predict(g, Target{Class: "replicated", VolumeMode: "Block"}); p.Path != PathCSIClone {
		t.Errorf("golden on replicated without a bound PV, disk on replicated: %s/%s (%s), want %s", p.Path, p.Reason, p.Message, PathCSIClone)
	}
	if p := NewState(baseInputs("csi-clone")).Predict(withClass(g, "ceph"), Target{Class: "replicated", VolumeMode: "Block"}); p.Reason != ReasonIncompatibleProvisioners {
		t.Errorf("golden on ceph without a bound PV, disk on replicated: %s (%s), want %s", p.Reason, p.Message, ReasonIncompatibleProvisioners)
	}
}

// The snapshot class both StorageProfiles name is found wherever it sorts
// among the driver's classes.
func TestNamedSnapshotClassFoundAmongOthers(t *testing.T) {
	in := withSnapClass(withSnapClass(baseInputs(""), "a-first", linstor), "snaps", linstor)
	in = withProfile(withProfile(in, profile("replicated", "", "snaps")), profile("replicated-b", "", "snaps"))
	p := NewState(in).Predict(golden, Target{Class: "replicated-b", VolumeMode: "Block"})
	if p.Path != PathSnapshotClone {
		t.Errorf("got %s/%s (%s), want %s with VolumeSnapshotClass snaps", p.Path, p.Reason, p.Message, PathSnapshotClone)
	}
}

// validateAdvancedClonePVC compares the source's status.capacity; before it
// is known, its request stands in.
func TestGoldenWithoutCapacityIsMeasuredByItsRequest(t *testing.T) {
	g := golden
	g.CapacityBytes = 0
	p := NewState(baseInputs("csi-clone")).Predict(g, Target{Class: "replicated-fixed", Bytes: g.RequestedBytes, VolumeMode: "Block"})
	if p.Path != PathCSIClone {
		t.Errorf("a disk of the golden's request on a class without expansion: %s/%s (%s), want %s", p.Path, p.Reason, p.Message, PathCSIClone)
	}
}

// A blocked prediction carries no uncertainty but the node-local one: the
// golden's import being under way changes nothing about a block.
func TestBlockedPredictionsAreCertain(t *testing.T) {
	in := Inputs{Classes: baseInputs("").Classes, CSIDrivers: []string{linstor}}
	p := NewState(in).Predict(withPhase(golden, "ImportInProgress"), Target{Class: "replicated", VolumeMode: "Block"})
	if p.Reason != ReasonNoActiveCDI || len(p.Uncertain) != 0 {
		t.Errorf("got %s, uncertain %q; want %s and certain", p.Reason, p.Uncertain, ReasonNoActiveCDI)
	}
}

const overheadUncertainty = "a Filesystem claim gets CDI's filesystem overhead added"

// A Filesystem disk of the golden's size may still need an expansion (CDI
// adds its filesystem overhead): uncertain exactly then.
func TestFilesystemOverheadUncertainty(t *testing.T) {
	fs := golden
	fs.VolumeMode = "Filesystem"
	grown := fs
	grown.CapacityBytes = 8 * gi // more than its request of 6Gi
	for _, tc := range []struct {
		name  string
		g     Golden
		bytes int64
		want  bool
	}{
		{"Filesystem golden, disk of its size", fs, fs.CapacityBytes, true},
		{"Filesystem golden, disk between its request and capacity", grown, 7 * gi, true},
		{"Filesystem golden, larger disk", fs, 2 * fs.CapacityBytes, false},
		{"Filesystem golden, size unknown (larger)", fs, 0, false},
		{"Block golden, disk of its size", golden, golden.CapacityBytes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewState(baseInputs("csi-clone")).Predict(tc.g, Target{Class: "replicated", VolumeMode: tc.g.VolumeMode, Bytes: tc.bytes})
			got := slices.ContainsFunc(p.Uncertain, func(u string) bool { return strings.HasPrefix(u, overheadUncertainty) })
			if got != tc.want {
				t.Errorf("uncertain %q: overhead named %v, want %v", p.Uncertain, got, tc.want)
			}
		})
	}
}

// A pair's at-size disk is the golden's request, else its capacity.
func TestPairAtSizeIsTheGoldensRequestElseCapacity(t *testing.T) {
	s := NewState(baseInputs("csi-clone"))
	g := golden
	g.RequestedBytes = 0
	p := s.PairsOn([]Golden{g}, "replicated-fixed", Target{Class: "replicated-fixed"})[0]
	if p.AtSize.Path != PathCSIClone || p.Larger.Reason != ReasonNoVolumeExpansion {
		t.Errorf("golden without a request: at size %s/%s, larger %s/%s; want csi-clone and no-volume-expansion",
			p.AtSize.Path, p.AtSize.Reason, p.Larger.Path, p.Larger.Reason)
	}
	g = golden
	g.RequestedBytes, g.CapacityBytes = 6*gi, 8*gi
	p = s.PairsOn([]Golden{g}, "replicated-fixed", Target{Class: "replicated-fixed"})[0]
	if p.AtSize.Path != PathCSIClone {
		t.Errorf("golden of request 6Gi, capacity 8Gi: at size %s/%s (%s), want csi-clone", p.AtSize.Path, p.AtSize.Reason, p.AtSize.Message)
	}
}
