package cdirules

import (
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The per-disk annotations over the values CDI tells apart: a cloneType is
// obeyed as is (no validation, no fallback; snapshot still needs a
// VolumeSnapshotClass for the target claim alone), usePopulator parses as
// strconv.ParseBool does, permissiveClone skips the planner's size check
// only.
func TestPerDiskAnnotations(t *testing.T) {
	// CDI derives copy for the class (profile), and the disk is smaller
	// than the golden: without annotations, the planner refuses it.
	small := DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Block, Bytes: 9 * gi}
	sized := DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Block, Bytes: 10 * gi}
	other := DataVolume{Kind: KindStorage, Class: ptr("ceph"), VolumeMode: Block, Bytes: 10 * gi}
	pvcSmall := DataVolume{Kind: KindPVC, Class: ptr("replicated"), VolumeMode: Block, Bytes: 9 * gi}
	fsGolden := Source{Class: "replicated", Driver: linstor, VolumeMode: Filesystem, RequestBytes: 10 * gi, CapacityBytes: 10 * gi}
	fsSmall := DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Filesystem, Bytes: 9 * gi}
	with := func(dv DataVolume, ann map[string]string) DataVolume { dv.PerDisk = PerDiskOf(ann); return dv }
	ct := func(v string) map[string]string { return map[string]string{AnnCloneType: v} }
	up := func(v string) map[string]string { return map[string]string{AnnUsePopulator: v} }
	obeyed := func(s string) Outcome { return Outcome{CloneType: s, Strategy: s, StrategyFrom: FromAnnotation} }
	parseErr := func(v string) string {
		return AnnUsePopulator + ` "` + v + `": strconv.ParseBool: parsing "` + v + `": invalid syntax`
	}
	cases := []struct {
		name     string
		override string
		snaps    bool
		src      Source
		dv       DataVolume
		want     Outcome
	}{
		{"cloneType csi-clone against a copy override", "copy", false, blockGolden, with(sized, ct("csi-clone")), obeyed(StrategyCSIClone)},
		{"cloneType csi-clone skips the planner's size check", "copy", false, fsGolden, with(fsSmall, ct("csi-clone")), obeyed(StrategyCSIClone)},
		{"cloneType does not skip the DataVolume's validation", "copy", false, blockGolden, with(pvcSmall, ct("csi-clone")),
			Outcome{Validation: "target resources requests storage size is smaller than the source 9663676416 < 10737418240"}},
		{"cloneType csi-clone onto another driver: no fallback, the provisioner refuses", "", false, blockGolden, with(other, ct("csi-clone")),
			Outcome{CloneType: StrategyCSIClone, Strategy: StrategyCSIClone, StrategyFrom: FromAnnotation, Stuck: StuckDriver}},
		{"cloneType csi-clone onto another volume mode: the provisioner refuses", "", false, fsGolden, with(sized, ct("csi-clone")),
			Outcome{CloneType: StrategyCSIClone, Strategy: StrategyCSIClone, StrategyFrom: FromAnnotation, Stuck: StuckVolumeMode}},
		{"cloneType snapshot onto another volume mode: the restore is refused", "", true, fsGolden, with(sized, ct("snapshot")),
			Outcome{CloneType: StrategySnapshot, Strategy: StrategySnapshot, StrategyFrom: FromAnnotation, Stuck: StuckVolumeMode}},
		{"cloneType copy against a csi-clone override", "csi-clone", false, blockGolden, with(sized, ct("copy")), obeyed(StrategyCopy)},
		{"cloneType snapshot without a VolumeSnapshotClass", "csi-clone", false, blockGolden, with(sized, ct("snapshot")),
			Outcome{CloneType: StrategySnapshot, Strategy: StrategySnapshot, StrategyFrom: FromAnnotation, Error: ErrNoCompatibleSnapshotClass}},
		{"cloneType snapshot with one", "csi-clone", true, blockGolden, with(sized, ct("snapshot")), obeyed(StrategySnapshot)},
		{"cloneType garbage", "csi-clone", false, blockGolden, with(sized, ct("fast")),
			Outcome{CloneType: "fast", Strategy: "fast", StrategyFrom: FromAnnotation, Error: "unknown strategy/source fast"}},
		{"cloneType empty", "csi-clone", false, blockGolden, with(sized, ct("")),
			Outcome{StrategyFrom: FromAnnotation, Error: "unknown strategy/source "}},
		{"usePopulator false: legacy copy", "csi-clone", false, blockGolden, with(sized, up("false")),
			Outcome{CloneType: StrategyCopy, Fallback: FallbackNoPopulator}},
		{"usePopulator 0 parses as false", "csi-clone", false, blockGolden, with(sized, up("0")),
			Outcome{CloneType: StrategyCopy, Fallback: FallbackNoPopulator}},
		{"usePopulator false wins over cloneType", "csi-clone", false, blockGolden,
			with(sized, map[string]string{AnnUsePopulator: "false", AnnCloneType: "csi-clone"}), Outcome{CloneType: StrategyCopy, Fallback: FallbackNoPopulator}},
		{"usePopulator false after validation", "csi-clone", false, blockGolden, with(pvcSmall, up("false")),
			Outcome{Validation: "target resources requests storage size is smaller than the source 9663676416 < 10737418240"}},
		{"usePopulator garbage before validation", "csi-clone", false, blockGolden, with(pvcSmall, up("yes")), Outcome{Error: parseErr("yes")}},
		{"usePopulator empty", "csi-clone", false, blockGolden, with(sized, up("")), Outcome{Error: parseErr("")}},
		{"usePopulator True", "csi-clone", false, blockGolden, with(sized, up("True")), Outcome{CloneType: StrategyCSIClone, Strategy: StrategyCSIClone, StrategyFrom: FromOverride}},
		{"permissiveClone skips the planner's size check", "csi-clone", false, fsGolden, with(fsSmall, map[string]string{AnnPermissiveClone: "false"}),
			Outcome{CloneType: StrategyCSIClone, Strategy: StrategyCSIClone, StrategyFrom: FromOverride}},
		{"without it, refused", "csi-clone", false, fsGolden, fsSmall,
			Outcome{Validation: "target resources requests storage size is smaller than the source 10243497001 < 10737418240"}},
		{"permissiveClone does not skip the DataVolume's validation", "csi-clone", false, blockGolden,
			with(pvcSmall, map[string]string{AnnPermissiveClone: "true"}),
			Outcome{Validation: "target resources requests storage size is smaller than the source 9663676416 < 10737418240"}},
		{"no annotation, small: refused", "copy", false, blockGolden, small,
			Outcome{Validation: "target resources requests storage size is smaller than the source 9663676416 < 10737418240"}},
	}
	for _, tc := range cases {
		c := cluster(tc.override)
		if tc.snaps {
			c.SnapshotClasses = []SnapshotClass{{Name: "v", Driver: linstor}}
		}
		if got := c.Clone(tc.dv, tc.src); got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// usePopulator "true" takes the populators even for a class whose
// provisioner has no CSIDriver object; absent, only with one.
func TestUsePopulatorOverridesTheCSIDriverCheck(t *testing.T) {
	c := cluster("csi-clone")
	delete(c.CSIDrivers, linstor)
	claim := Claim{Class: "replicated", HasClass: true, VolumeMode: Block, Bytes: 10 * gi}
	if use, err := c.UsePopulator(PerDisk{}, claim); use || err != nil {
		t.Errorf("absent, no CSIDriver: %v, %v", use, err)
	}
	yes := "true"
	if use, err := c.UsePopulator(PerDisk{UsePopulator: &yes}, claim); !use || err != nil {
		t.Errorf("true, no CSIDriver: %v, %v", use, err)
	}
	c.CSIDrivers[linstor] = true
	if use, err := c.UsePopulator(PerDisk{}, claim); !use || err != nil {
		t.Errorf("absent, a CSIDriver: %v, %v", use, err)
	}
}

// A claim CDI sized (detectCloneSize wrote permissiveClone) is planned
// without the size check; so is one of a disk whose user set it.
func TestPlanClaimReadsPermissiveClone(t *testing.T) {
	c := cluster("csi-clone")
	claim := Claim{Class: "replicated", HasClass: true, VolumeMode: Block, Bytes: 9 * gi}
	if got := c.PlanClaim(blockGolden, claim); got.Validation == "" {
		t.Errorf("without permissiveClone: %+v, want a refusal", got)
	}
	claim.PerDisk = PerDiskOf(map[string]string{AnnPermissiveClone: "true"})
	if got := c.PlanClaim(blockGolden, claim); got.Validation != "" || got.CloneType != StrategyCSIClone {
		t.Errorf("with permissiveClone: %+v, want csi-clone", got)
	}
}

// No CDIConfig, or one without status.filesystemOverhead, is no overhead
// (common/util.go GetFilesystemOverheadForStorageClass returns "0").
func TestNoCDIConfigIsNoOverhead(t *testing.T) {
	c := cluster("")
	c.Overhead = nil
	got, err := RenderClaim(DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Filesystem, Bytes: 10 * gi}, c.Defaults, c.Env)
	if err != nil || got.Bytes != 10*gi {
		t.Errorf("RenderClaim = %+v, %v; want 10Gi, no overhead", got, err)
	}
	c.Overhead = &cdiv1.FilesystemOverhead{Global: "0.06"}
	if got, _ := RenderClaim(DataVolume{Kind: KindStorage, Class: ptr("replicated"), VolumeMode: Filesystem, Bytes: 10 * gi}, c.Defaults, c.Env); got.Bytes != RequiredSpace(0.06, 10*gi) {
		t.Errorf("with a CDIConfig: %d", got.Bytes)
	}
}

// Two default VolumeSnapshotClasses of a driver: CDI takes the first it
// lists, the API lists by name (GetVolumeSnapshotClass).
func TestTwoDefaultSnapshotClasses(t *testing.T) {
	vscs := []SnapshotClass{{Name: "z", Driver: linstor, Default: true}, {Name: "b", Driver: linstor, Default: true}}
	if n, ok, _ := SnapshotClassFor(vscs, linstor, ""); !ok || n != "b" {
		t.Errorf("%q %v, want b", n, ok)
	}
}

func TestAdvisesCopy(t *testing.T) {
	for _, p := range []string{"topolvm.io", "topolvm.cybozu.com", "csi-powerstore.dellemc.com", "vpc.block.csi.ibm.io"} {
		if !AdvisesCopy(p) {
			t.Errorf("%s: CDI's table advises copy", p)
		}
	}
	for _, p := range []string{linstor, "rbd.csi.ceph.com", "pd.csi.storage.gke.io", ""} {
		if AdvisesCopy(p) {
			t.Errorf("%s: CDI's table does not advise copy", p)
		}
	}
}

func TestPerDiskRoundTrip(t *testing.T) {
	ann := map[string]string{AnnCloneType: "csi-clone", AnnUsePopulator: "false", AnnPermissiveClone: "true", "other": "x"}
	got := PerDiskOf(ann).Annotations()
	if len(got) != 3 || got[AnnCloneType] != "csi-clone" || got[AnnUsePopulator] != "false" || got[AnnPermissiveClone] != "true" {
		t.Errorf("%v", got)
	}
	if PerDiskOf(nil).Annotations() != nil {
		t.Error("no annotations made some")
	}
}

// An obeyed storage-layer clone larger than its source needs the class to
// expand: over every allowVolumeExpansion (unset, false, true) and every
// order of the claim's size against the source's capacity (and a source
// with none recorded), only a larger claim on a class that cannot expand
// fails, and only csi-clone and snapshot (copy sizes its own claim).
func TestObeyedCloneLargerThanItsSourceNeedsExpansion(t *testing.T) {
	const capacity = 10 * gi
	no, yes := false, true
	expansions := map[string]*bool{"unset": nil, "false": &no, "true": &yes}
	sizes := map[string]int64{"smaller": capacity - gi, "equal": capacity, "larger": capacity + gi}
	for _, strategy := range []string{StrategyCSIClone, StrategySnapshot, StrategyCopy} {
		for expName, expand := range expansions {
			for sizeName, bytes := range sizes {
				for _, recorded := range []bool{true, false} {
					src := Source{Class: "replicated", Driver: linstor, VolumeMode: Block, RequestBytes: capacity}
					if recorded {
						src.CapacityBytes = capacity
					}
					c := Cluster{
						Env: Env{Classes: map[string]*storagev1.StorageClass{"replicated": {
							ObjectMeta: metav1.ObjectMeta{Name: "replicated"}, Provisioner: linstor, AllowVolumeExpansion: expand,
						}}},
						SnapshotClasses: []SnapshotClass{{Name: "snap", Driver: linstor}},
					}
					o := c.obeyed(src, Claim{Class: "replicated", HasClass: true, VolumeMode: Block, Bytes: bytes}, strategy)
					refused := strategy != StrategyCopy && recorded && sizeName == "larger" && (expand == nil || !*expand)
					if got := o.Error == ErrResizeRefused; got != refused {
						t.Errorf("%s, expansion %s, claim %s than the source, capacity recorded %v: refused %v, want %v (%+v)",
							strategy, expName, sizeName, recorded, got, refused, o)
					}
				}
			}
		}
	}
}
