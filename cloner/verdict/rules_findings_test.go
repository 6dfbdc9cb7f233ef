package verdict

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// recordConsts are the values of package record's constants whose names
// start with prefix, read from its source: every verdict word
// ("Verdict"), every bad reason ("Reason"), as the package defines them.
func recordConsts(t *testing.T, prefix string) []string {
	t.Helper()
	syntax, err := parser.ParseFile(token.NewFileSet(), "../record/reasons.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(syntax, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || len(spec.Names) != 1 || len(spec.Values) != 1 || !strings.HasPrefix(spec.Names[0].Name, prefix) {
			return true
		}
		lit, ok := spec.Values[0].(*ast.BasicLit)
		if !ok {
			return true
		}
		v, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
		return true
	})
	if len(out) == 0 {
		t.Fatalf("no %s constants in ../record/reasons.go", prefix)
	}
	return out
}

// retriedCodes are the codes the kubernetes-csi sidecars retry (domain.md
// §8; external-resizer v2.3.0 pkg/util/util.go IsFinalError).
var retriedCodes = map[string]bool{codes.Canceled.String(): true, codes.DeadlineExceeded.String(): true,
	codes.Unavailable.String(): true, codes.ResourceExhausted.String(): true, codes.Aborted.String(): true}

func reasonsOf(fs []record.Finding) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, f.Reason)
	}
	return out
}

// TestFindingsOverTheGoldensFacts: an unknown golden is the only finding
// (nothing else can be compared with it), quoting CDI's CloneWithoutSource
// when CDI said it; a known one gets invalid-golden when untrusted and
// failed-golden when its import failed, each independent, and the other
// findings after them (here too-small from a prediction).
func TestFindingsOverTheGoldensFacts(t *testing.T) {
	for _, golden := range []string{"none", "trusted", "untrusted", "failed", "untrusted-failed"} {
		for _, waits := range []bool{false, true} {
			f := rulesFacts(cdiv1.CSICloneInProgress)
			f.predicted = &predict.Prediction{Path: predict.PathBlocked, Reason: predict.ReasonTargetTooSmall}
			if waits {
				f.Disk.Conditions = []fleet.CDICondition{{Type: string(cdiv1.DataVolumeBound), Status: "False",
					Reason: fleet.CdiReasonWithoutSource, Message: "source PVC not found"}}
			}
			var want []string
			switch golden {
			case "none":
				f.golden, want = nil, []string{record.ReasonUnknownGolden}
			case "trusted":
				want = []string{record.ReasonTooSmall}
			case "untrusted":
				f.golden.Problems = []string{"bad name"}
				want = []string{record.ReasonInvalidGolden, record.ReasonTooSmall}
			case "failed":
				f.golden.Phase = string(cdiv1.Failed)
				want = []string{record.ReasonFailedGolden, record.ReasonTooSmall}
			case "untrusted-failed":
				f.golden.Problems, f.golden.Phase = []string{"bad name"}, string(cdiv1.Failed)
				want = []string{record.ReasonInvalidGolden, record.ReasonFailedGolden, record.ReasonTooSmall}
			}
			r := &record.Record{Verdict: record.VerdictPending, Golden: "cozy-public/g"}
			got := findings(r, f, nil)
			if !slices.Equal(reasonsOf(got), want) {
				t.Errorf("golden %s waits=%v: %v, want %v", golden, waits, reasonsOf(got), want)
				continue
			}
			named := strings.HasPrefix(got[0].Message, "golden cozy-public/g is not in the catalog")
			quoted := strings.HasSuffix(got[0].Message, "; CDI: CloneWithoutSource: source PVC not found")
			if golden == "none" && (!named || quoted != waits) {
				t.Errorf("unknown golden, CDI waits=%v: message %q", waits, got[0].Message)
			}
		}
	}
}

// TestClassMismatchNeedsTwoResolvedDifferentClasses: the disk's and the
// golden's classes are compared only when both resolved; a mismatch is a
// different name.
func TestClassMismatchNeedsTwoResolvedDifferentClasses(t *testing.T) {
	class := func(name string, resolved bool) fleet.ClassResolution {
		if !resolved {
			return fleet.ClassResolution{Name: name, How: fleet.ClassUnresolved}
		}
		return fleet.ClassResolution{Name: name, How: fleet.ClassRequested}
	}
	for _, diskResolved := range []bool{false, true} {
		for _, goldenResolved := range []bool{false, true} {
			for _, diskName := range []string{"replicated", "local"} {
				f := rulesFacts(cdiv1.CSICloneInProgress)
				f.class, f.golden.Class = class(diskName, diskResolved), class("replicated", goldenResolved)
				want := diskResolved && goldenResolved && diskName != "replicated"
				got := slices.Contains(reasonsOf(findings(&record.Record{Verdict: record.VerdictPending}, f, nil)), record.ReasonClassMismatch)
				if got != want {
					t.Errorf("disk %s resolved=%v, golden replicated resolved=%v: class-mismatch %v, want %v",
						diskName, diskResolved, goldenResolved, got, want)
				}
			}
		}
	}
}

// TestResizeFailedOverCodeAndVerdict: a failed last expansion is a finding
// once it says something final: at once for a code the sidecars do not
// retry, and for any code once the verdict is decided (stuck or done
// without it). Every gRPC code grpc-go names, every verdict word.
func TestResizeFailedOverCodeAndVerdict(t *testing.T) {
	for _, c := range grpcCodes(t) {
		for _, verdict := range recordConsts(t, "Verdict") {
			f := rulesFacts(cdiv1.CSICloneInProgress)
			f.partial = &fleet.VolumeEvidence{Expansions: []fleet.Expansion{{RequiredBytes: 20 << 30, Code: c.String(), Message: "x"}}}
			want := c != codes.OK && (!retriedCodes[c.String()] || verdict != record.VerdictPending)
			got := slices.Contains(reasonsOf(findings(&record.Record{Verdict: verdict}, f, nil)), record.ReasonResizeFailed)
			if got != want {
				t.Errorf("%s, verdict %s: resize-failed %v, want %v", c, verdict, got, want)
			}
		}
	}
}

// TestTooSmallOnlyFromTheTargetTooSmallPrediction: too-small comes only from
// a prediction whose reason is target-too-small (every prediction reason,
// and none), in the prediction's words when it has them.
func TestTooSmallOnlyFromTheTargetTooSmallPrediction(t *testing.T) {
	r := &record.Record{DiskBytes: 5 << 30, Golden: "cozy-public/g"}
	f := rulesFacts(cdiv1.CSICloneInProgress)
	if got := tooSmall(r, f); got != "" {
		t.Errorf("no prediction: %q", got)
	}
	for _, reason := range predict.Reasons {
		for _, msg := range []string{"", "claim 5Gi < golden 6Gi"} {
			f.predicted = &predict.Prediction{Path: predict.PathBlocked, Reason: reason, Message: msg}
			got := tooSmall(r, f)
			switch {
			case reason != predict.ReasonTargetTooSmall && got != "":
				t.Errorf("reason %s: %q, want none", reason, got)
			case reason == predict.ReasonTargetTooSmall && msg != "" && got != msg:
				t.Errorf("reason %s with a message: %q, want the prediction's %q", reason, got, msg)
			case reason == predict.ReasonTargetTooSmall && msg == "" && !strings.Contains(got, "disk size 5368709120 bytes: CDI's rules predicted its claim smaller"):
				t.Errorf("reason %s without a message: %q", reason, got)
			}
		}
	}
}

// TestResizeMissingBoundaries: a finished clone (csi-clone or
// snapshot-clone; every other verdict is not a clone) whose volume is below
// its claim's request, on each side of the request, with what the tap saw
// of the expansion: a failure quoted, none reaching the driver said, a
// success to the size (the capacity not updated yet) or short of it adding
// nothing; the tap's CreateVolume record before expansions alone.
func TestResizeMissingBoundaries(t *testing.T) {
	const want = 20 << 30
	failed := []fleet.Expansion{{RequiredBytes: want, Code: "OutOfRange", Message: "too big"}}
	grown := []fleet.Expansion{{RequiredBytes: want, Code: "OK"}}
	short := []fleet.Expansion{{RequiredBytes: want - 1, Code: "OK"}}
	for _, verdict := range recordConsts(t, "Verdict") {
		isClone := verdict == record.VerdictCSIClone || verdict == record.VerdictSnapshotClone
		for _, tc := range []struct {
			name     string
			request  int64
			capacity int64
			tap      []fleet.Expansion // nil: no tap record
			partial  []fleet.Expansion
			found    bool
			suffix   string
		}{
			{"no request", 0, 1, nil, nil, false, ""},
			{"below, nothing seen", want, want - 1, nil, nil, true, "the claim asks"},
			{"at the request", want, want, nil, nil, false, ""},
			{"above the request", want, want + 1, nil, nil, false, ""},
			{"below, no expansion reached the driver", want, want - 1, []fleet.Expansion{}, nil, true, "; no ControllerExpandVolume reached the driver"},
			{"below, the expansion failed", want, want - 1, failed, nil, true, "; ControllerExpandVolume failed: OutOfRange too big"},
			{"below, grown but not shown", want, want - 1, grown, nil, true, "the claim asks"},
			{"below, grown short of the request", want, want - 1, short, nil, true, "the claim asks"},
			{"below, failed on the partial record", want, want - 1, nil, failed, true, "; ControllerExpandVolume failed: OutOfRange too big"},
			{"below, the tap's record wins over the partial", want, want - 1, []fleet.Expansion{}, failed, true, "; no ControllerExpandVolume reached the driver"},
		} {
			f := rulesFacts(cdiv1.Succeeded)
			f.Pvc = rulesClaim("tenant-a", "d", tc.request, nil)
			if tc.tap != nil {
				f.tap = &fleet.VolumeEvidence{Created: t0, Expansions: tc.tap}
			}
			if tc.partial != nil {
				f.partial = &fleet.VolumeEvidence{Expansions: tc.partial}
			}
			got := resizeMissing(&record.Record{Verdict: verdict, CapacityBytes: tc.capacity}, f)
			if wantFound := isClone && tc.found; (got != "") != wantFound || (wantFound && !strings.HasSuffix(got, tc.suffix)) {
				t.Errorf("verdict %s, %s: %q, want found=%v ending %q", verdict, tc.name, got, wantFound, tc.suffix)
			}
		}
	}
}

// cdiVerdict is the verdict each clone type CDI writes means (CDI v1.65
// api core/v1beta1/types.go: copy is "host-assisted").
var cdiVerdict = map[string]string{string(cdiv1.CloneStrategyCsiClone): record.VerdictCSIClone,
	string(cdiv1.CloneStrategySnapshot): record.VerdictSnapshotClone, string(cdiv1.CloneStrategyHostAssisted): record.VerdictHostAssisted}

// TestCDIDisagreesOverCloneTypeAndVerdict: when the tap decided, a
// cloneType CDI writes that means another mechanism is a finding; no
// annotation, one CDI does not write, or a verdict from CDI's own
// annotation is none. Every source, clone type and mechanism verdict.
func TestCDIDisagreesOverCloneTypeAndVerdict(t *testing.T) {
	for _, source := range []string{record.SourceCSITap, record.SourceCDI} {
		for _, cloneType := range []string{"", "bogus", string(cdiv1.CloneStrategyCsiClone), string(cdiv1.CloneStrategySnapshot), string(cdiv1.CloneStrategyHostAssisted)} {
			for _, verdict := range []string{record.VerdictCSIClone, record.VerdictSnapshotClone, record.VerdictHostAssisted} {
				meant, known := cdiVerdict[cloneType]
				want := source == record.SourceCSITap && known && meant != verdict
				got := cdiDisagrees(&record.Record{Source: source, CDICloneType: cloneType, Verdict: verdict}, DiskFacts{})
				if (got != "") != want {
					t.Errorf("%s, cloneType %q, verdict %s: %q, want found=%v", source, cloneType, verdict, got, want)
				}
			}
		}
	}
}

// TestWrongSourceOverTheTapsSources: the driver copied something other
// than the golden's volume: a source volume, or the volume a source
// snapshot was cut from (on the evidence, else from the snapshot
// contents). Without the tap, the golden's volume handle, or a known
// source there is nothing to compare.
func TestWrongSourceOverTheTapsSources(t *testing.T) {
	snapshotOf := map[string]string{"snap-of-golden": goldenHandle, "snap-of-other": "other"}
	for _, tc := range []struct {
		name   string
		tap    *fleet.VolumeEvidence
		handle string
		want   bool
	}{
		{"no tap", nil, goldenHandle, false},
		{"golden's volume unknown", &fleet.VolumeEvidence{SourceVolume: "other"}, "", false},
		{"the golden's volume", &fleet.VolumeEvidence{SourceVolume: goldenHandle}, goldenHandle, false},
		{"another volume", &fleet.VolumeEvidence{SourceVolume: "other"}, goldenHandle, true},
		{"snapshot of the golden, on the evidence", &fleet.VolumeEvidence{SourceSnapshot: "s", SnapshotOf: goldenHandle}, goldenHandle, false},
		{"snapshot of another, on the evidence", &fleet.VolumeEvidence{SourceSnapshot: "s", SnapshotOf: "other"}, goldenHandle, true},
		{"snapshot of the golden, from its contents", &fleet.VolumeEvidence{SourceSnapshot: "snap-of-golden"}, goldenHandle, false},
		{"snapshot of another, from its contents", &fleet.VolumeEvidence{SourceSnapshot: "snap-of-other"}, goldenHandle, true},
		{"snapshot of an unknown volume", &fleet.VolumeEvidence{SourceSnapshot: "snap-unknown"}, goldenHandle, false},
		{"blank volume", &fleet.VolumeEvidence{}, goldenHandle, false},
		{"volume named before the snapshot", &fleet.VolumeEvidence{SourceVolume: goldenHandle, SourceSnapshot: "snap-of-other"}, goldenHandle, false},
	} {
		f := rulesFacts(cdiv1.Succeeded)
		f.tap, f.golden.VolumeHandle = tc.tap, tc.handle
		if got := wrongSource(&record.Record{}, f, snapshotOf); (got != "") != tc.want {
			t.Errorf("%s: %q, want found=%v", tc.name, got, tc.want)
		}
	}
}

// shownPath is the clone path each verdict word shows (the verdicts'
// meanings in record/reasons.go): stuck and failed are blocked, pending,
// unknown and http-import show none.
var shownPath = map[string]string{record.VerdictCSIClone: predict.PathCSIClone, record.VerdictSnapshotClone: predict.PathSnapshotClone,
	record.VerdictHostAssisted: predict.PathHostAssisted, record.VerdictStuck: predict.PathBlocked, record.VerdictFailed: predict.PathBlocked}

// TestCheckPredictionOverEveryVerdictAndPath: every verdict word against
// every predicted path and none. Checked once the verdict shows a path:
// right when it is the predicted one; a stuck disk confirms only a blocked
// prediction and contradicts none (a slow clone may still finish); any
// other decided verdict on another path is a wrong prediction, which
// predictionWrong reports.
func TestCheckPredictionOverEveryVerdictAndPath(t *testing.T) {
	for _, verdict := range recordConsts(t, "Verdict") {
		for _, predicted := range append([]string{""}, predict.Paths...) {
			shown, decided := shownPath[verdict]
			var checked, right bool
			switch {
			case predicted == "" || !decided:
			case shown == predicted:
				checked, right = true, true
			case verdict == record.VerdictStuck:
			default:
				checked = true
			}
			r := &record.Record{Verdict: verdict, Predicted: predicted, PredictedReason: "x"}
			gotChecked, gotRight := CheckPrediction(r)
			if gotChecked != checked || gotRight != right {
				t.Errorf("verdict %s predicted %q: checked=%v right=%v, want %v %v", verdict, predicted, gotChecked, gotRight, checked, right)
			}
			if wrong := predictionWrong(r) != ""; wrong != (checked && !right) {
				t.Errorf("verdict %s predicted %q: prediction-wrong %v, want %v", verdict, predicted, wrong, checked && !right)
			}
		}
	}
}

// TestGuardRefusesOverEveryPath: the guard warns about the paths that are
// not a CSI clone of the golden's data by the storage layer: host-assisted
// and blocked (deploy/admission/warn/policy.yaml).
func TestGuardRefusesOverEveryPath(t *testing.T) {
	for _, path := range append([]string{""}, predict.Paths...) {
		want := path == predict.PathHostAssisted || path == predict.PathBlocked
		if got := GuardRefuses(path); got != want {
			t.Errorf("path %q: %v, want %v", path, got, want)
		}
	}
}

// TestBadPathPredictedOverVerdictPathAndFindings: a disk not decided yet
// (pending) predicted on a guarded path is a finding, unless a finding of
// its own already says it (failed-golden for golden-failed, too-small for
// target-too-small). Every verdict, every path and none, those reasons and
// one with no finding of its own, each against no finding and both.
func TestBadPathPredictedOverVerdictPathAndFindings(t *testing.T) {
	ownFinding := map[string]string{predict.ReasonGoldenFailed: record.ReasonFailedGolden, predict.ReasonTargetTooSmall: record.ReasonTooSmall}
	for _, verdict := range recordConsts(t, "Verdict") {
		for _, path := range append([]string{""}, predict.Paths...) {
			for _, reason := range []string{predict.ReasonGoldenFailed, predict.ReasonTargetTooSmall, predict.ReasonNoVolumeExpansion} {
				for _, found := range []string{"", record.ReasonFailedGolden, record.ReasonTooSmall} {
					f := rulesFacts(cdiv1.CSICloneInProgress)
					if path != "" {
						f.predicted = &predict.Prediction{Path: path, Reason: reason}
					}
					var prior []record.Finding
					if found != "" {
						prior = []record.Finding{{Reason: found}}
					}
					guarded := path == predict.PathHostAssisted || path == predict.PathBlocked
					said := ownFinding[reason] != "" && ownFinding[reason] == found
					want := verdict == record.VerdictPending && guarded && !said
					got := badPathPredicted(&record.Record{Verdict: verdict}, f, prior)
					if (got != "") != want {
						t.Errorf("verdict %s path %q reason %s found %q: %q, want found=%v", verdict, path, reason, found, got, want)
					}
				}
			}
		}
	}
}

// TestFindingsAllAtOnceInTheRecordsOrder: every finding a finished disk can
// carry at once, each independent of the others, in the order records have
// always listed them (the record format stays byte for byte, issue 27).
func TestFindingsAllAtOnceInTheRecordsOrder(t *testing.T) {
	f := rulesFacts(cdiv1.Succeeded)
	f.golden.Problems, f.golden.Phase = []string{"bad name"}, string(cdiv1.Failed)
	f.class = fleet.ClassResolution{Name: "local", How: fleet.ClassFromClaim}
	f.predicted = &predict.Prediction{Path: predict.PathBlocked, Reason: predict.ReasonTargetTooSmall}
	f.Pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	f.tap = &fleet.VolumeEvidence{Created: t0, SourceVolume: "other",
		Expansions: []fleet.Expansion{{RequiredBytes: 20 << 30, Code: codes.OutOfRange.String()}}}
	r := &record.Record{Verdict: record.VerdictCSIClone, Source: record.SourceCSITap, CDICloneType: string(cdiv1.CloneStrategySnapshot),
		CapacityBytes: 6 << 30, Predicted: predict.PathBlocked}
	want := []string{record.ReasonInvalidGolden, record.ReasonFailedGolden, record.ReasonClassMismatch, record.ReasonTooSmall,
		record.ReasonResizeMissing, record.ReasonResizeFailed, record.ReasonCDIDisagrees, record.ReasonWrongSource, record.ReasonNotReadWriteMany,
		record.ReasonPredictionWrong}
	if got := reasonsOf(findings(r, f, nil)); !slices.Equal(got, want) {
		t.Errorf("findings %v, want %v", got, want)
	}
}

// TestBadPathPredictedQuotesThePrediction: the finding names the path,
// reason and golden, adds the prediction's own words when it has them, and
// ends with the prediction's fix.
func TestBadPathPredictedQuotesThePrediction(t *testing.T) {
	for _, msg := range []string{"", "class local has no allowVolumeExpansion"} {
		f := rulesFacts(cdiv1.CSICloneInProgress)
		f.predicted = &predict.Prediction{Path: predict.PathHostAssisted, Reason: predict.ReasonNoVolumeExpansion, Message: msg}
		got := badPathPredicted(&record.Record{Verdict: record.VerdictPending, Golden: "cozy-public/g"}, f, nil)
		head := "CDI will take path host-assisted (reason no-volume-expansion) for golden cozy-public/g, not a CSI clone"
		if msg != "" {
			head += ": " + msg
		}
		if want := head + ". The prediction's fix: " + predict.Fix(predict.ReasonNoVolumeExpansion); got != want {
			t.Errorf("message %q: %q, want %q", msg, got, want)
		}
	}
}

// TestNotReadWriteManyOverEveryClaimAndGolden: a worker disk (a clone of a
// Talos golden) is flagged when its claim has access modes and none is
// ReadWriteMany, or, before CDI makes the claim, when its prediction renders
// such modes; a claim's own modes outrank the prediction; a vm-disk (an
// image golden's), an HTTP import and a claim or prediction without modes
// are never flagged. Over every golden kind x disk kind x claim x prediction.
func TestNotReadWriteManyOverEveryClaimAndGolden(t *testing.T) {
	claims := map[string][]corev1.PersistentVolumeAccessMode{
		"no claim": nil, "claim without modes": {}, "claim RWO": {corev1.ReadWriteOnce},
		"claim RWO+RWX": {corev1.ReadWriteOnce, corev1.ReadWriteMany}, "claim RWX": {corev1.ReadWriteMany},
		"claim RWOP": {corev1.ReadWriteOncePod},
	}
	predictions := map[string][]string{"no prediction": nil, "predicted none": {}, "predicted RWO": {"ReadWriteOnce"},
		"predicted RWX": {"ReadWriteMany"}}
	for _, image := range []bool{false, true} {
		for _, kind := range []string{fleet.DiskClone, fleet.DiskHTTPImport} {
			for claimName, modes := range claims {
				for predName, predicted := range predictions {
					f := rulesFacts(cdiv1.CSICloneInProgress)
					f.Disk.Kind = kind
					if image {
						f.golden.Image = "ubuntu"
					}
					if claimName == "no claim" {
						f.Pvc = nil
					} else {
						f.Pvc.Spec.AccessModes = modes
					}
					if predName != "no prediction" {
						f.predicted = &predict.Prediction{Path: predict.PathCSIClone, Reason: predict.ReasonCDIOverride, AccessModes: predicted}
					}
					var want bool
					switch {
					case image || kind != fleet.DiskClone:
					case len(modes) > 0:
						want = !slices.Contains(modes, corev1.ReadWriteMany)
					case claimName == "no claim" || claimName == "claim without modes":
						want = predName == "predicted RWO"
					}
					msg := notReadWriteMany(f)
					if got := msg != ""; got != want {
						t.Errorf("image golden %v, %s, %s, %s: flagged %v (%q), want %v", image, kind, claimName, predName, got, msg, want)
					}
					if want && !strings.Contains(msg, "not ReadWriteMany") {
						t.Errorf("%s, %s: message %q does not say what is missing", claimName, predName, msg)
					}
				}
			}
		}
	}
}
