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

// TestTargetVolumeModeFromTheStorageProfile: a disk that names no volume
// mode gets the StorageProfile's, else Filesystem (uncertain).
func TestTargetVolumeModeFromTheStorageProfile(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	sp := profile("replicated", "", "")
	sp.Status.ClaimPropertySets = []cdiv1.ClaimPropertySet{{VolumeMode: &block}}
	if p := NewState(withProfile(baseInputs("csi-clone"), sp)).Predict(golden, Target{Class: "replicated"}); p.Path != PathCSIClone || len(p.Uncertain) > 0 {
		t.Errorf("with the profile's Block: %+v", p)
	}
	p := NewState(baseInputs("csi-clone")).Predict(golden, Target{Class: "replicated"})
	if p.Reason != ReasonIncompatibleVolumeModes || len(p.Uncertain) == 0 {
		t.Errorf("without any volume mode: %+v, want an uncertain IncompatibleVolumeModes", p)
	}
}

func TestSeveralCDIResources(t *testing.T) {
	in := baseInputs("csi-clone")
	broken := cdi("copy")
	broken.Status.Phase = "Error"
	in.CDIs = append(in.CDIs, broken)
	if p := NewState(in).Predict(golden, Target{Class: "replicated", VolumeMode: "Block"}); p.Reason != ReasonCDIOverride {
		t.Errorf("the one CDI not in Error is the active one: %+v", p)
	}
	in.CDIs = append(in.CDIs, cdi(""))
	if p := NewState(in).Predict(golden, Target{Class: "replicated", VolumeMode: "Block"}); p.Reason != ReasonNoActiveCDI {
		t.Errorf("two active CDIs: %+v", p)
	}
}

func TestPairsCoverEveryCSIClassAndTheEmptyOne(t *testing.T) {
	s := NewState(baseInputs("csi-clone"))
	pairs := s.Pairs([]Golden{golden}, Target{Class: "replicated"})
	var got []string
	for _, p := range pairs {
		got = append(got, p.Class+"="+p.Larger.Path+"/"+p.AtSize.Path)
	}
	want := "ceph=host-assisted/host-assisted local=blocked/blocked replicated=csi-clone/csi-clone replicated-b=csi-clone/csi-clone " +
		"replicated-fixed=host-assisted/csi-clone (default)=csi-clone/csi-clone"
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
