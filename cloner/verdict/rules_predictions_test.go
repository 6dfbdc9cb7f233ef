package verdict

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
)

// TestRecordedPredictionIsThePersistedOne: the prediction a disk's
// persisted record carries is the one checked against its verdict; none
// without a claim, a record, a readable record or a prediction in it.
func TestRecordedPredictionIsThePersistedOne(t *testing.T) {
	for _, tc := range []struct {
		name string
		pvc  *corev1.PersistentVolumeClaim
		want *predict.Prediction
	}{
		{"no claim", nil, nil},
		{"no record", rulesClaim("tenant-a", "d", 0, nil), nil},
		{"unreadable record", rulesClaim("tenant-a", "d", 0, map[string]string{fleet.AnnCloneEvidence: "{"}), nil},
		{"record without a prediction", rulesClaim("tenant-a", "d", 0, map[string]string{fleet.AnnCloneEvidence: `{"verdict":"pending"}`}), nil},
		{"record with a prediction", rulesClaim("tenant-a", "d", 0, map[string]string{fleet.AnnCloneEvidence: `{"verdict":"pending","predicted":"host-assisted","predictedReason":"no-volume-expansion"}`}),
			&predict.Prediction{Path: predict.PathHostAssisted, Reason: predict.ReasonNoVolumeExpansion}},
	} {
		got := recordedPrediction(tc.pvc)
		if (got == nil) != (tc.want == nil) || (got != nil && (got.Path != tc.want.Path || got.Reason != tc.want.Reason)) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestForDiskPredictsOnlyPVCClonesOfAKnownGolden: the prediction covers
// what CDI's clone planner covers: a clone disk whose DataVolume clones a
// PVC (source.pvc) of a golden the predictor knows; every other
// combination, and no predictor, has none.
func TestForDiskPredictsOnlyPVCClonesOfAKnownGolden(t *testing.T) {
	g := rulesGolden()
	p := &Predictor{State: predict.NewState(predict.Inputs{}), Goldens: map[types.NamespacedName]predict.Golden{g.Ref(): {Namespace: g.Namespace, Name: g.Name}}}
	for bits := 0; bits < 16; bits++ {
		withPredictor, withGolden, clone, fromPVC := bits&1 != 0, bits&2 != 0, bits&4 != 0, bits&8 != 0
		for _, known := range []bool{false, true} {
			f := rulesFacts(cdiv1.CSICloneInProgress)
			f.Disk.FromPVC = fromPVC
			if !clone {
				f.Disk.Kind = fleet.DiskHTTPImport
			}
			if !withGolden {
				f.golden = nil
			} else if !known {
				f.golden.Name = "talos-worker-unknown"
			}
			var pred *Predictor
			if withPredictor {
				pred = p
			}
			want := withPredictor && withGolden && known && clone && fromPVC
			if got := pred.forDisk(f); (got != nil) != want {
				t.Errorf("predictor=%v golden=%v known=%v clone=%v fromPVC=%v: %+v, want one=%v",
					withPredictor, withGolden, known, clone, fromPVC, got, want)
			}
		}
	}
}

// TestPinnedToListsTheRequiredInTerms: a PV's required node affinity as
// key=value for every In expression; none without affinity; other
// operators name no node set.
func TestPinnedToListsTheRequiredInTerms(t *testing.T) {
	expr := func(op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: "node", Operator: op, Values: values}
	}
	affinity := func(terms ...corev1.NodeSelectorTerm) *corev1.VolumeNodeAffinity {
		return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}
	}
	for _, tc := range []struct {
		name     string
		affinity *corev1.VolumeNodeAffinity
		want     []string
	}{
		{"no affinity", nil, nil},
		{"nothing required", &corev1.VolumeNodeAffinity{}, nil},
		{"one In", affinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{expr(corev1.NodeSelectorOpIn, "a", "b")}}), []string{"node=a", "node=b"}},
		{"NotIn names none", affinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{expr(corev1.NodeSelectorOpNotIn, "a")}}), nil},
		{"two terms", affinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{expr(corev1.NodeSelectorOpIn, "a")}},
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{expr(corev1.NodeSelectorOpIn, "c")}}), []string{"node=a", "node=c"}},
	} {
		pv := rulesPV("pv", t0, 0)
		pv.Spec.NodeAffinity = tc.affinity
		got := pinnedTo(pv)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// TestForDiskReadsTheDataVolumesPerDiskAnnotations: a disk's own
// storage.usePopulator "false" sends CDI down the legacy host-assisted path
// (datavolume/controller-base.go shouldUseCDIPopulator), so its prediction
// says so; the claim's cloneType, CDI's own choice, is not read as the
// user's.
func TestForDiskReadsTheDataVolumesPerDiskAnnotations(t *testing.T) {
	g := rulesGolden()
	yes := true
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "replicated"}, Provisioner: "linstor.csi.linbit.com", AllowVolumeExpansion: &yes}
	in := predict.Inputs{Classes: []*storagev1.StorageClass{class}, CSIDrivers: []string{class.Provisioner},
		CDIs:     []*cdiv1.CDI{{ObjectMeta: metav1.ObjectMeta{Name: "cdi"}}},
		Profiles: []*cdiv1.StorageProfile{{ObjectMeta: metav1.ObjectMeta{Name: "replicated"}}}}
	p := &Predictor{State: predict.NewState(in), Goldens: map[types.NamespacedName]predict.Golden{g.Ref(): {Namespace: g.Namespace, Name: g.Name,
		Class: "replicated", Driver: class.Provisioner, VolumeMode: "Block", RequestedBytes: 6 << 30, CapacityBytes: 6 << 30}}}
	off := "false"
	for _, tc := range []struct {
		name       string
		perDisk    cdirules.PerDisk
		claimAnn   map[string]string
		wantReason string
	}{
		{"usePopulator false", cdirules.PerDisk{UsePopulator: &off}, nil, predict.ReasonPopulatorOff},
		{"CDI's cloneType on the claim", cdirules.PerDisk{}, map[string]string{fleet.AnnCDICloneType: "copy"}, ""},
		{"none", cdirules.PerDisk{}, nil, ""},
	} {
		f := rulesFacts(cdiv1.CloneScheduled)
		f.Disk.FromPVC, f.Disk.PerDisk = true, tc.perDisk
		f.Disk.VolumeMode, f.Disk.AccessModes = "Block", []string{"ReadWriteOnce"}
		f.Pvc = rulesClaim("tenant-a", "d", 20<<30, tc.claimAnn)
		got := p.forDisk(f)
		if got == nil {
			t.Fatalf("%s: no prediction", tc.name)
		}
		if (got.Reason == predict.ReasonPopulatorOff || got.Reason == predict.ReasonCloneTypeCopy) != (tc.wantReason != "") ||
			tc.wantReason != "" && (got.Reason != tc.wantReason || got.Path != predict.PathHostAssisted) {
			t.Errorf("%s: %s/%s (%s), want reason %q", tc.name, got.Path, got.Reason, got.Message, tc.wantReason)
		}
	}
}

// TestClonePathsFlagWorkerPairsWithoutReadWriteMany: the clone-paths table
// shows the access modes the platform's worker disk gets on each class, and
// flags a Talos golden's pair (its disks are live-migrating workers) whose
// modes leave out ReadWriteMany; an image golden's pair and a pair whose
// class renders no modes are not flagged, and the pair's own flags are not
// changed.
func TestClonePathsFlagWorkerPairsWithoutReadWriteMany(t *testing.T) {
	talos := predict.Golden{Namespace: "cozy-public", Name: "talos-worker-abc-v1"}
	image := predict.Golden{Namespace: "cozy-public", Name: "vm-default-images-ubuntu"}
	p := &Predictor{imageNames: map[types.NamespacedName]string{{Namespace: image.Namespace, Name: image.Name}: "ubuntu"}}
	shared := []string{predict.FlagClassMismatch}
	for _, tc := range []struct {
		g       predict.Golden
		modes   []string
		flagged bool
	}{
		{talos, []string{"ReadWriteOnce"}, true}, {talos, []string{"ReadWriteMany"}, false}, {talos, nil, false},
		{image, []string{"ReadWriteOnce"}, false}, {image, []string{"ReadWriteMany"}, false},
	} {
		pair := predict.Pair{Golden: tc.g, Class: "c", Larger: predict.Prediction{Path: predict.PathCSIClone, Flags: shared[:1:1],
			AccessModes: []string{"ReadWriteOnce"}}, AccessModes: tc.modes}
		r := p.Reports([]predict.Pair{pair})[0]
		if got := r.HasFlag(predict.FlagNotReadWriteMany); got != tc.flagged || !slices.Equal(r.AccessModes, tc.modes) {
			t.Errorf("%s, %v: flagged %v, modes %v; want %v, %v", tc.g.Name, tc.modes, got, r.AccessModes, tc.flagged, tc.modes)
		}
		if len(pair.Larger.Flags) != 1 || !r.HasFlag(predict.FlagClassMismatch) {
			t.Errorf("%s, %v: the pair's flags %v, the report's %v", tc.g.Name, tc.modes, pair.Larger.Flags, r.Flags)
		}
	}
}
