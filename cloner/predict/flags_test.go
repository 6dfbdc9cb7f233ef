package predict

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
)

// A golden whose PV's nodeAffinity pins it to nodes makes every disk cloned
// from it node-bound, whatever the target class: the cross-node flag is set
// once, on the path CDI would take anyway.
func TestAGoldenPinnedToNodesIsFlaggedCrossNode(t *testing.T) {
	pinned := golden
	pinned.PinnedNodes = []string{"node-a"}
	s := NewState(baseInputs("csi-clone"))
	for _, tc := range []struct {
		name  string
		g     Golden
		class string
		flags []string
	}{
		{"pinned golden, its own class", pinned, "replicated", []string{FlagCrossNode}},
		{"pinned golden, another class of the driver", pinned, "replicated-b", []string{FlagClassMismatch, FlagCrossNode}},
		{"pinned golden on the node-local class", withClass(pinned, "local"), "local", []string{FlagCrossNode}},
		{"unpinned golden, its own class", golden, "replicated", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := s.Predict(tc.g, Target{Class: tc.class, VolumeMode: "Block", AccessModes: poolAccessModes})
			if p.Path != PathCSIClone {
				t.Errorf("path %s (%s), want %s: a pinned golden changes no path", p.Path, p.Message, PathCSIClone)
			}
			if fmt.Sprint(p.Flags) != fmt.Sprint(tc.flags) {
				t.Errorf("flags %v, want %v", p.Flags, tc.flags)
			}
		})
	}
}

// NodeLocal reads LINSTOR's allowRemoteVolumeAccess as linstor-csi spells
// and parses it (pkg/volume/parameter.go NewParameters, remoteaccess.go
// RemoteAccessPolicy.UnmarshalText: strconv.ParseBool first, so "false",
// "False" and "FALSE" all forbid diskless access), and allowedTopologies.
func TestNodeLocalReadsLINSTORsRemoteAccessAsLINSTORParsesIt(t *testing.T) {
	const key = linstor + "/allowRemoteVolumeAccess"
	for _, tc := range []struct {
		name  string
		class []string // parameter pairs
		topo  bool
		local bool
	}{
		{"false", []string{key, "false"}, false, true},
		{"False", []string{key, "False"}, false, true},
		{"FALSE", []string{key, "FALSE"}, false, true},
		{"true", []string{key, "true"}, false, false},
		{"True", []string{key, "True"}, false, false},
		{"no parameter", nil, false, false},
		{"another parameter false", []string{linstor + "/encryption", "false"}, false, false},
		{"allowedTopologies", nil, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := class("c", linstor, true, tc.class...)
			if tc.topo {
				sc.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
					{Key: "kubernetes.io/hostname", Values: []string{"node-a"}}}}}
			}
			local, how := NodeLocal(sc)
			if local != tc.local {
				t.Fatalf("NodeLocal = %v (%q), want %v", local, how, tc.local)
			}
			if local && how == "" {
				t.Error("node-local without saying how")
			}
			p := NewState(Inputs{Classes: append(baseInputs("").Classes, sc), CDIs: []*cdiv1.CDI{cdi("csi-clone")},
				CSIDrivers: []string{linstor}}).Predict(withClass(golden, "c"), Target{Class: "c", VolumeMode: "Block", AccessModes: poolAccessModes})
			if p.HasFlag(FlagCrossNode) != tc.local {
				t.Errorf("flags %v: cross-node %v, want %v", p.Flags, p.HasFlag(FlagCrossNode), tc.local)
			}
		})
	}
	if local, _ := NodeLocal(nil); local {
		t.Error("NodeLocal(nil) = true")
	}
}

// reasonCases produces every prediction reason: the closed set Reasons.
var reasonCases = map[string]struct {
	in     Inputs
	g      Golden
	target Target
}{
	ReasonCDIOverride:              {baseInputs("csi-clone"), golden, Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonStorageProfile:           {withProfile(baseInputs(""), profile("replicated", "csi-clone", "")), golden, Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonDefaultSnapshot:          {withSnapClass(baseInputs(""), "snaps", linstor), golden, Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonCopyStrategy:             {baseInputs("copy"), golden, Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonNoPopulator:              {baseInputs("csi-clone"), golden, Target{Class: "intree", AccessModes: poolAccessModes}},
	ReasonNoVolumeSnapshotClass:    {baseInputs(""), golden, Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonIncompatibleProvisioners: {baseInputs("csi-clone"), golden, Target{Class: "ceph", AccessModes: poolAccessModes}},
	ReasonIncompatibleVolumeModes:  {baseInputs("csi-clone"), golden, Target{Class: "replicated", VolumeMode: "Filesystem", AccessModes: poolAccessModes}},
	ReasonNoVolumeExpansion:        {baseInputs("csi-clone"), golden, Target{Class: "replicated-fixed", Bytes: 20 * gi, AccessModes: poolAccessModes}},
	ReasonGoldenFailed:             {baseInputs("csi-clone"), withPhase(golden, "Failed"), Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonClassUnresolved:          {baseInputs("csi-clone"), golden, Target{Unresolved: true}},
	ReasonClassNotFound:            {baseInputs("csi-clone"), golden, Target{Class: "gone", AccessModes: poolAccessModes}},
	ReasonNoActiveCDI:              {Inputs{Classes: baseInputs("").Classes, CSIDrivers: []string{linstor}}, golden, Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonTargetTooSmall:           {baseInputs("csi-clone"), golden, Target{Class: "replicated", Bytes: 2 * gi, AccessModes: poolAccessModes}},
	ReasonSnapshotClassNotFound: {withProfile(withProfile(withSnapClass(baseInputs(""), "snaps", linstor), profile("replicated", "", "gone")),
		profile("replicated-b", "", "gone")), golden, Target{Class: "replicated-b", AccessModes: poolAccessModes}},
	ReasonNodeLocalTarget:     {baseInputs("csi-clone"), golden, Target{Class: "local", AccessModes: poolAccessModes}},
	ReasonDerivedCopy:         {withProfile(baseInputs(""), profile("replicated", "copy", "")), golden, Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonUnknownStrategy:     {withProfile(baseInputs(""), profile("replicated", "fast", "")), golden, Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonContentTypeMismatch: {baseInputs("csi-clone"), golden, Target{Class: "replicated", ContentType: "archive", Bytes: 6 * gi, AccessModes: poolAccessModes}},
	// No access modes and no StorageProfile: CDI cannot render the claim.
	ReasonClaimInvalid: {baseInputs("csi-clone"), golden, Target{Class: "replicated", AccessModes: []string{}}},
	// Per-disk annotations.
	ReasonCloneTypeAnnotation:  {baseInputs("copy"), golden, Target{Class: "replicated", AccessModes: poolAccessModes, PerDisk: perDisk(cdirules.AnnCloneType, "csi-clone")}},
	ReasonCloneTypeCopy:        {baseInputs("csi-clone"), golden, Target{Class: "replicated", AccessModes: poolAccessModes, PerDisk: perDisk(cdirules.AnnCloneType, "copy")}},
	ReasonCloneTypeNoExpansion: {baseInputs("csi-clone"), golden, Target{Class: "replicated-fixed", Bytes: 20 * gi, AccessModes: poolAccessModes, PerDisk: perDisk(cdirules.AnnCloneType, "csi-clone")}},
	ReasonCloneTypeRefused:     {baseInputs("csi-clone"), golden, Target{Class: "ceph", AccessModes: poolAccessModes, PerDisk: perDisk(cdirules.AnnCloneType, "csi-clone")}},
	ReasonPopulatorOff:         {baseInputs("csi-clone"), golden, Target{Class: "replicated", AccessModes: poolAccessModes, PerDisk: perDisk(cdirules.AnnUsePopulator, "false")}},
	ReasonUsePopulatorInvalid:  {baseInputs("csi-clone"), golden, Target{Class: "replicated", AccessModes: poolAccessModes, PerDisk: perDisk(cdirules.AnnUsePopulator, "no")}},
	// A golden VolumeSnapshot.
	ReasonSnapshotSource:     {baseInputs("copy"), snapshotGolden(func(*cdirules.Snapshot) {}), Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonNoProvisionerMatch: {baseInputs("csi-clone"), snapshotGolden(func(*cdirules.Snapshot) {}), Target{Class: "ceph", AccessModes: poolAccessModes}},
	ReasonGoldenMissing:      {baseInputs("csi-clone"), snapshotGolden(func(s *cdirules.Snapshot) { *s = cdirules.Snapshot{} }), Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonSnapshotUnusable: {baseInputs("csi-clone"), snapshotGolden(func(s *cdirules.Snapshot) { s.SnapshotClass = "" }),
		Target{Class: "replicated", AccessModes: poolAccessModes}},
	ReasonSourceNamespaceUnset: {baseInputs("csi-clone"), golden, Target{Class: "replicated", AccessModes: poolAccessModes, UnqualifiedSource: true}},
	// A bare claim: the external-provisioner's, whatever CDI is set to.
	ReasonDataSource:         {baseInputs("copy"), golden, Target{Class: "replicated", VolumeMode: "Block", Bytes: 20 * gi, DataSource: true}},
	ReasonProvisionerRefuses: {baseInputs("csi-clone"), golden, Target{Class: "replicated", VolumeMode: "Block", Bytes: 2 * gi, DataSource: true}},
}

// snapshotGolden is a ready golden VolumeSnapshot of the LINSTOR golden's
// Block volume, at its size, edited.
func snapshotGolden(edit func(*cdirules.Snapshot)) Golden {
	g := golden
	g.Snapshot = &cdirules.Snapshot{Exists: true, HasStatus: true, SnapshotClass: "snaps", RestoreBytes: g.CapacityBytes, HasRestoreSize: true,
		ContentBound: true, Driver: linstor, SourceVolumeMode: cdirules.Block}
	edit(g.Snapshot)
	return g
}

func perDisk(k, v string) cdirules.PerDisk { return cdirules.PerDiskOf(map[string]string{k: v}) }

// Every reason in the closed set Reasons: some inputs predict it, it is a
// label value once, and it has a fix exactly when its path is bad (a good
// path needs none, a bad one names its remedy).
func TestEveryPredictionReason(t *testing.T) {
	if len(reasonCases) != len(Reasons) {
		t.Errorf("%d cases for %d reasons", len(reasonCases), len(Reasons))
	}
	seen := map[string]bool{}
	for _, reason := range Reasons {
		if seen[reason] {
			t.Errorf("reason %q listed twice", reason)
		}
		seen[reason] = true
		t.Run(reason, func(t *testing.T) {
			tc, ok := reasonCases[reason]
			if !ok {
				t.Fatal("no case predicts it")
			}
			if tc.target.VolumeMode == "" && tc.target.ContentType == "" {
				tc.target.VolumeMode = "Block"
			}
			p := NewState(tc.in).Predict(tc.g, tc.target)
			if p.Reason != reason {
				t.Fatalf("predicted %s/%s (%s), want reason %s", p.Path, p.Reason, p.Message, reason)
			}
			if !slices.Contains(Paths, p.Path) {
				t.Errorf("path %q is not in Paths", p.Path)
			}
			if (Fix(reason) != "") != p.Bad() {
				t.Errorf("path %s, Bad=%v, but Fix = %q", p.Path, p.Bad(), Fix(reason))
			}
		})
	}
}

// TestBareClaimOntoANodeLocalClassIsTheProvisionersAsk: a bare claim of a
// replicated golden onto a node-local class is blocked as a DataVolume's
// is, and the message names who asks the driver: the external-provisioner.
func TestBareClaimOntoANodeLocalClassIsTheProvisionersAsk(t *testing.T) {
	s := NewState(baseInputs("csi-clone"))
	p := s.Predict(golden, Target{Class: "local", VolumeMode: "Block", Bytes: 20 * gi, DataSource: true})
	if p.Path != PathBlocked || p.Reason != ReasonNodeLocalTarget || !strings.Contains(p.Message, "the external-provisioner asks the driver") {
		t.Errorf("%s/%s %q, want blocked node-local-target asked by the external-provisioner", p.Path, p.Reason, p.Message)
	}
}
