package verdict

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// predictor is one pass's clone-path prediction (package predict): the
// planner's state, the goldens as the planner reads them, every
// (golden, class) pair.
type Predictor struct {
	State   *predict.State
	Goldens map[types.NamespacedName]predict.Golden
	// images are the non-Talos goldens (vm-default-images): predicted per
	// disk and per class (ImagePairs, with their image names) and guarded
	// like the catalog's (AllGoldens).
	images     map[types.NamespacedName]predict.Golden
	imageNames map[types.NamespacedName]string
	// snapshots are the golden VolumeSnapshots (predicted per disk and per
	// class, and guarded: SnapshotGoldens).
	snapshots     map[types.NamespacedName]predict.Golden
	snapshotNames map[types.NamespacedName]string
	flavors       map[types.NamespacedName]fleet.Flavor
	Pairs         []predict.Pair
	ImagePairs    []predict.Pair
	// dataSources are the DataSources a sourceRef may name.
	DataSources []*cdiv1.DataSource
	// defaults are the classes an empty class resolves to: for spec.storage
	// DataVolumes of content kubevirt (the platform's), and for spec.pvc.
	StorageDefault, PvcDefault fleet.ClassResolution
}

// buildPredictor predicts every golden of the inventory on every CSI class
// and on the empty class, resolved as the cloner resolves it.
func BuildPredictor(in predict.Inputs, inv *fleet.Inventory) *Predictor {
	in.Classes = make([]*storagev1.StorageClass, 0, len(inv.Classes.ByName))
	for _, sc := range inv.Classes.ByName {
		in.Classes = append(in.Classes, sc)
	}
	p := &Predictor{State: predict.NewState(in), Goldens: map[types.NamespacedName]predict.Golden{},
		flavors:        map[types.NamespacedName]fleet.Flavor{},
		images:         map[types.NamespacedName]predict.Golden{},
		imageNames:     map[types.NamespacedName]string{},
		snapshots:      map[types.NamespacedName]predict.Golden{},
		snapshotNames:  map[types.NamespacedName]string{},
		DataSources:    in.DataSources,
		StorageDefault: inv.Classes.ResolveRequested(nil, cdirules.ContentKubeVirt),
		PvcDefault:     inv.Classes.KubernetesDefault(),
	}
	goldens := make([]predict.Golden, 0, len(inv.Goldens))
	for _, g := range inv.Goldens {
		pg := plannerGolden(g, inv)
		p.Goldens[g.Ref()], p.flavors[g.Ref()] = pg, g.Flavor
		goldens = append(goldens, pg)
	}
	images := make([]predict.Golden, 0, len(inv.Images))
	for _, g := range inv.Images {
		pg := plannerGolden(g, inv)
		if g.IsSnapshot() {
			p.snapshots[g.Ref()], p.snapshotNames[g.Ref()] = pg, g.Image
		} else {
			p.images[g.Ref()], p.imageNames[g.Ref()] = pg, g.Image
		}
		images = append(images, pg)
	}
	p.Pairs = p.State.Pairs(goldens, TargetOfClass(p.StorageDefault))
	p.ImagePairs = p.State.Pairs(images, TargetOfClass(p.StorageDefault))
	return p
}

// AllGoldens are the Talos catalog's goldens and the image goldens, by
// reference: every source the guard judges a disk against.
func (p *Predictor) AllGoldens() map[types.NamespacedName]predict.Golden {
	out := make(map[types.NamespacedName]predict.Golden, len(p.Goldens)+len(p.images))
	maps.Copy(out, p.images)
	maps.Copy(out, p.Goldens)
	return out
}

// SnapshotGoldens are the golden VolumeSnapshots, by reference: the guard
// judges a restore of one apart from a golden DataVolume of the same name.
func (p *Predictor) SnapshotGoldens() map[types.NamespacedName]predict.Golden {
	return maps.Clone(p.snapshots)
}

func TargetOfClass(r fleet.ClassResolution) predict.Target {
	return predict.Target{Class: r.Name, Unresolved: !r.Resolved()}
}

// plannerGolden is what CDI's planner reads of a golden: its claim's request
// and capacity, its PV's driver, volume mode and node affinity.
func plannerGolden(g *fleet.Golden, inv *fleet.Inventory) predict.Golden {
	pg := predict.Golden{Namespace: g.Namespace, Name: g.Name, Phase: g.Phase, VolumeMode: g.VolumeMode,
		CapacityBytes: g.CapacityBytes, RequestedBytes: g.RequestedBytes, ContentType: g.ContentType, VirtualSize: g.VirtualSize}
	if g.ClaimRequestBytes > 0 {
		pg.RequestedBytes = g.ClaimRequestBytes
	}
	if g.Class.Resolved() {
		pg.Class = g.Class.Name
	}
	if g.IsSnapshot() {
		// What CDI reads of a golden VolumeSnapshot: its content's driver,
		// not a PV's; its restore size is the golden's size.
		pg.Snapshot, pg.Driver = g.Snapshot, g.Snapshot.Driver
		if pg.Phase != "Succeeded" {
			pg.Phase = "" // not ready yet: CDI validates it as it is
		}
		return pg
	}
	if pv := inv.Volumes(g.PVName); pv != nil {
		if pv.Spec.CSI != nil {
			pg.Driver = pv.Spec.CSI.Driver
		}
		pg.PinnedNodes = pinnedTo(pv)
	}
	return pg
}

// pinnedTo lists the topology a PV's required node affinity allows
// ("key=value"), nil when it has none.
func pinnedTo(pv *corev1.PersistentVolume) []string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	var out []string
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Operator == corev1.NodeSelectorOpIn {
				for _, v := range e.Values {
					out = append(out, e.Key+"="+v)
				}
			}
		}
	}
	return out
}

// forDisk predicts one worker disk from its own claim: its resolved class,
// volume mode and request (what CDI's planner compares), and the per-disk
// annotations of its DataVolume (CDI copies them onto the claim; the
// claim's cloneType is CDI's own choice, so it is read from the DataVolume).
func (p *Predictor) forDisk(f DiskFacts) *predict.Prediction {
	if p == nil || f.golden == nil || f.Disk.Kind != fleet.DiskClone || !f.Disk.FromPVC && !f.Disk.FromSnapshot {
		return nil
	}
	g, ok := p.snapshots[f.golden.Ref()]
	if !f.Disk.FromSnapshot {
		if g, ok = p.Goldens[f.golden.Ref()]; !ok {
			g, ok = p.images[f.golden.Ref()]
		}
	}
	if !ok {
		return nil
	}
	t := TargetOfClass(f.class)
	t.Bytes, t.VolumeMode, t.AccessModes, t.ContentType = f.Disk.RequestedBytes, f.Disk.VolumeMode, f.Disk.AccessModes, f.Disk.ContentType
	if f.Disk.BareClaim {
		// The external-provisioner's, from the claim's own class, mode and
		// request (fleet.newClaimDisk), not CDI's planner's.
		t.DataSource = true
		pr := p.State.Predict(g, t)
		return &pr
	}
	t.PerDisk, t.UnqualifiedSource = f.Disk.PerDisk, f.Disk.UnqualifiedSource
	if f.Disk.FromPVCSpec {
		t.Kind = cdirules.KindPVC
	}
	if f.Pvc != nil && f.Pvc.Spec.StorageClassName != nil {
		// The claim CDI rendered: its own class, mode and request.
		t.Claimed, t.VolumeMode, t.Bytes = true, "", fleet.ClaimRequest(f.Pvc)
		// CDI's own permissiveClone (detectCloneSize) or the user's, copied
		// from the DataVolume: the planner skips its size check.
		t.PerDisk.Permissive = t.PerDisk.Permissive || cdirules.PerDiskOf(f.Pvc.Annotations).Permissive
		if f.Pvc.Spec.VolumeMode != nil {
			t.VolumeMode = string(*f.Pvc.Spec.VolumeMode)
		}
		t.AccessModes = fleet.ClaimAccessModes(f.Pvc)
	}
	pr := p.State.Predict(g, t)
	return &pr
}

// recordedPrediction is the prediction a disk's persisted record already
// carries: the one made first is the one checked against the verdict.
func recordedPrediction(pvc *corev1.PersistentVolumeClaim) *predict.Prediction {
	old, err := record.PersistedRecord(pvc)
	if err != nil {
		return nil
	}
	return predictionIn(old)
}

// predictionIn is the prediction a persisted record carries (nil: none).
func predictionIn(old *record.RecordDigest) *predict.Prediction {
	if old == nil || old.Predicted == "" {
		return nil
	}
	return &predict.Prediction{Path: old.Predicted, Reason: old.PredictedReason}
}

// pathOfVerdict is the path a decided verdict shows; false while the
// verdict says nothing about the path (pending, unknown, an HTTP import).
func pathOfVerdict(verdict string) (string, bool) {
	switch verdict {
	case record.VerdictCSIClone:
		return predict.PathCSIClone, true
	case record.VerdictSnapshotClone:
		return predict.PathSnapshotClone, true
	case record.VerdictHostAssisted:
		return predict.PathHostAssisted, true
	case record.VerdictStuck, record.VerdictFailed:
		return predict.PathBlocked, true
	}
	return "", false
}

// checkPrediction compares a disk's verdict with the path predicted for it:
// checked once the verdict shows a path. A failed disk shows "blocked": CDI
// refused it, its populator errs, or the DataVolume failed, so a disk
// predicted to clone that fails is a wrong prediction, whatever made it
// fail. A stuck disk confirms a blocked prediction but contradicts no other
// one: a slow clone may still finish (CSICloneStuck speaks for it
// meanwhile).
func CheckPrediction(r *record.Record) (checked, right bool) {
	got, decided := pathOfVerdict(r.Verdict)
	switch {
	case r.Predicted == "" || !decided:
		return false, false
	case got == r.Predicted:
		return true, true
	case r.Verdict == record.VerdictStuck:
		return false, false
	}
	return true, false
}

// predictionWrong: the verdict contradicts the path predicted for the disk.
func predictionWrong(r *record.Record) string {
	if checked, right := CheckPrediction(r); !checked || right {
		return ""
	}
	return fmt.Sprintf("the clone path was predicted %s (%s) from %s rules, but the verdict is %s", r.Predicted, r.PredictedReason, whoseRules(r.PredictedReason), r.Verdict)
}

// whoseRules names whose rules made a prediction: the external-provisioner's
// for a bare claim's data source, CDI's otherwise.
func whoseRules(reason string) string {
	if reason == predict.ReasonDataSource || reason == predict.ReasonProvisionerRefuses {
		return "the external-provisioner's"
	}
	return "CDI's"
}

// GuardedPaths are the paths the admission guard warns about or refuses:
// deploy/admission/warn/policy.yaml's "not a CSI clone" validation
// (TestGuardedPathsAreThePolicys holds the two together).
var GuardedPaths = []string{predict.PathHostAssisted, predict.PathBlocked}

// GuardRefuses says whether the admission guard warns about (Deny mode:
// refuses) a disk predicted on path.
func GuardRefuses(path string) bool { return slices.Contains(GuardedPaths, path) }

// badPathPredicted: a disk CDI has not finished, predicted on a path the
// guard warns about. A person creating the DataVolume sees the guard's
// warning; for one a controller made (virt-controller, Helm) this finding's
// Warning event and csi_clone_bad_disks are what an operator sees before
// CDI copies. Once the verdict is decided it speaks instead.
func badPathPredicted(r *record.Record, f DiskFacts, found []record.Finding) string {
	p := f.predicted
	if r.Verdict != record.VerdictPending || p == nil || !GuardRefuses(p.Path) {
		return ""
	}
	for _, x := range found {
		if x.Reason == findingOfPrediction[p.Reason] {
			return "" // that finding already says it, with its fix
		}
	}
	taker := "CDI"
	if f.Disk.BareClaim {
		taker = "the external-provisioner"
	}
	msg := fmt.Sprintf("%s will take path %s (reason %s) for golden %s, not a CSI clone", taker, p.Path, p.Reason, r.Golden)
	if p.Message != "" {
		msg += ": " + p.Message
	}
	return msg + ". The prediction's fix: " + predict.Fix(p.Reason)
}

// findingOfPrediction: the prediction reasons a finding of its own already
// reports on a pending disk.
var findingOfPrediction = map[string]string{
	predict.ReasonGoldenFailed:   record.ReasonFailedGolden,
	predict.ReasonTargetTooSmall: record.ReasonTooSmall,
}

// PredictionCheck counts decided worker disks whose verdict matched the
// prediction recorded for them (Right) or contradicted it (Wrong).
type PredictionCheck struct{ Right, Wrong int }

// ClassDiskCount is the number of worker disks of a flavor on a class.
type ClassDiskCount struct {
	Flavor fleet.Flavor
	Class  string
	Count  int
}

// reports turns pairs into the rows metrics and the report show.
func (p *Predictor) Reports(pairs []predict.Pair) []ClonePathReport {
	out := make([]ClonePathReport, 0, len(pairs))
	for _, pr := range pairs {
		ref := types.NamespacedName{Namespace: pr.Golden.Namespace, Name: pr.Golden.Name}
		f, image := p.flavors[ref], p.imageNames[ref]
		if pr.Golden.Snapshot != nil {
			f, image = fleet.Flavor{}, p.snapshotNames[ref]
		}
		pred := pr.Larger
		pred.AccessModes = pr.AccessModes
		if image == "" && predict.LacksReadWriteMany(pr.AccessModes) {
			// A Talos golden's disks are worker disks: their VMs live-migrate.
			pred.Flags = append(slices.Clip(pred.Flags), predict.FlagNotReadWriteMany)
		}
		out = append(out, ClonePathReport{Golden: ref.String(), SchematicID: f.SchematicID, Version: f.Version, Image: image,
			StorageClass: pr.Class, ResolvedClass: pr.ResolvedClass, Prediction: pred,
			AtGoldenSize: pr.AtSize.Path, Fix: predict.Fix(pr.Larger.Reason)})
	}
	return out
}

// ClonePathReport is one (golden, class) pair of the "clone paths" table.
type ClonePathReport struct {
	Golden      string `json:"golden"`
	SchematicID string `json:"schematicID"`
	Version     string `json:"version"`
	// Image names an image golden's pair (vm-default-images), which has no
	// flavor.
	Image string `json:"image,omitempty"`
	// StorageClass is a class or "(default)"; ResolvedClass what it resolves to.
	StorageClass  string `json:"storageClass"`
	ResolvedClass string `json:"resolvedClass"`
	predict.Prediction
	// AtGoldenSize is the path of a disk of exactly the golden's size.
	// The Prediction's AccessModes are the platform's worker disk's
	// (predict.Pair.AccessModes).
	AtGoldenSize string `json:"atGoldenSize"`
	Fix          string `json:"fix,omitempty"`
}
