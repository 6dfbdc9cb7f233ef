package predict

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

const (
	linstor = "linstor.csi.linbit.com"
	gi      = int64(1) << 30
)

func class(name, provisioner string, expand bool, params ...string) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner,
		AllowVolumeExpansion: &expand, Parameters: map[string]string{}}
	for i := 0; i+1 < len(params); i += 2 {
		sc.Parameters[params[i]] = params[i+1]
	}
	return sc
}

func profile(name string, strategy cdiv1.CDICloneStrategy, snapClass string) *cdiv1.StorageProfile {
	sp := &cdiv1.StorageProfile{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if strategy != "" {
		sp.Status.CloneStrategy = &strategy
	}
	if snapClass != "" {
		sp.Status.SnapshotClass = &snapClass
	}
	return sp
}

// poolAccessModes are a disk's that names its access modes.
var poolAccessModes = []string{"ReadWriteOnce"}

// withDerivedProfiles gives classes the StorageProfiles CDI derives for a
// driver its storagecapabilities table knows as it knows LINSTOR's and Ceph
// RBD's: ReadWriteMany Block, ReadWriteOnce Block, ReadWriteOnce Filesystem.
func withDerivedProfiles(in Inputs, classes ...string) Inputs {
	for _, c := range classes {
		in = withClaimSets(in, c, [2]string{"Block", "ReadWriteMany"}, [2]string{"Block", "ReadWriteOnce"}, [2]string{"Filesystem", "ReadWriteOnce"})
	}
	return in
}

func cdi(override cdiv1.CDICloneStrategy) *cdiv1.CDI {
	c := &cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "cdi"}}
	if override != "" {
		c.Spec.CloneStrategyOverride = &override
	}
	return c
}

// baseInputs: the golden's class, one without expansion, another class of
// the same driver, a node-local one, a class of another CSI driver and one
// of a driver without a CSIDriver object.
func baseInputs(override cdiv1.CDICloneStrategy) Inputs {
	return Inputs{
		Classes: []*storagev1.StorageClass{
			class("replicated", linstor, true),
			class("replicated-fixed", linstor, false),
			class("replicated-b", linstor, true),
			class("local", linstor, true, linstor+"/allowRemoteVolumeAccess", "false"),
			class("ceph", "rbd.csi.ceph.com", true),
			class("intree", "kubernetes.io/no-provisioner", true),
		},
		CDIs:       []*cdiv1.CDI{cdi(override)},
		CSIDrivers: []string{linstor, "rbd.csi.ceph.com"},
	}
}

var golden = Golden{Namespace: "cozy-public", Name: "talos-worker-a-v1.13.0", Class: "replicated", Phase: "Succeeded",
	Driver: linstor, VolumeMode: "Block", CapacityBytes: 6 * gi, RequestedBytes: 6 * gi}

func TestPredictFollowsCDIsPlanner(t *testing.T) {
	cases := []struct {
		name      string
		in        Inputs
		g         Golden
		target    Target
		path      string
		reason    string
		flags     []string
		uncertain bool
	}{
		{"same class, csi-clone forced", baseInputs("csi-clone"), golden, Target{Class: "replicated"}, PathCSIClone, ReasonCDIOverride, nil, false},
		{"golden's size on a class without expansion", baseInputs("csi-clone"), golden, Target{Class: "replicated-fixed", Bytes: 6 * gi},
			PathCSIClone, ReasonCDIOverride, []string{FlagClassMismatch}, true},
		{"larger on a class without expansion", baseInputs("csi-clone"), golden, Target{Class: "replicated-fixed", Bytes: 20 * gi},
			PathHostAssisted, ReasonNoVolumeExpansion, []string{FlagClassMismatch}, false},
		{"another CSI driver", baseInputs("csi-clone"), golden, Target{Class: "ceph"}, PathHostAssisted, ReasonIncompatibleProvisioners, []string{FlagClassMismatch}, false},
		{"no CSIDriver object", baseInputs("csi-clone"), golden, Target{Class: "intree"}, PathHostAssisted, ReasonNoPopulator, []string{FlagClassMismatch}, false},
		{"second class of the same driver", baseInputs("csi-clone"), golden, Target{Class: "replicated-b"}, PathCSIClone, ReasonCDIOverride, []string{FlagClassMismatch}, true},
		{"node-local class", baseInputs("csi-clone"), golden, Target{Class: "local"}, PathBlocked, ReasonNodeLocalTarget, []string{FlagClassMismatch, FlagCrossNode}, true},
		{"golden on the node-local class", baseInputs("csi-clone"), withClass(golden, "local"), Target{Class: "local"}, PathCSIClone, ReasonCDIOverride, []string{FlagCrossNode}, false},
		{"volume modes differ", baseInputs("csi-clone"), golden, Target{Class: "replicated", VolumeMode: "Filesystem"}, PathHostAssisted, ReasonIncompatibleVolumeModes, nil, false},
		{"copy forced", baseInputs("copy"), golden, Target{Class: "replicated"}, PathHostAssisted, ReasonCopyStrategy, nil, false},
		{"default snapshot without a VolumeSnapshotClass", baseInputs(""), golden, Target{Class: "replicated"}, PathHostAssisted, ReasonNoVolumeSnapshotClass, nil, false},
		{"default snapshot with one", withSnapClass(baseInputs(""), "snaps", linstor), golden, Target{Class: "replicated"}, PathSnapshotClone, ReasonDefaultSnapshot, nil, false},
		{"snapshot, another driver: no snapshot class before the provisioner check", withSnapClass(baseInputs(""), "snaps", linstor), golden, Target{Class: "ceph"},
			PathHostAssisted, ReasonNoVolumeSnapshotClass, []string{FlagClassMismatch}, false},
		{"profile says csi-clone", withProfile(baseInputs(""), profile("replicated", "csi-clone", "")), golden, Target{Class: "replicated"}, PathCSIClone, ReasonStorageProfile, nil, false},
		{"profile says snapshot, only another driver's snapshot class", withSnapClass(withProfile(baseInputs(""), profile("replicated", "snapshot", "")), "ceph-snaps", "rbd.csi.ceph.com"),
			golden, Target{Class: "replicated"}, PathHostAssisted, ReasonNoVolumeSnapshotClass, nil, false},
		{"override wins over the profile", withProfile(baseInputs("csi-clone"), profile("replicated", "copy", "")), golden, Target{Class: "replicated"}, PathCSIClone, ReasonCDIOverride, nil, false},
		{"profiles name a missing snapshot class", withProfile(withProfile(withSnapClass(baseInputs(""), "snaps", linstor), profile("replicated", "", "gone")), profile("replicated-b", "", "gone")),
			golden, Target{Class: "replicated-b"}, PathBlocked, ReasonSnapshotClassNotFound, []string{FlagClassMismatch}, false},
		{"profiles name another driver's snapshot class", withProfile(withSnapClass(baseInputs(""), "ceph-snaps", "rbd.csi.ceph.com"), profile("replicated", "", "ceph-snaps")),
			golden, Target{Class: "replicated"}, PathHostAssisted, ReasonNoVolumeSnapshotClass, nil, false},
		{"golden failed", baseInputs("csi-clone"), withPhase(golden, "Failed"), Target{Class: "replicated"}, PathBlocked, ReasonGoldenFailed, nil, false},
		{"no default class", baseInputs("csi-clone"), golden, Target{Unresolved: true}, PathBlocked, ReasonClassUnresolved, nil, false},
		{"class does not exist", baseInputs("csi-clone"), golden, Target{Class: "gone"}, PathBlocked, ReasonClassNotFound, nil, false},
		{"disk smaller than the golden", baseInputs("csi-clone"), golden, Target{Class: "replicated", Bytes: 2 * gi}, PathBlocked, ReasonTargetTooSmall, nil, false},
		{"no CDI resource", Inputs{Classes: baseInputs("").Classes, CSIDrivers: []string{linstor}}, golden, Target{Class: "replicated"}, PathBlocked, ReasonNoActiveCDI, nil, false},
		{"importing golden", baseInputs("csi-clone"), withPhase(golden, "ImportInProgress"), Target{Class: "replicated"}, PathCSIClone, ReasonCDIOverride, nil, true},
	}
	for _, tc := range cases {
		if tc.target.VolumeMode == "" {
			tc.target.VolumeMode = "Block" // as the platform's disks, and the golden
		}
		if tc.target.AccessModes == nil {
			tc.target.AccessModes = poolAccessModes
		}
		t.Run(tc.name, func(t *testing.T) {
			p := NewState(tc.in).Predict(tc.g, tc.target)
			if p.Path != tc.path || p.Reason != tc.reason {
				t.Errorf("got %s/%s (%s), want %s/%s", p.Path, p.Reason, p.Message, tc.path, tc.reason)
			}
			if fmt.Sprint(p.Flags) != fmt.Sprint(tc.flags) {
				t.Errorf("flags %v, want %v", p.Flags, tc.flags)
			}
			if (len(p.Uncertain) > 0) != tc.uncertain {
				t.Errorf("uncertain %v, want uncertain=%v", p.Uncertain, tc.uncertain)
			}
			if p.Message == "" {
				t.Error("no message")
			}
			if p.Bad() && Fix(p.Reason) == "" {
				t.Errorf("bad reason %s has no fix", p.Reason)
			}
		})
	}
}

func withClass(g Golden, c string) Golden { g.Class = c; return g }
func withPhase(g Golden, p string) Golden { g.Phase = p; return g }
func withProfile(in Inputs, sp *cdiv1.StorageProfile) Inputs {
	in.Profiles = append(in.Profiles, sp)
	return in
}
func withSnapClass(in Inputs, name, driver string) Inputs {
	in.SnapshotClasses = append(in.SnapshotClasses, SnapshotClass{Name: name, Driver: driver})
	return in
}

// TestTargetVolumeModeFromTheStorageProfile: a spec.storage disk that names
// neither volume mode nor access modes gets the StorageProfile's first
// claimPropertySet; without one CDI cannot render its claim.
func TestTargetVolumeModeFromTheStorageProfile(t *testing.T) {
	withSets := func(modes ...corev1.PersistentVolumeMode) Inputs {
		sp := profile("replicated", "", "")
		for _, m := range modes {
			sp.Status.ClaimPropertySets = append(sp.Status.ClaimPropertySets,
				cdiv1.ClaimPropertySet{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &m})
		}
		return withProfile(baseInputs("csi-clone"), sp)
	}
	cases := []struct {
		name   string
		in     Inputs
		reason string
	}{
		{"the profile's Block", withSets(corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem), ReasonCDIOverride},
		{"the profile's Filesystem first", withSets(corev1.PersistentVolumeFilesystem, corev1.PersistentVolumeBlock), ReasonIncompatibleVolumeModes},
		{"a profile without claimPropertySets", withSets(), ReasonClaimInvalid},
	}
	for _, tc := range cases {
		p := NewState(tc.in).Predict(golden, Target{Class: "replicated", Bytes: 6 * gi})
		if p.Reason != tc.reason {
			t.Errorf("%s: %+v, want %s", tc.name, p, tc.reason)
		}
	}
}

// TestIssue25Answers: the answers issue 25 lists as wrong, each from CDI's
// rules (claims compared, not DataVolumes; unknown strategies; the derived
// copy's fix).
func TestIssue25Answers(t *testing.T) {
	fsOf := func(request int64) Golden {
		g := golden
		g.VolumeMode, g.RequestedBytes, g.CapacityBytes = "Filesystem", request, request
		return g
	}
	in := baseInputs("csi-clone")
	in.CDIConfigs = []*cdiv1.CDIConfig{{Status: cdiv1.CDIConfigStatus{FilesystemOverhead: &cdiv1.FilesystemOverhead{Global: "0.06"}}}}
	unknown := withProfile(baseInputs(""), profile("replicated", "fast", ""))
	derived := withProfile(baseInputs(""), profile("replicated", "copy", ""))
	spec := profile("replicated", "copy", "")
	copyStrategy := cdiv1.CloneStrategyHostAssisted
	spec.Spec.CloneStrategy = &copyStrategy
	setCopy := withProfile(baseInputs(""), spec)
	cases := []struct {
		name   string
		in     Inputs
		g      Golden
		t      Target
		reason string
	}{
		{"sizeless disk on a class without expansion", baseInputs("csi-clone"), golden,
			Target{Class: "replicated-fixed", VolumeMode: "Block", AccessModes: poolAccessModes}, ReasonCDIOverride},
		{"spec.storage Filesystem 10Gi golden, spec.pvc 10Gi worker", in, fsOf(11381663335),
			Target{Class: "replicated", Kind: "pvc", VolumeMode: "Filesystem", Bytes: 10 * gi}, ReasonTargetTooSmall},
		{"spec.pvc 10Gi golden, spec.storage Filesystem 9.5Gi worker", in, fsOf(10 * gi),
			Target{Class: "replicated", VolumeMode: "Filesystem", AccessModes: poolAccessModes, Bytes: 19 * gi / 2}, ReasonCDIOverride},
		{"the same without expansion", in, fsOf(10 * gi),
			Target{Class: "replicated-fixed", VolumeMode: "Filesystem", AccessModes: poolAccessModes, Bytes: 19 * gi / 2}, ReasonNoVolumeExpansion},
		{"unknown strategy", unknown, golden, Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes}, ReasonUnknownStrategy},
		{"copy derived by CDI", derived, golden, Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes}, ReasonDerivedCopy},
		{"copy set on the profile", setCopy, golden, Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes}, ReasonCopyStrategy},
		{"archive clone of a kubevirt golden", baseInputs("csi-clone"), golden,
			Target{Class: "replicated", ContentType: "archive", Bytes: 6 * gi, AccessModes: poolAccessModes}, ReasonContentTypeMismatch},
	}
	for _, tc := range cases {
		p := NewState(tc.in).Predict(tc.g, tc.t)
		if p.Reason != tc.reason {
			t.Errorf("%s: %s/%s (%s), want %s", tc.name, p.Path, p.Reason, p.Message, tc.reason)
		}
	}
	if f := Fix(ReasonDerivedCopy); !strings.Contains(f, "spec.cloneStrategy: csi-clone") || !strings.Contains(f, "VolumeSnapshotClass") {
		t.Errorf("derived copy's fix: %q", f)
	}
}

func TestSeveralCDIResources(t *testing.T) {
	in := baseInputs("csi-clone")
	broken := cdi("copy")
	broken.Status.Phase = "Error"
	in.CDIs = append(in.CDIs, broken)
	if p := NewState(in).Predict(golden, Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes}); p.Reason != ReasonCDIOverride {
		t.Errorf("the one CDI not in Error is the active one: %+v", p)
	}
	in.CDIs = append(in.CDIs, cdi(""))
	if p := NewState(in).Predict(golden, Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes}); p.Reason != ReasonNoActiveCDI {
		t.Errorf("two active CDIs: %+v", p)
	}
}

func TestPairsCoverEveryCSIClassAndTheEmptyOne(t *testing.T) {
	s := NewState(withDerivedProfiles(baseInputs("csi-clone"), "replicated", "replicated-fixed", "replicated-b", "local", "ceph"))
	pairs := s.Pairs([]Golden{golden}, Target{Class: "replicated"})
	var got []string
	for _, p := range pairs {
		got = append(got, p.Class+"="+p.Larger.Path+"/"+p.AtSize.Path+"/"+p.Sizeless.Path)
	}
	want := "ceph=host-assisted/host-assisted/host-assisted local=blocked/blocked/blocked replicated=csi-clone/csi-clone/csi-clone " +
		"replicated-b=csi-clone/csi-clone/csi-clone replicated-fixed=host-assisted/csi-clone/csi-clone (default)=csi-clone/csi-clone/csi-clone"
	if strings.Join(got, " ") != want {
		t.Errorf("pairs\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if pairs[len(pairs)-1].ResolvedClass != "replicated" {
		t.Errorf("empty class resolved to %q", pairs[len(pairs)-1].ResolvedClass)
	}
	for _, r := range Reasons {
		if _, ok := fixes[r]; !ok {
			t.Errorf("reason %s has no entry in fixes", r)
		}
	}
}

// A pair is the disk the platform's templates render, naming neither a
// volume mode nor access modes: CDI gives it its class's StorageProfile's
// first claimPropertySet. On a class whose first set is Filesystem, a
// Block golden's template disk is copied (incompatible volume modes) where
// a disk naming Block is CSI-cloned; on one whose profile has no set CDI
// renders no claim.
func TestPairsAreTheTemplatesDisk(t *testing.T) {
	in := baseInputs("csi-clone")
	in.Classes = append(in.Classes, class("fs-first", linstor, true), class("no-sets", linstor, true))
	in = withDerivedProfiles(in, "replicated")
	in = withClaimSets(in, "fs-first", [2]string{"Filesystem", "ReadWriteOnce"}, [2]string{"Block", "ReadWriteMany"})
	in = withProfile(in, profile("no-sets", "", ""))
	s := NewState(in)
	got := map[string]string{}
	for _, p := range s.PairsOn([]Golden{golden}, "", Target{Class: "replicated"}) {
		got["replicated"] = p.Larger.Path + "/" + p.Larger.Reason + " " + strings.Join(p.AccessModes, ",")
	}
	for _, c := range []string{"fs-first", "no-sets"} {
		p := s.PairsOn([]Golden{golden}, c, Target{Class: c})[0]
		got[c] = p.Larger.Path + "/" + p.Larger.Reason + " " + strings.Join(p.AccessModes, ",")
	}
	want := map[string]string{
		"replicated": PathCSIClone + "/" + ReasonCDIOverride + " ReadWriteMany",
		"fs-first":   PathHostAssisted + "/" + ReasonIncompatibleVolumeModes + " ReadWriteOnce",
		"no-sets":    PathBlocked + "/" + ReasonClaimInvalid + " ",
	}
	for c, w := range want {
		if got[c] != w {
			t.Errorf("pair on %s: %q, want %q", c, got[c], w)
		}
	}
	named := s.Predict(golden, Target{Class: "fs-first", VolumeMode: "Block", AccessModes: poolAccessModes})
	if named.Path != PathCSIClone {
		t.Errorf("a disk naming Block on fs-first: %s/%s, want %s", named.Path, named.Reason, PathCSIClone)
	}
}

// BenchmarkPairs20x30 is the cost the issue bounds: 20 goldens on 30 CSI
// classes (plus the empty one), both sizes, from the objects.
func BenchmarkPairs20x30(b *testing.B) {
	in := Inputs{CDIs: []*cdiv1.CDI{cdi("")}, CSIDrivers: []string{linstor},
		SnapshotClasses: []SnapshotClass{{Name: "snaps", Driver: linstor}}}
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("class-%02d", i)
		in.Classes = append(in.Classes, class(name, linstor, i%3 != 0))
		in.Profiles = append(in.Profiles, profile(name, "", ""))
	}
	var goldens []Golden
	for i := 0; i < 20; i++ {
		g := golden
		g.Name, g.Class = fmt.Sprintf("talos-worker-%02d-v1.13.0", i), fmt.Sprintf("class-%02d", i)
		goldens = append(goldens, g)
	}
	b.ReportAllocs()
	for b.Loop() {
		s := NewState(in)
		if n := len(s.Pairs(goldens, Target{Class: "class-01"})); n != 20*31 {
			b.Fatalf("%d pairs", n)
		}
	}
}
