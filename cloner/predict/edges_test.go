package predict

import (
	"slices"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
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
			p := NewState(in).Predict(golden, Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes})
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
	if p := NewState(baseInputs("csi-clone")).Predict(g, Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes}); p.Path != PathCSIClone {
		t.Errorf("golden on replicated without a bound PV, disk on replicated: %s/%s (%s), want %s", p.Path, p.Reason, p.Message, PathCSIClone)
	}
	if p := NewState(baseInputs("csi-clone")).Predict(withClass(g, "ceph"), Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes}); p.Reason != ReasonIncompatibleProvisioners {
		t.Errorf("golden on ceph without a bound PV, disk on replicated: %s (%s), want %s", p.Reason, p.Message, ReasonIncompatibleProvisioners)
	}
}

// The snapshot class both StorageProfiles name is found wherever it sorts
// among the driver's classes.
func TestNamedSnapshotClassFoundAmongOthers(t *testing.T) {
	in := withSnapClass(withSnapClass(baseInputs(""), "a-first", linstor), "snaps", linstor)
	in = withProfile(withProfile(in, profile("replicated", "", "snaps")), profile("replicated-b", "", "snaps"))
	p := NewState(in).Predict(golden, Target{Class: "replicated-b", VolumeMode: "Block", AccessModes: poolAccessModes})
	if p.Path != PathSnapshotClone {
		t.Errorf("got %s/%s (%s), want %s with VolumeSnapshotClass snaps", p.Path, p.Reason, p.Message, PathSnapshotClone)
	}
}

// validateAdvancedClonePVC compares the source's status.capacity; before it
// is known, its request stands in.
func TestGoldenWithoutCapacityIsMeasuredByItsRequest(t *testing.T) {
	g := golden
	g.CapacityBytes = 0
	p := NewState(baseInputs("csi-clone")).Predict(g, Target{Class: "replicated-fixed", Bytes: g.RequestedBytes, VolumeMode: "Block", AccessModes: poolAccessModes})
	if p.Path != PathCSIClone {
		t.Errorf("a disk of the golden's request on a class without expansion: %s/%s (%s), want %s", p.Path, p.Reason, p.Message, PathCSIClone)
	}
}

// A blocked prediction carries no uncertainty but the node-local one: the
// golden's import being under way changes nothing about a block.
func TestBlockedPredictionsAreCertain(t *testing.T) {
	in := Inputs{Classes: baseInputs("").Classes, CSIDrivers: []string{linstor}}
	p := NewState(in).Predict(withPhase(golden, "ImportInProgress"), Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes})
	if p.Reason != ReasonNoActiveCDI || len(p.Uncertain) != 0 {
		t.Errorf("got %s, uncertain %q; want %s and certain", p.Reason, p.Uncertain, ReasonNoActiveCDI)
	}
}

const overheadUncertainty = "no CDIConfig read"

// A sized Filesystem disk's claim depends on CDI's filesystem overhead: the
// prediction says so exactly when no CDIConfig was read (the overhead is
// then taken to be CDI's default); a Block claim and a sizeless disk do not
// depend on it.
func TestFilesystemOverheadUncertainty(t *testing.T) {
	fs := golden
	fs.VolumeMode = "Filesystem"
	withConfig := baseInputs("csi-clone")
	withConfig.CDIConfigs = []*cdiv1.CDIConfig{{Status: cdiv1.CDIConfigStatus{FilesystemOverhead: &cdiv1.FilesystemOverhead{Global: "0.06"}}}}
	for _, tc := range []struct {
		name  string
		in    Inputs
		g     Golden
		bytes int64
		want  bool
	}{
		{"Filesystem disk of the golden's size, no CDIConfig", baseInputs("csi-clone"), fs, fs.CapacityBytes, true},
		{"Filesystem larger disk, no CDIConfig", baseInputs("csi-clone"), fs, 2 * fs.CapacityBytes, true},
		{"Filesystem disk, CDIConfig read", withConfig, fs, fs.CapacityBytes, false},
		{"Filesystem sizeless disk", baseInputs("csi-clone"), fs, 0, false},
		{"Block disk of the golden's size", baseInputs("csi-clone"), golden, golden.CapacityBytes, false},
		{"Filesystem larger disk on another driver's class: host-assisted whatever its claim", baseInputs("csi-clone"), fs, 2 * fs.CapacityBytes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := "replicated"
			if strings.Contains(tc.name, "another driver") {
				class = "ceph"
			}
			p := NewState(tc.in).Predict(tc.g, Target{Class: class, VolumeMode: tc.g.VolumeMode, Bytes: tc.bytes, AccessModes: poolAccessModes})
			got := slices.ContainsFunc(p.Uncertain, func(u string) bool { return strings.HasPrefix(u, overheadUncertainty) })
			if got != tc.want {
				t.Errorf("%s/%s, uncertain %q: overhead named %v, want %v", p.Path, p.Reason, p.Uncertain, got, tc.want)
			}
		})
	}
}

// A pair's at-size disk is the largest whose claim fits the golden's
// capacity (not its request): a golden of request 6Gi and capacity 8Gi on a
// class without expansion takes a disk of its capacity without expansion
// and refuses a larger one. (A golden whose claim has no request cannot be
// cloned at all: CDI's validateClone refuses it, see cdirules.)
func TestPairAtSizeFitsTheGoldensCapacity(t *testing.T) {
	s := NewState(withDerivedProfiles(baseInputs("csi-clone"), "replicated-fixed"))
	target := Target{Class: "replicated-fixed", VolumeMode: "Block", AccessModes: poolAccessModes}
	for _, g := range []Golden{golden, func() Golden { g := golden; g.RequestedBytes, g.CapacityBytes = 6*gi, 8*gi; return g }()} {
		p := s.PairsOn([]Golden{g}, "replicated-fixed", target)[0]
		if p.AtSize.Path != PathCSIClone || p.Larger.Reason != ReasonNoVolumeExpansion {
			t.Errorf("golden of request %d, capacity %d: at size %s/%s (%s), larger %s/%s; want csi-clone and no-volume-expansion",
				g.RequestedBytes, g.CapacityBytes, p.AtSize.Path, p.AtSize.Reason, p.AtSize.Message, p.Larger.Path, p.Larger.Reason)
		}
		r := s.Regions(g, target)
		if r.FitBytes != g.CapacityBytes {
			t.Errorf("golden of capacity %d: FitBytes %d, want its capacity (a Block claim is the disk's size)", g.CapacityBytes, r.FitBytes)
		}
	}
}

// A kubevirt golden on a Filesystem claim whose image size is not known is
// taken to hold the largest image its capacity fits with its own class's
// filesystem overhead: a sizeless spec.storage disk on that class is then
// inflated with the same overhead to at most the golden's capacity, and
// cloned without expansion. The golden's class has an overhead of its own,
// unlike the Kubernetes default class and the global value.
func TestAssumedImageIsSizedWithTheGoldensClassOverhead(t *testing.T) {
	in := baseInputs("csi-clone")
	in.Classes = append(in.Classes, func() *storagev1.StorageClass {
		sc := class("standard", linstor, true)
		sc.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
		return sc
	}())
	in.CDIConfigs = []*cdiv1.CDIConfig{{Status: cdiv1.CDIConfigStatus{FilesystemOverhead: &cdiv1.FilesystemOverhead{
		Global: "0.06", StorageClass: map[string]cdiv1.Percent{"standard": "0.01", "replicated-fixed": "0.2"}}}}}
	g := withClass(golden, "replicated-fixed")
	g.VolumeMode, g.ContentType = "Filesystem", cdirules.ContentKubeVirt
	p := NewState(in).Predict(g, Target{Class: "replicated-fixed", VolumeMode: "Filesystem", AccessModes: poolAccessModes})
	if p.Path != PathCSIClone {
		t.Errorf("%s/%s (%s), want csi-clone: the disk's claim is the golden's image inflated by the same class's overhead", p.Path, p.Reason, p.Message)
	}
}
