package cdirules

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The edges of each rule, one test a rule: the cases a mutation of the
// rule's comparisons would answer differently from CDI v1.65.0.

// datavolume/util.go renderPvcSpecVolumeSize refuses a request below
// units.MiB; exactly 1MiB is a valid disk.
func TestMinimumRequestIsOneMiBInclusive(t *testing.T) {
	c := cluster("")
	dv := DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Block, Bytes: mi}
	if got, err := RenderClaim(dv, Defaults{}, c.Env); err != nil || got.Bytes != mi {
		t.Errorf("a 1MiB Block request: %+v, %v; want %d bytes", got, err, mi)
	}
}

// claimSet is one of a StorageProfile's status.claimPropertySets (mode ""
// leaves volumeMode unset).
func claimSet(mode string, accessModes ...corev1.PersistentVolumeAccessMode) cdiv1.ClaimPropertySet {
	s := cdiv1.ClaimPropertySet{AccessModes: accessModes}
	if mode != "" {
		vm := corev1.PersistentVolumeMode(mode)
		s.VolumeMode = &vm
	}
	return s
}

// A spec.storage claim's volume mode from the class's StorageProfile, over
// the three branches of renderPvcSpecVolumeModeAndAccessModesAndStorageClass
// (datavolume/util.go): neither mode nor access modes
// (getDefaultVolumeAndAccessMode: claimPropertySets[0], which must have
// access modes), a mode alone (getDefaultAccessModes: a set of that mode
// with access modes must exist), access modes alone (getDefaultVolumeMode:
// the first set sharing one, else Kubernetes' default, Filesystem).
func TestVolumeModeFromTheStorageProfile(t *testing.T) {
	const rwo, rwx, rox = corev1.ReadWriteOnce, corev1.ReadWriteMany, corev1.ReadOnlyMany
	cases := []struct {
		name        string
		sets        []cdiv1.ClaimPropertySet // nil with noProfile: the class has no StorageProfile
		noProfile   bool
		mode        string
		accessModes []string
		want        string
		err         error
	}{
		{"neither, no profile", nil, true, "", nil, "", ErrNoProfileForCPS},
		{"neither, no sets", nil, false, "", nil, "", ErrNoAccessMode},
		{"neither, the first set has no access modes", []cdiv1.ClaimPropertySet{claimSet(Filesystem), claimSet(Block, rwo)},
			false, "", nil, "", ErrNoAccessMode},
		{"neither, the first set's mode", []cdiv1.ClaimPropertySet{claimSet(Block, rwx), claimSet(Filesystem, rwo)},
			false, "", nil, Block, nil},
		{"neither, the first set without a mode", []cdiv1.ClaimPropertySet{claimSet("", rwo), claimSet(Block, rwo)},
			false, "", nil, Filesystem, nil},
		{"a mode, no profile", nil, true, Block, nil, "", ErrNoProfileForCPS},
		{"a mode no set has", []cdiv1.ClaimPropertySet{claimSet("", rwo), claimSet(Filesystem, rwo)},
			false, Block, nil, "", ErrNoMatchingMode},
		{"a mode whose set has no access modes", []cdiv1.ClaimPropertySet{claimSet(Block), claimSet(Filesystem, rwo)},
			false, Block, nil, "", ErrNoMatchingMode},
		{"a mode of the second set", []cdiv1.ClaimPropertySet{claimSet(Filesystem, rwo), claimSet(Block, rwx)},
			false, Block, nil, Block, nil},
		{"access modes, no profile", nil, true, "", []string{string(rwx)}, "", ErrNoProfileForCPS},
		{"access modes of the second set", []cdiv1.ClaimPropertySet{claimSet(Filesystem, rwo), claimSet(Block, rox, rwx)},
			false, "", []string{string(rwx)}, Block, nil},
		{"access modes no set has: Kubernetes' default", []cdiv1.ClaimPropertySet{claimSet(Block, rwo)},
			false, "", []string{string(rox)}, Filesystem, nil},
		{"both given: no profile needed", nil, true, Block, []string{string(rwo)}, Block, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := Env{Classes: map[string]*storagev1.StorageClass{"c": class("c", linstor, true)}, Profiles: map[string]*cdiv1.StorageProfile{}}
			if !tc.noProfile {
				env.Profiles["c"] = &cdiv1.StorageProfile{ObjectMeta: metav1.ObjectMeta{Name: "c"},
					Status: cdiv1.StorageProfileStatus{ClaimPropertySets: tc.sets}}
			}
			dv := DataVolume{Kind: KindStorage, Class: ptr("c"), VolumeMode: tc.mode, AccessModes: tc.accessModes}
			got, err := RenderClaim(dv, Defaults{}, env)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got.VolumeMode != tc.want {
				t.Errorf("RenderClaim = %+v, %v; want volume mode %s", got, err, tc.want)
			}
		})
	}
}

// common/util.go GetFilesystemOverheadForStorageClass: "" is no overhead; a
// class that does not exist (or none) reads as the Kubernetes default's;
// then the per-class value, else the global one.
func TestOverheadForAClassFollowsCDIConfig(t *testing.T) {
	env := Env{Classes: map[string]*storagev1.StorageClass{"k8s": class("k8s", linstor, true), "plain": class("plain", linstor, true),
		"tuned": class("tuned", linstor, true)},
		Overhead: &cdiv1.FilesystemOverhead{Global: "0.1", StorageClass: map[string]cdiv1.Percent{"k8s": "0.2", "tuned": "0.3", "gone": "0.5"}}}
	d := Defaults{Kubernetes: "k8s"}
	cases := []struct {
		name     string
		class    string
		hasClass bool
		d        Defaults
		env      Env
		want     float64
	}{
		{"the empty class", "", true, d, env, 0},
		{"no CDIConfig: CDI reads 0", "tuned", true, d, Env{Classes: env.Classes}, 0},
		{"a class of its own", "tuned", true, d, env, 0.3},
		{"a class without its own", "plain", true, d, env, 0.1},
		{"a class that does not exist, though CDIConfig names it", "gone", true, d, env, 0.2},
		{"no class", "", false, d, env, 0.2},
		{"a class that does not exist, no default", "gone", true, Defaults{}, env, 0.1},
	}
	for _, tc := range cases {
		if got := OverheadFor(tc.class, tc.hasClass, tc.d, tc.env); got != tc.want {
			t.Errorf("%s: OverheadFor(%q, %v) = %v, want %v", tc.name, tc.class, tc.hasClass, got, tc.want)
		}
	}
}

// pvc-clone-controller.go detectCloneSize: a claim without a size takes the
// source's capacity, or for a Filesystem source explicitly of content
// kubevirt its image's virtual size (unknown until the size-detection pod
// ran), inflated for a Filesystem target, and is permissive when the
// source's capacity exceeds that size; a sized Block claim of such a source
// keeps its size and is permissive when it holds the image.
func TestCloneSizeFollowsDetectCloneSize(t *testing.T) {
	image := Source{VolumeMode: Filesystem, ContentType: ContentKubeVirt, CapacityBytes: 10 * gi, VirtualSize: 8 * gi}
	imageUnmeasured := image
	imageUnmeasured.VirtualSize = 0
	untyped := Source{VolumeMode: Filesystem, CapacityBytes: 10 * gi, VirtualSize: 8 * gi}
	block := Source{VolumeMode: Block, ContentType: ContentKubeVirt, CapacityBytes: 10 * gi}
	claim := func(mode string, bytes int64) Claim {
		return Claim{Class: "replicated", HasClass: true, VolumeMode: mode, Bytes: bytes}
	}
	inflated := func(b int64) int64 { return RequiredSpace(DefaultOverhead, b) }
	cases := []struct {
		name       string
		claim      Claim
		src        Source
		bytes      int64
		permissive bool
		known      bool
	}{
		{"sized Filesystem keeps its size", claim(Filesystem, 5*gi), image, 5 * gi, false, true},
		{"sized Block of a Block source", claim(Block, 5*gi), block, 5 * gi, false, true},
		{"sized Block holding the image exactly", claim(Block, 8*gi), image, 8 * gi, true, true},
		{"sized Block below the image", claim(Block, 8*gi-mi), image, 8*gi - mi, false, true},
		{"sized Block, image not measured", claim(Block, 8*gi), imageUnmeasured, 8 * gi, false, false},
		{"sized Block of an untyped source", claim(Block, 5*gi), untyped, 5 * gi, false, true},
		{"sizeless Block of the image", claim(Block, 0), image, 8 * gi, true, true},
		{"sizeless Filesystem of the image", claim(Filesystem, 0), image, inflated(8 * gi), true, true},
		{"sizeless, image not measured", claim(Block, 0), imageUnmeasured, 0, false, false},
		{"sizeless of an untyped Filesystem source: its capacity", claim(Filesystem, 0), untyped, inflated(10 * gi), false, true},
		{"sizeless Block of a Block source: its capacity", claim(Block, 0), block, 10 * gi, false, true},
	}
	c := cluster("")
	for _, tc := range cases {
		bytes, permissive, known := CloneSize(tc.claim, tc.src, Defaults{}, c.Env)
		if known != tc.known || (known && (bytes != tc.bytes || permissive != tc.permissive)) {
			t.Errorf("%s: CloneSize = %d, permissive %v, known %v; want %d, %v, %v",
				tc.name, bytes, permissive, known, tc.bytes, tc.permissive, tc.known)
		}
	}
}

// pvc-clone-controller.go validateClone: a sized spec.storage clone of a
// Block source compares the source's request with the target's raised to the
// minimum supported size of the class (common/util.go
// GetEffectiveStorageResources, the virtualization default for no class);
// a spec.pvc clone compares them as written, and both must be set; a
// Filesystem source or a sizeless clone is not compared.
func TestValidateCloneComparesTheEffectiveRequest(t *testing.T) {
	c := cluster("")
	c.Profiles["replicated"].Annotations[AnnMinimumSize] = "4Gi"
	d := Defaults{Virt: "replicated"}
	src := Source{Class: "replicated", VolumeMode: Block, RequestBytes: 4 * gi, CapacityBytes: 4 * gi, ContentType: ContentKubeVirt}
	fsSrc := src
	fsSrc.VolumeMode = Filesystem
	cases := []struct {
		name  string
		dv    DataVolume
		src   Source
		valid bool
	}{
		{"raised to the class's minimum", DataVolume{Kind: KindStorage, Class: ptr("replicated"), Bytes: 2 * gi}, src, true},
		{"the virtualization default's minimum", DataVolume{Kind: KindStorage, Bytes: 2 * gi}, src, true},
		{"a class without a minimum", DataVolume{Kind: KindStorage, Class: ptr("fixed"), Bytes: 2 * gi}, src, false},
		{"a class that does not exist", DataVolume{Kind: KindStorage, Class: ptr("gone"), Bytes: 2 * gi}, src, false},
		{"sizeless", DataVolume{Kind: KindStorage, Class: ptr("fixed")}, src, true},
		{"a Filesystem source", DataVolume{Kind: KindStorage, Class: ptr("fixed"), Bytes: 2 * gi}, fsSrc, true},
		{"spec.pvc as written", DataVolume{Kind: KindPVC, Class: ptr("replicated"), Bytes: 2 * gi}, fsSrc, false},
		{"spec.pvc equal", DataVolume{Kind: KindPVC, Class: ptr("replicated"), Bytes: 4 * gi}, fsSrc, true},
		{"spec.pvc without a request", DataVolume{Kind: KindPVC, Class: ptr("replicated")}, fsSrc, false},
	}
	for _, tc := range cases {
		if err := ValidateClone(tc.dv, tc.src, d, c.Env); (err == nil) != tc.valid {
			t.Errorf("%s: ValidateClone = %v, want valid %v", tc.name, err, tc.valid)
		}
	}
	// common/util.go ValidateRequestedCloneSize: a missing request is its
	// own error, before any comparison.
	missing := "source/target missing storage resource requests"
	if err := ValidateClone(DataVolume{Kind: KindPVC, Class: ptr("replicated")}, fsSrc, d, c.Env); err == nil || err.Error() != missing {
		t.Errorf("spec.pvc without a request: %v, want %q", err, missing)
	}
}

// clone/common.go GetCommonDriver: the source's driver is its bound PV's,
// else its class's provisioner; unknown, or another than the target class's
// provisioner, the advanced clone falls back (IncompatibleProvisioners).
func TestCommonDriverPrefersTheSourcesVolume(t *testing.T) {
	cases := []struct {
		name     string
		src      Source
		fallback string
	}{
		{"bound by the target's driver, on another driver's class", Source{Class: "ceph", Driver: linstor}, ""},
		{"unbound, its class's provisioner", Source{Class: "replicated"}, ""},
		{"unbound, its class does not exist", Source{Class: "gone"}, FallbackIncompatibleProvisioners},
		{"bound by another driver, on the target's driver's class", Source{Class: "replicated", Driver: "rbd.csi.ceph.com"},
			FallbackIncompatibleProvisioners},
	}
	for _, tc := range cases {
		src := tc.src
		src.VolumeMode, src.RequestBytes, src.CapacityBytes = Block, 10*gi, 10*gi
		got := cluster("csi-clone").Plan(src, Claim{Class: "replicated", HasClass: true, VolumeMode: Block, Bytes: 10 * gi})
		if got.Refused() || got.Fallback != tc.fallback {
			t.Errorf("%s: %+v, want fallback %q", tc.name, got, tc.fallback)
		}
	}
}

// clone/planner.go computeStrategyForSourcePVC runs validateAdvancedClonePVC
// for snapshot and csi-clone only: a copy, or a strategy it cannot plan,
// between two drivers is not a fallback.
func TestOnlyAdvancedStrategiesAreValidatedAsSuch(t *testing.T) {
	src := Source{Class: "replicated", Driver: linstor, VolumeMode: Block, RequestBytes: 10 * gi, CapacityBytes: 10 * gi}
	claim := Claim{Class: "ceph", HasClass: true, VolumeMode: Block, Bytes: 10 * gi}
	for _, strategy := range []string{StrategyCopy, "fast", StrategyCSIClone} {
		got := cluster(strategy).Plan(src, claim)
		wantFallback := ""
		if strategy == StrategyCSIClone {
			wantFallback = FallbackIncompatibleProvisioners
		}
		if got.Strategy != strategy || got.Fallback != wantFallback {
			t.Errorf("%s across drivers: %+v, want fallback %q", strategy, got, wantFallback)
		}
	}
}

// clone/planner.go validateAdvancedClonePVC: an advanced clone needs the
// source's status.capacity and the target's request, either missing is an
// error (not a fallback).
func TestAdvancedCloneNeedsBothSizes(t *testing.T) {
	src := Source{Class: "replicated", Driver: linstor, VolumeMode: Block, RequestBytes: gi, CapacityBytes: gi}
	unbound := src
	unbound.CapacityBytes = 0
	claim := Claim{Class: "replicated", HasClass: true, VolumeMode: Block, Bytes: gi}
	sizeless := claim
	sizeless.Bytes = 0
	for _, tc := range []struct {
		name  string
		src   Source
		claim Claim
		err   string
	}{
		{"both", src, claim, ""},
		{"no source capacity", unbound, claim, "source/target size info missing"},
		{"no target request (permissive)", src, sizeless, "source/target size info missing"},
	} {
		tc.claim.PerDisk.Permissive = true
		got := cluster("csi-clone").Plan(tc.src, tc.claim)
		if got.Error != tc.err || got.Fallback != "" {
			t.Errorf("%s: %+v, want error %q", tc.name, got, tc.err)
		}
	}
}

// clone/common.go getCommonSnapshotClass: the VolumeSnapshotClass both
// claims' StorageProfiles name (status.snapshotClass), else none named and
// common/util.go GetVolumeSnapshotClass takes the driver's default; a named
// class must exist and be of the driver. Then the plan
// (planner.go planSnapshotFromPVC) looks again, with the target claim alone:
// its own profile's class must exist and be of the target's provisioner.
func TestSnapshotClassNamedByBothProfiles(t *testing.T) {
	src := Source{Class: "replicated", Driver: linstor, VolumeMode: Block, RequestBytes: 10 * gi, CapacityBytes: 10 * gi}
	claim := Claim{Class: "target", HasClass: true, VolumeMode: Block, Bytes: 10 * gi}
	cases := []struct {
		name           string
		source, target string // the profiles' status.snapshotClass ("" unset); "-": no profile
		want           Outcome
	}{
		{"both name a missing class", "gone", "gone",
			Outcome{CloneType: StrategySnapshot, Error: `volumesnapshotclasses.snapshot.storage.k8s.io "gone" not found`}},
		{"both name another driver's class", "ceph-vsc", "ceph-vsc", Outcome{CloneType: StrategyCopy, Fallback: FallbackNoVolumeSnapshotClass}},
		{"they differ: the driver's default, then the target's of another driver", "gone", "ceph-vsc",
			Outcome{CloneType: StrategySnapshot, Error: ErrNoCompatibleSnapshotClass}},
		{"they differ: the driver's default, then the target's own", "ceph-vsc", "linstor-vsc", Outcome{CloneType: StrategySnapshot}},
		{"only the target names one, missing at plan time", "", "gone",
			Outcome{CloneType: StrategySnapshot, Error: `volumesnapshotclasses.snapshot.storage.k8s.io "gone" not found`}},
		{"only the source names one", "gone", "", Outcome{CloneType: StrategySnapshot}},
		{"the source's class has no profile", "-", "gone",
			Outcome{CloneType: StrategySnapshot, Error: `volumesnapshotclasses.snapshot.storage.k8s.io "gone" not found`}},
	}
	for _, tc := range cases {
		c := cluster("")
		c.Classes["target"] = class("target", linstor, true)
		c.SnapshotClasses = []SnapshotClass{{Name: "linstor-vsc", Driver: linstor, Default: true}, {Name: "ceph-vsc", Driver: "rbd.csi.ceph.com"}}
		for name, vsc := range map[string]string{"replicated": tc.source, "target": tc.target} {
			sp := profile(name, "", Block)
			if vsc != "" {
				sp.Status.SnapshotClass = ptr(vsc)
			}
			c.Profiles[name] = sp
			if vsc == "-" {
				delete(c.Profiles, name)
			}
		}
		got := c.Plan(src, claim)
		tc.want.Strategy, tc.want.StrategyFrom = StrategySnapshot, FromDefault
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// clone/planner.go validateTargetStorageClassAssignment: a claim without a
// class is not planned (nothing happens until one is set), an empty class
// and a class that does not exist are errors.
func TestPlanNeedsTheTargetsClass(t *testing.T) {
	src := Source{Class: "replicated", Driver: linstor, VolumeMode: Block, RequestBytes: gi, CapacityBytes: gi}
	for _, tc := range []struct {
		claim Claim
		want  Outcome
	}{
		{Claim{VolumeMode: Block, Bytes: gi}, Outcome{Waits: "a StorageClass for the claim"}},
		{Claim{HasClass: true, VolumeMode: Block, Bytes: gi}, Outcome{Error: "claim has emptystring storageclass, will not work"}},
		{Claim{Class: "gone", HasClass: true, VolumeMode: Block, Bytes: gi}, Outcome{Error: "target storage class not found"}},
	} {
		if got := cluster("csi-clone").Plan(src, tc.claim); got != tc.want {
			t.Errorf("Plan(%+v) = %+v, want %+v", tc.claim, got, tc.want)
		}
	}
}

// common/util.go GetActiveCDI: a lone CDI resource is the active one
// whatever its phase; among several, the only one not in phase Error.
func TestActiveCDIOverItsCases(t *testing.T) {
	cr := func(name, phase string) *cdiv1.CDI {
		c := &cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: name}}
		c.Status.Phase = "Deployed"
		if phase != "" {
			c.Status.Phase = "Error"
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		cdis    []*cdiv1.CDI
		active  string
		problem string
	}{
		{"none", nil, "", "no CDI resource exists"},
		{"a lone one in phase Error", []*cdiv1.CDI{cr("a", "Error")}, "a", ""},
		{"a lone one", []*cdiv1.CDI{cr("a", "")}, "a", ""},
		{"two, one in phase Error", []*cdiv1.CDI{cr("a", "Error"), cr("b", "")}, "b", ""},
		{"two in phase Error", []*cdiv1.CDI{cr("a", "Error"), cr("b", "Error")}, "", "every CDI resource is in phase Error"},
		{"two active", []*cdiv1.CDI{cr("a", ""), cr("b", "")}, "", "several CDI resources are active"},
	} {
		active, problem := ActiveCDI(tc.cdis)
		name := ""
		if active != nil {
			name = active.Name
		}
		if name != tc.active || problem != tc.problem {
			t.Errorf("%s: active %q (%q), want %q (%q)", tc.name, name, problem, tc.active, tc.problem)
		}
	}
}

// What an outcome means: any of validation, error or wait refuses the
// clone; storage-layer is a csi-clone or snapshot that is not refused.
func TestOutcomeRefusedAndStorageLayer(t *testing.T) {
	for _, tc := range []struct {
		o                     Outcome
		refused, storageLayer bool
	}{
		{Outcome{CloneType: StrategyCSIClone}, false, true},
		{Outcome{CloneType: StrategySnapshot}, false, true},
		{Outcome{CloneType: StrategyCopy}, false, false},
		{Outcome{CloneType: StrategyCopy, Fallback: FallbackNoVolumeExpansion}, false, false},
		{Outcome{CloneType: StrategyCSIClone, Validation: "v"}, true, false},
		{Outcome{CloneType: StrategySnapshot, Error: "e"}, true, false},
		{Outcome{CloneType: StrategyCSIClone, Waits: "w"}, true, false},
		{Outcome{CloneType: "fast", Error: "unknown strategy/source fast"}, true, false},
	} {
		if r, s := tc.o.Refused(), tc.o.StorageLayer(); r != tc.refused || s != tc.storageLayer {
			t.Errorf("%+v: refused %v, storage layer %v; want %v, %v", tc.o, r, s, tc.refused, tc.storageLayer)
		}
	}
}

// LargestImage is the inverse of RequiredSpace in whole MiB: the image it
// returns fits the capacity with the overhead, one MiB more does not.
func TestLargestImageInvertsRequiredSpace(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	overheads := []float64{0, 0.055, DefaultOverhead, 0.1, 0.5}
	capacities := []int64{0, mi - 1, mi, mi + 1, 2 * mi, 10 * gi, 11381663335}
	for i := 0; i < 200; i++ {
		capacities = append(capacities, rng.Int63n(64*gi))
	}
	for _, o := range overheads {
		for _, capacity := range capacities {
			got := LargestImage(capacity, o)
			what := fmt.Sprintf("LargestImage(%d, %v) = %d", capacity, o, got)
			if got%mi != 0 || got < 0 {
				t.Fatalf("%s: not whole MiB", what)
			}
			if got > 0 && RequiredSpace(o, got) > capacity {
				t.Fatalf("%s: needs %d", what, RequiredSpace(o, got))
			}
			if RequiredSpace(o, got+mi) <= capacity {
				t.Fatalf("%s: %d fits too", what, got+mi)
			}
		}
	}
	if got := LargestImage(RequiredSpace(DefaultOverhead, 10*gi), DefaultOverhead); got != 10*gi {
		t.Errorf("the image of a claim sized for 10Gi: %d", got)
	}
}

// clone/planner.go validateAdvancedClonePVC compares the volume modes
// resolved (util.ResolveVolumeMode): a source whose mode is not known yet
// ("", a spec.storage golden before its claim exists) is Filesystem. Over
// every source mode and both target modes.
func TestSourceVolumeModeIsResolvedBeforeItIsCompared(t *testing.T) {
	for _, tc := range []struct {
		source, target string
		fallback       string
	}{
		{"", Filesystem, ""},
		{"", Block, FallbackIncompatibleVolumeModes},
		{Filesystem, Filesystem, ""},
		{Filesystem, Block, FallbackIncompatibleVolumeModes},
		{Block, Block, ""},
		{Block, Filesystem, FallbackIncompatibleVolumeModes},
	} {
		src := Source{Class: "replicated", Driver: linstor, VolumeMode: tc.source, RequestBytes: gi, CapacityBytes: gi}
		got := cluster("csi-clone").Plan(src, Claim{Class: "replicated", HasClass: true, VolumeMode: tc.target, Bytes: gi})
		if got.Refused() || got.Fallback != tc.fallback {
			t.Errorf("source mode %q, target %q: %+v, want fallback %q", tc.source, tc.target, got, tc.fallback)
		}
	}
}
