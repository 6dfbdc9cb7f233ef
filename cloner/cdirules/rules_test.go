package cdirules

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Sizes in bytes, and the driver most classes belong to.
const gi, mi, linstor = int64(1) << 30, int64(1) << 20, "linstor.csi.linbit.com"

func class(name, provisioner string, expand bool, ann ...string) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
		Provisioner: provisioner, AllowVolumeExpansion: &expand}
	for i := 0; i+1 < len(ann); i += 2 {
		sc.Annotations[ann[i]] = ann[i+1]
	}
	return sc
}

// profile is a StorageProfile as CDI reconciles it: a status strategy
// ("" none) and claimPropertySets of the given modes (RWO each).
func profile(name, strategy string, modes ...string) *cdiv1.StorageProfile {
	sp := &cdiv1.StorageProfile{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if strategy != "" {
		s := cdiv1.CDICloneStrategy(strategy)
		sp.Status.CloneStrategy = &s
	}
	for _, m := range modes {
		vm := corev1.PersistentVolumeMode(m)
		sp.Status.ClaimPropertySets = append(sp.Status.ClaimPropertySets,
			cdiv1.ClaimPropertySet{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &vm})
	}
	return sp
}

func cluster(override string) Cluster {
	classes := []*storagev1.StorageClass{
		class("replicated", linstor, true), class("fixed", linstor, false), class("ceph", "rbd.csi.ceph.com", true),
		class("fs-first", linstor, true),
	}
	// CDIConfig status as CDI's config controller writes it by default.
	c := Cluster{Env: Env{Classes: map[string]*storagev1.StorageClass{}, Profiles: map[string]*cdiv1.StorageProfile{},
		Overhead: &cdiv1.FilesystemOverhead{Global: "0.06"}},
		CSIDrivers: map[string]bool{linstor: true, "rbd.csi.ceph.com": true}}
	for _, sc := range classes {
		c.Classes[sc.Name] = sc
		c.Profiles[sc.Name] = profile(sc.Name, "", Block, Filesystem)
	}
	c.Profiles["fs-first"] = profile("fs-first", "", Filesystem, Block)
	cr := &cdiv1.CDI{}
	if override != "" {
		s := cdiv1.CDICloneStrategy(override)
		cr.Spec.CloneStrategyOverride = &s
	}
	c.CDIs = []*cdiv1.CDI{cr}
	return c
}

func ptr(s string) *string { return &s }

func TestRequiredSpaceFollowsGetRequiredSpace(t *testing.T) {
	cases := []struct {
		overhead float64
		in, want int64
	}{
		{0.06, 10 * gi, 11381663335},   // ceil(10Gi * 1.06)
		{0.06, 10*gi + 1, 11382774825}, // aligned up to the next MiB first: ceil((10Gi+1Mi) * 1.06)
		{0, 3 * gi, 3 * gi},
		{0.1, mi, 1153434},
	}
	for _, tc := range cases {
		if got := RequiredSpace(tc.overhead, tc.in); got != tc.want {
			t.Errorf("RequiredSpace(%v, %d) = %d, want %d", tc.overhead, tc.in, got, tc.want)
		}
	}
}

func TestFallbackClassBySpecKindAndContentType(t *testing.T) {
	d := Defaults{Virt: "virt", Kubernetes: "k8s"}
	cases := []struct {
		kind              SpecKind
		contentType, want string
		defaults          Defaults
	}{
		{KindStorage, "", "virt", d},
		{KindStorage, "kubevirt", "virt", d},
		{KindStorage, "something", "virt", d}, // any other value reads as kubevirt
		{KindStorage, "archive", "k8s", d},
		{KindPVC, "", "k8s", d},
		{KindPVC, "archive", "k8s", d},
		{KindStorage, "", "k8s", Defaults{Kubernetes: "k8s"}},
		{KindStorage, "", "", Defaults{}},
	}
	for _, tc := range cases {
		if got := FallbackClass(tc.kind, tc.contentType, tc.defaults); got != tc.want {
			t.Errorf("FallbackClass(%s, %q, %+v) = %q, want %q", tc.kind, tc.contentType, tc.defaults, got, tc.want)
		}
	}
}

func TestDefaultClassesNewestThenByName(t *testing.T) {
	old := class("b-old", linstor, true, AnnDefaultClass, "true")
	old.CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
	newA := class("z-new", linstor, true, AnnDefaultClass, "true", AnnDefaultVirtClass, "true")
	newA.CreationTimestamp = metav1.NewTime(time.Unix(200, 0))
	newB := class("a-new", linstor, true, AnnDefaultClass, "true")
	newB.CreationTimestamp = metav1.NewTime(time.Unix(200, 0))
	got := DefaultClasses([]*storagev1.StorageClass{old, newA, newB})
	if got != (Defaults{Virt: "z-new", Kubernetes: "a-new"}) {
		t.Fatalf("DefaultClasses = %+v", got)
	}
}

func TestRenderClaim(t *testing.T) {
	c := cluster("")
	d := Defaults{Virt: "replicated", Kubernetes: "fs-first"}
	rwo := []string{"ReadWriteOnce"}
	cases := []struct {
		name string
		dv   DataVolume
		want Claim
		err  error
	}{
		{"spec.pvc is copied", DataVolume{Kind: KindPVC, Class: ptr("fixed"), Bytes: 10 * gi},
			Claim{Class: "fixed", HasClass: true, VolumeMode: Filesystem, Bytes: 10 * gi}, nil},
		{"spec.pvc empty class takes the Kubernetes default", DataVolume{Kind: KindPVC, Bytes: gi},
			Claim{Class: "fs-first", HasClass: true, VolumeMode: Filesystem, Bytes: gi}, nil},
		{"spec.storage Filesystem is inflated", DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Filesystem, Bytes: 10 * gi},
			Claim{Class: "replicated", HasClass: true, VolumeMode: Filesystem, Bytes: 11381663335, AccessModes: rwo}, nil},
		{"spec.storage Block is not", DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Block, Bytes: 10 * gi},
			Claim{Class: "replicated", HasClass: true, VolumeMode: Block, Bytes: 10 * gi, AccessModes: rwo}, nil},
		{"volume mode from claimPropertySets[0]", DataVolume{Kind: KindStorage, Class: ptr("fs-first"), Bytes: gi},
			Claim{Class: "fs-first", HasClass: true, VolumeMode: Filesystem, Bytes: RequiredSpace(DefaultOverhead, gi), AccessModes: rwo}, nil},
		{"empty class: the virtualization default and its profile", DataVolume{Kind: KindStorage, Bytes: gi},
			Claim{Class: "replicated", HasClass: true, VolumeMode: Block, Bytes: gi, AccessModes: rwo}, nil},
		{"archive: the Kubernetes default, Filesystem", DataVolume{Kind: KindStorage, ContentType: ContentArchive, Bytes: gi},
			Claim{Class: "fs-first", HasClass: true, VolumeMode: Filesystem, Bytes: RequiredSpace(DefaultOverhead, gi), AccessModes: rwo}, nil},
		{"archive Block", DataVolume{Kind: KindStorage, ContentType: ContentArchive, VolumeMode: Block, Bytes: gi},
			Claim{}, ErrArchiveBlock},
		{"sizeless storage stays sizeless", DataVolume{Kind: KindStorage, Class: ptr("replicated")},
			Claim{Class: "replicated", HasClass: true, VolumeMode: Block, AccessModes: rwo}, nil},
		{"missing class, no access modes", DataVolume{Kind: KindStorage, Class: ptr("nope"), Bytes: gi}, Claim{}, ErrNoClass},
		{"below 1MiB", DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Block, Bytes: mi - 1}, Claim{}, ErrTooSmall},
	}
	for _, tc := range cases {
		got, err := RenderClaim(tc.dv, d, c.Env)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: RenderClaim = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// A spec.storage claim's access modes are the DataVolume's, else its
// class's StorageProfile's as datavolume/util.go
// renderPvcSpecVolumeModeAndAccessModesAndStorageClass picks them: the
// first set when the DataVolume names no volume mode either, the first set
// of its volume mode that has access modes, and with access modes named,
// the mode of the first set sharing one of them.
func TestRenderClaimAccessModesFromTheProfile(t *testing.T) {
	c := cluster("")
	block, fs := corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem
	c.Profiles["replicated"].Status.ClaimPropertySets = []cdiv1.ClaimPropertySet{
		{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, VolumeMode: &block},
		{VolumeMode: &fs}, // no access modes: skipped for Filesystem
		{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany}, VolumeMode: &fs},
	}
	c.Profiles["fixed"].Status.ClaimPropertySets = []cdiv1.ClaimPropertySet{{VolumeMode: &block}}
	cases := []struct {
		name  string
		dv    DataVolume
		mode  string
		modes []string
		err   error
	}{
		{"neither: the first set's", DataVolume{Kind: KindStorage, Class: ptr("replicated")}, Block, []string{"ReadWriteMany"}, nil},
		{"Filesystem: the first Filesystem set with access modes", DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Filesystem},
			Filesystem, []string{"ReadWriteOnce", "ReadOnlyMany"}, nil},
		{"Block: the Block set's", DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Block}, Block, []string{"ReadWriteMany"}, nil},
		{"access modes named: kept, mode from the set sharing one", DataVolume{Kind: KindStorage, Class: ptr("replicated"), AccessModes: []string{"ReadOnlyMany"}},
			Filesystem, []string{"ReadOnlyMany"}, nil},
		{"access modes no set has: kept, Kubernetes' default mode", DataVolume{Kind: KindStorage, Class: ptr("replicated"), AccessModes: []string{"ReadWriteOncePod"}},
			Filesystem, []string{"ReadWriteOncePod"}, nil},
		{"both named: as named", DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Block, AccessModes: []string{"ReadWriteOnce"}},
			Block, []string{"ReadWriteOnce"}, nil},
		{"first set without access modes", DataVolume{Kind: KindStorage, Class: ptr("fixed")}, "", nil, ErrNoAccessMode},
		{"no set of the mode", DataVolume{Kind: KindStorage, Class: ptr("fixed"), VolumeMode: Filesystem}, "", nil, ErrNoMatchingMode},
		{"spec.pvc: copied, none", DataVolume{Kind: KindPVC, Class: ptr("replicated"), Bytes: gi}, Filesystem, nil, nil},
		{"spec.pvc: copied", DataVolume{Kind: KindPVC, Class: ptr("replicated"), AccessModes: []string{"ReadWriteMany"}, Bytes: gi},
			Filesystem, []string{"ReadWriteMany"}, nil},
	}
	for _, tc := range cases {
		got, err := RenderClaim(tc.dv, c.Defaults, c.Env)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got.VolumeMode != tc.mode || !slices.Equal(got.AccessModes, tc.modes) {
			t.Errorf("%s: %s %v (%v), want %s %v", tc.name, got.VolumeMode, got.AccessModes, err, tc.mode, tc.modes)
		}
	}
}

func TestRenderClaimOverheadAndMinimumPerClass(t *testing.T) {
	c := cluster("")
	c.Overhead = &cdiv1.FilesystemOverhead{Global: "0.1", StorageClass: map[string]cdiv1.Percent{"fixed": "0"}}
	c.Profiles["replicated"].Annotations[AnnMinimumSize] = "4Gi"
	for _, tc := range []struct {
		class string
		want  int64
	}{{"replicated", 4 * gi}, {"fixed", gi}, {"fs-first", RequiredSpace(0.1, gi)}} {
		got, err := RenderClaim(DataVolume{Kind: KindStorage, Class: ptr(tc.class), VolumeMode: Filesystem, Bytes: gi}, Defaults{}, c.Env)
		if err != nil || got.Bytes != tc.want {
			t.Errorf("class %s: %d, %v; want %d", tc.class, got.Bytes, err, tc.want)
		}
	}
}

func TestProfileStrategyOverEveryOrigin(t *testing.T) {
	plain := class("c", linstor, true)
	annotated := func(v string) *storagev1.StorageClass { return class("c", linstor, true, AnnCloneStrategy, v) }
	cases := []struct {
		name     string
		sc       *storagev1.StorageClass
		spec     *string
		advised  string
		vsc      bool
		want     string
		wantFrom string
	}{
		{"spec wins", annotated("copy"), ptr("csi-clone"), "", false, StrategyCSIClone, OriginProfileSpec},
		{"spec unknown is kept", plain, ptr("fast"), "", true, "fast", OriginProfileSpec},
		{"annotation copy", annotated("copy"), nil, "", true, StrategyCopy, OriginClassAnnotation},
		{"annotation snapshot", annotated("snapshot"), nil, "", false, StrategySnapshot, OriginClassAnnotation},
		{"annotation csi-clone", annotated("csi-clone"), nil, "", false, StrategyCSIClone, OriginClassAnnotation},
		{"annotation unknown becomes empty", annotated("fast"), nil, "", true, "", OriginClassAnnotation},
		{"not in the table, a VolumeSnapshotClass", plain, nil, "", true, StrategySnapshot, OriginDerived},
		{"not in the table, none: copy", plain, nil, "", false, StrategyCopy, OriginDerived},
		{"table says csi-clone", plain, nil, StrategyCSIClone, false, StrategyCSIClone, OriginDerived},
		{"table says snapshot, none", plain, nil, StrategySnapshot, false, StrategyCopy, OriginDerived},
	}
	for _, tc := range cases {
		if got := ProfileStrategy(tc.sc, tc.spec, tc.advised, tc.vsc); got != tc.want {
			t.Errorf("%s: ProfileStrategy = %q, want %q", tc.name, got, tc.want)
		}
		sp := &cdiv1.StorageProfile{}
		if tc.spec != nil {
			s := cdiv1.CDICloneStrategy(*tc.spec)
			sp.Spec.CloneStrategy = &s
		}
		if got := ProfileStrategyOrigin(tc.sc, sp); got != tc.wantFrom {
			t.Errorf("%s: origin %q, want %q", tc.name, got, tc.wantFrom)
		}
	}
}

func TestKnownStrategyOverTheClosedSet(t *testing.T) {
	for _, s := range Strategies {
		if !KnownStrategy(s) {
			t.Errorf("%s not known", s)
		}
	}
	for _, s := range []string{"", "fast", "Copy", "csi_clone", "host-assisted"} {
		if KnownStrategy(s) {
			t.Errorf("%q known", s)
		}
	}
}

func TestSnapshotClassFor(t *testing.T) {
	vscs := []SnapshotClass{{Name: "z", Driver: linstor}, {Name: "b", Driver: linstor}, {Name: "a", Driver: "other"}}
	if n, ok, _ := SnapshotClassFor(vscs, linstor, ""); !ok || n != "b" {
		t.Errorf("first by name: %q %v", n, ok)
	}
	vscs[0].Default = true
	if n, ok, _ := SnapshotClassFor(vscs, linstor, ""); !ok || n != "z" {
		t.Errorf("default: %q %v", n, ok)
	}
	if _, ok, missing := SnapshotClassFor(vscs, linstor, "a"); ok || missing {
		t.Errorf("named of another driver: found %v missing %v", ok, missing)
	}
	if _, _, missing := SnapshotClassFor(vscs, linstor, "gone"); !missing {
		t.Error("named and absent is not missing")
	}
	if _, ok, _ := SnapshotClassFor(vscs, "nobody", ""); ok {
		t.Error("found a class of a driver that has none")
	}
}

var blockGolden = Source{Class: "replicated", Driver: linstor, VolumeMode: Block, RequestBytes: 10 * gi, CapacityBytes: 10 * gi,
	ContentType: ContentKubeVirt}

// TestCloneOutcomes holds the answers issue 25 lists as wrong, and every
// fallback and refusal, against the rules.
func TestCloneOutcomes(t *testing.T) {
	fsStorageGolden := Source{Class: "replicated", Driver: linstor, VolumeMode: Filesystem, RequestBytes: 11381663335,
		CapacityBytes: 11381663335, ContentType: ContentKubeVirt}
	fsPVCGolden := Source{Class: "replicated", Driver: linstor, VolumeMode: Filesystem, RequestBytes: 10 * gi, CapacityBytes: 10 * gi,
		ContentType: ContentKubeVirt}
	storage := func(class, mode string, bytes int64) DataVolume {
		return DataVolume{Kind: KindStorage, Class: ptr(class), VolumeMode: mode, Bytes: bytes}
	}
	cases := []struct {
		name     string
		override string
		mutate   func(*Cluster)
		src      Source
		dv       DataVolume
		want     Outcome
	}{
		{"sizeless on a class without expansion: csi-clone", "csi-clone", nil, blockGolden, storage("fixed", Block, 0),
			Outcome{CloneType: StrategyCSIClone, StrategyFrom: FromOverride}},
		{"larger on a class without expansion", "csi-clone", nil, blockGolden, storage("fixed", Block, 11*gi),
			Outcome{CloneType: StrategyCopy, StrategyFrom: FromOverride, Fallback: FallbackNoVolumeExpansion}},
		{"storage Filesystem 10Gi golden, pvc 10Gi worker: validation", "csi-clone", nil, fsStorageGolden,
			DataVolume{Kind: KindPVC, Class: ptr("replicated"), VolumeMode: Filesystem, Bytes: 10 * gi},
			Outcome{Validation: "target resources requests storage size is smaller than the source 10737418240 < 11381663335"}},
		{"pvc 10Gi golden, storage Filesystem 9.5Gi worker: clones and expands", "csi-clone", nil, fsPVCGolden,
			storage("replicated", Filesystem, 19*gi/2), Outcome{CloneType: StrategyCSIClone, StrategyFrom: FromOverride}},
		{"same, on a class without expansion", "csi-clone", nil, fsPVCGolden,
			storage("fixed", Filesystem, 19*gi/2), Outcome{CloneType: StrategyCopy, StrategyFrom: FromOverride, Fallback: FallbackNoVolumeExpansion}},
		{"Block golden, profile says Filesystem", "csi-clone", nil, blockGolden, storage("fs-first", "", 10*gi),
			Outcome{CloneType: StrategyCopy, StrategyFrom: FromOverride, Fallback: FallbackIncompatibleVolumeModes}},
		{"smaller Block storage", "csi-clone", nil, blockGolden, storage("replicated", Block, 9*gi),
			Outcome{Validation: "target resources requests storage size is smaller than the source 9663676416 < 10737418240"}},
		{"other driver", "csi-clone", nil, blockGolden, storage("ceph", Block, 10*gi),
			Outcome{CloneType: StrategyCopy, StrategyFrom: FromOverride, Fallback: FallbackIncompatibleProvisioners}},
		{"unknown strategy in the profile", "", func(c *Cluster) { c.Profiles["replicated"] = profile("replicated", "fast", Block) },
			blockGolden, storage("replicated", Block, 10*gi),
			Outcome{CloneType: "fast", StrategyFrom: FromProfile, Error: "unknown strategy/source fast"}},
		{"empty strategy from an unknown class annotation", "", func(c *Cluster) {
			c.Profiles["replicated"] = profile("replicated", "", Block)
			s := cdiv1.CDICloneStrategy("")
			c.Profiles["replicated"].Status.CloneStrategy = &s
		},
			blockGolden, storage("replicated", Block, 10*gi),
			Outcome{StrategyFrom: FromProfile, Error: "unknown strategy/source "}},
		{"derived copy", "", func(c *Cluster) { c.Profiles["replicated"] = profile("replicated", "copy", Block) },
			blockGolden, storage("replicated", Block, 10*gi), Outcome{CloneType: StrategyCopy, StrategyFrom: FromProfile}},
		{"no profile strategy: snapshot, no VolumeSnapshotClass", "", nil, blockGolden, storage("replicated", Block, 10*gi),
			Outcome{CloneType: StrategyCopy, StrategyFrom: FromDefault, Fallback: FallbackNoVolumeSnapshotClass}},
		{"snapshot with a VolumeSnapshotClass", "", func(c *Cluster) { c.SnapshotClasses = []SnapshotClass{{Name: "v", Driver: linstor}} },
			blockGolden, storage("replicated", Block, 10*gi), Outcome{CloneType: StrategySnapshot, StrategyFrom: FromDefault}},
		{"no CSIDriver: legacy host-assisted", "csi-clone", func(c *Cluster) { delete(c.CSIDrivers, linstor) },
			blockGolden, storage("replicated", Block, 10*gi), Outcome{CloneType: StrategyCopy, Fallback: FallbackNoPopulator}},
		// storageClassCSIDriverExists finds no class: the legacy path, whose
		// claim then never binds.
		{"missing class", "csi-clone", nil, blockGolden, DataVolume{Kind: KindPVC, Class: ptr("gone"), VolumeMode: Block, Bytes: 10 * gi},
			Outcome{CloneType: StrategyCopy, Fallback: FallbackNoPopulator}},
		{"archive clone of a kubevirt golden", "csi-clone", nil, blockGolden,
			DataVolume{Kind: KindStorage, Class: ptr("replicated"), ContentType: ContentArchive, Bytes: 10 * gi},
			Outcome{Validation: "Source contentType (kubevirt) and target contentType (archive) do not match"}},
		{"render before validation: archive Block", "csi-clone", nil, blockGolden,
			DataVolume{Kind: KindStorage, Class: ptr("replicated"), ContentType: ContentArchive, VolumeMode: Block, Bytes: gi},
			Outcome{Error: ErrArchiveBlock.Error(), Render: true}},
		{"no active CDI", "", func(c *Cluster) { c.CDIs = nil }, blockGolden, storage("replicated", Block, 10*gi),
			Outcome{Error: "no CDI resource exists"}},
	}
	for _, tc := range cases {
		c := cluster(tc.override)
		if tc.mutate != nil {
			tc.mutate(&c)
		}
		got := c.Clone(tc.dv, tc.src)
		if got.Fallback != "" && got.Fallback != FallbackNoPopulator && got.Strategy == StrategyCopy {
			t.Errorf("%s: the strategy before the fallback is lost: %+v", tc.name, got)
		}
		got.Strategy = "" // checked above: the strategy before any fallback
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestDataSourcePVCFollowsTheReference(t *testing.T) {
	direct := &cdiv1.DataSource{Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{
		PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "cozy-public", Name: "g"}}}}
	if got := DataSourcePVC(direct); got == nil || got.Name != "g" {
		t.Errorf("direct: %+v", got)
	}
	chained := &cdiv1.DataSource{
		Spec:   cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{DataSource: &cdiv1.DataSourceRefSourceDataSource{Name: "other"}}},
		Status: cdiv1.DataSourceStatus{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "resolved"}}}}
	if got := DataSourcePVC(chained); got == nil || got.Name != "resolved" {
		t.Errorf("chained: %+v", got)
	}
	if got := DataSourcePVC(&cdiv1.DataSource{}); got != nil {
		t.Errorf("empty: %+v", got)
	}
}
