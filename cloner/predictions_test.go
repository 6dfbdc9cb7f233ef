package cloner

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clienttesting "k8s.io/client-go/testing"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/cloner/schedule"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// TestVerdictContradictingThePredictionIsAFinding: a host-assisted copy on
// a class without expansion was predicted; one on the golden's own class
// contradicts the predicted csi-clone and is flagged prediction-wrong.
func TestVerdictContradictingThePredictionIsAFinding(t *testing.T) {
	w, _ := clonertest.PredictionWorld(t)
	cfg := clonertest.TestConfig()
	inv := fleet.BuildInventory(w.Objects(t), cfg.GoldenNamespaces())
	in := clonertest.CsiCloneForced()
	in.Profiles = clonertest.DerivedProfiles(clonertest.TestClass, "fixed")
	ev := verdict.EvaluateWith(inv, cfg, clonertest.T0.Add(time.Hour), verdict.BuildPredictor(in, inv))
	recs := map[string]*record.Record{}
	for _, a := range ev.Assessments {
		recs[a.Disk.Name] = a.Record
	}
	if r := recs["fixed-a"]; r.Predicted != predict.PathHostAssisted || r.PredictedReason != predict.ReasonNoVolumeExpansion || clonertest.ReasonsOf(r)[record.ReasonPredictionWrong] {
		t.Errorf("fixed-a: %+v", r)
	}
	if r := recs["same-a"]; r.Predicted != predict.PathCSIClone || !clonertest.ReasonsOf(r)[record.ReasonPredictionWrong] {
		t.Errorf("same-a: predicted %s, reasons %v; want csi-clone and prediction-wrong", r.Predicted, r.BadReasons())
	}
	c := &Controller{cfg: cfg, due: schedule.New(passChunk)}
	c.remember(nil, ev)
	s := c.buildSnapshot(inv, nil)
	ledger.AddPredictions(s, ev.Pred)
	if s.PredictionChecks != (verdict.PredictionCheck{Right: 1, Wrong: 1}) || !s.PredictionsReady {
		t.Errorf("checks %+v ready %v", s.PredictionChecks, s.PredictionsReady)
	}
	got := map[string]string{}
	for _, p := range s.Paths {
		got[p.StorageClass] = p.Path + "/" + p.Reason
	}
	want := map[string]string{clonertest.TestClass: "csi-clone/cdi-override", "fixed": "host-assisted/no-volume-expansion", predict.EmptyClass: "blocked/class-unresolved"}
	if len(got) != len(want) {
		t.Errorf("pairs %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("pair %s: %s, want %s", k, got[k], v)
		}
	}
}

// TestFailedDiskPredictedCSICloneIsPredictionWrong: CDI's populator fails
// a disk the prediction said it would CSI-clone (its claim exists, with the
// disk's class, size and volume mode); the failed verdict contradicts the
// prediction, and the self-check counts it wrong.
func TestFailedDiskPredictedCSICloneIsPredictionWrong(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "refused", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	pvc := w.PendingTarget(dv)
	pvc.Annotations[fleet.AnnCDIClonePhase], pvc.Annotations[fleet.AnnCDICloneError] = "Error", "invalid token"
	clonertest.Condition(dv, cdiv1.DataVolumeRunning, corev1.ConditionFalse, fleet.CdiReasonError, "invalid token", clonertest.T0)
	cfg := clonertest.TestConfig()
	inv := fleet.BuildInventory(w.Objects(t), cfg.GoldenNamespaces())
	ev := verdict.EvaluateWith(inv, cfg, clonertest.T0.Add(time.Minute), verdict.BuildPredictor(clonertest.CsiCloneForced(), inv))
	r := ev.Assessments[0].Record
	if r.Verdict != record.VerdictFailed || r.Predicted != predict.PathCSIClone || !clonertest.ReasonsOf(r)[record.ReasonPredictionWrong] {
		t.Fatalf("verdict %s, predicted %s (%s), reasons %v; want failed, csi-clone, prediction-wrong", r.Verdict, r.Predicted, r.PredictedReason, r.BadReasons())
	}
	c := &Controller{cfg: cfg, due: schedule.New(passChunk)}
	c.remember(nil, ev)
	if s := c.buildSnapshot(inv, nil); s.PredictionChecks != (verdict.PredictionCheck{Wrong: 1}) {
		t.Errorf("checks %+v, want one wrong", s.PredictionChecks)
	}
}

// TestThePredictionRecordedFirstIsTheOneChecked: a record that already
// carries a prediction keeps it, whatever the objects say now.
func TestThePredictionRecordedFirstIsTheOneChecked(t *testing.T) {
	w, _ := clonertest.PredictionWorld(t)
	for _, pvc := range w.Pvcs {
		if pvc.Name == "same-a" {
			pvc.Annotations[fleet.AnnCloneEvidence] = record.MustJSON(&record.Record{Verdict: record.VerdictPending, Predicted: predict.PathHostAssisted,
				PredictedReason: predict.ReasonCopyStrategy})
		}
	}
	cfg := clonertest.TestConfig()
	inv := fleet.BuildInventory(w.Objects(t), cfg.GoldenNamespaces())
	for _, a := range verdict.EvaluateWith(inv, cfg, clonertest.T0.Add(time.Hour), verdict.BuildPredictor(clonertest.CsiCloneForced(), inv)).Assessments {
		if a.Disk.Name == "same-a" && (a.Record.Predicted != predict.PathHostAssisted || clonertest.ReasonsOf(a.Record)[record.ReasonPredictionWrong]) {
			t.Errorf("same-a: %+v", a.Record)
		}
	}
}

// TestAdmissionParamsWrittenOnlyOnChange runs real passes over informers:
// the guard's parameters are created once, a pass with nothing changed
// writes nothing, and a class losing allowVolumeExpansion rewrites them.
func TestAdmissionParamsWrittenOnlyOnChange(t *testing.T) {
	w, g := clonertest.PredictionWorld(t)
	fc := newFakeCluster(t, w)
	servePredictionInputs(t, fc)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	cfg.AdmissionParams = true
	ctx := t.Context()
	c := fc.controller(t, ctx, cfg)
	eventually(t, "prediction inputs synced", func() bool { _, _, ok := c.predIn.Load().Inputs(c.predIn.Load().ReadDataSources()); return ok })
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	params := func() map[string]string {
		cm, err := fc.kube.CoreV1().ConfigMaps(cfg.LedgerNamespace).Get(ctx, publish.AdmissionParamsName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data
	}
	if got := params()[g.Name+".path.fixed"]; got != "host-assisted/no-volume-expansion" {
		t.Errorf("path on fixed: %q", got)
	}
	if c.Snapshot().AdmissionParams != publish.AdmissionParamsSynced {
		t.Errorf("snapshot says %q", c.Snapshot().AdmissionParams)
	}
	fc.settle(t, c) // the caches hold the first pass's own writes
	before := len(fc.kube.Actions())
	for i := 0; i < 3; i++ {
		if err := c.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range fc.kube.Actions()[before:] {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("a pass with nothing changed wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	sc, err := fc.kube.StorageV1().StorageClasses().Get(ctx, clonertest.TestClass, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.AllowVolumeExpansion = new(bool)
	if _, err := fc.kube.StorageV1().StorageClasses().Update(ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "class change seen", func() bool {
		x, ok, _ := c.scInf.GetStore().GetByKey(clonertest.TestClass)
		return ok && !*x.(*storagev1.StorageClass).AllowVolumeExpansion
	})
	before = len(fc.kube.Actions())
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := params()[g.Name+".path."+clonertest.TestClass]; got != "host-assisted/no-volume-expansion" {
		t.Errorf("after the change, path on %s: %q", clonertest.TestClass, got)
	}
	if n := countWrites(fc.kube.Actions()[before:], "configmaps"); n != 1 {
		t.Errorf("%d ConfigMap writes after one change, want 1", n)
	}
}

func countWrites(actions []clienttesting.Action, resource string) int {
	n := 0
	for _, a := range actions {
		if a.GetResource().Resource == resource && (a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "patch") {
			n++
		}
	}
	return n
}

// servePredictionInputs serves CDI's StorageProfile and CDI resources (no
// snapshot classes) and creates the CDI resource, the CSIDriver and the
// StorageProfiles CDI derives for the prediction world's classes.
func servePredictionInputs(t *testing.T, fc *fakeCluster) {
	t.Helper()
	for _, l := range fc.kube.Resources {
		if l.GroupVersion == fleet.CDIGVR.GroupVersion().String() {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: "storageprofiles", Kind: "StorageProfile"},
				metav1.APIResource{Name: "cdis", Kind: "CDI"}, metav1.APIResource{Name: "cdiconfigs", Kind: "CDIConfig"},
				metav1.APIResource{Name: "datasources", Kind: "DataSource"})
		}
	}
	ctx := context.Background()
	cr := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI",
		"metadata": map[string]any{"name": "cdi"}, "spec": map[string]any{"cloneStrategyOverride": "csi-clone"}}}
	if _, err := fc.dyn.Resource(fleet.CDIGVR).Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.kube.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: clonertest.TestDriver}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sp := range clonertest.DerivedProfiles(clonertest.TestClass, "fixed") {
		if _, err := fc.dyn.Resource(fleet.StorageProfileGVR).Create(ctx, clonertest.ToUnstructured(t, sp), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReportClonePaths: `report --predict CLASS` and the report's "clone
// paths" table read the same objects the informers do.
func TestReportClonePaths(t *testing.T) {
	w, g := clonertest.PredictionWorld(t)
	// An image golden nothing clones yet: a first vm-disk's path is
	// predicted too.
	image := w.DataVolume("cozy-public", "vm-default-images-ubuntu", 6*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	clonertest.Succeed(image, clonertest.T0.Add(-time.Hour))
	w.Claim(image, clonertest.TestClass, 6*clonertest.Gi, 6*clonertest.Gi, "golden-vol-ubuntu")
	fc := newFakeCluster(t, w)
	servePredictionInputs(t, fc)
	ctx := t.Context()
	var out strings.Builder
	if err := report.ReportClonePaths(ctx, fc.clients(), clonertest.TestConfig(), &out, "table", "fixed"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cozy-public/" + g.Name, "cozy-public/" + image.Name, "fixed", "host-assisted", "no-volume-expansion", "csi-clone", predict.Fix(predict.ReasonNoVolumeExpansion)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report --predict fixed lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), clonertest.TestClass+" ") {
		t.Errorf("report --predict fixed shows other classes:\n%s", out.String())
	}
	out.Reset()
	if err := report.Report(ctx, fc.clients(), clonertest.TestConfig(), &out, "table"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "CLONE PATHS") || !strings.Contains(out.String(), predict.EmptyClass+" -> none") {
		t.Errorf("report has no clone paths table with the empty class:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "cozy-public/"+image.Name+"  ") {
		t.Errorf("report's clone paths lack the image golden %s:\n%s", image.Name, out.String())
	}
}

// TestFailedCountsAgainstItsPredictionStuckOnlyConfirmsBlocked: every
// verdict against every prediction. A path verdict is right when it is the
// path predicted; a failed disk (CDI refused it, its populator errs, the
// DataVolume failed) shows "blocked" and is counted either way: a disk
// predicted csi-clone that CDI refused is a wrong prediction. A stuck disk
// confirms blocked but contradicts nothing else (a slow clone may still
// finish); pending, unknown and HTTP imports say nothing about the path.
func TestFailedCountsAgainstItsPredictionStuckOnlyConfirmsBlocked(t *testing.T) {
	paths := []string{"", predict.PathCSIClone, predict.PathSnapshotClone, predict.PathHostAssisted, predict.PathBlocked}
	// One letter per prediction above: - unchecked, R right, W wrong.
	want := map[string]string{
		record.VerdictPending:       "-----",
		record.VerdictUnknown:       "-----",
		record.VerdictHTTPImport:    "-----",
		record.VerdictCSIClone:      "-RWWW",
		record.VerdictSnapshotClone: "-WRWW",
		record.VerdictHostAssisted:  "-WWRW",
		record.VerdictStuck:         "----R",
		record.VerdictFailed:        "-WWWR",
	}
	for word, row := range want {
		for i, predicted := range paths {
			checked, right := verdict.CheckPrediction(&record.Record{Verdict: word, Predicted: predicted})
			got := map[[2]bool]byte{{false, false}: '-', {true, true}: 'R', {true, false}: 'W'}[[2]bool{checked, right}]
			if got != row[i] {
				t.Errorf("verdict %s, predicted %q: %c, want %c", word, predicted, got, row[i])
			}
		}
	}
}

// BenchmarkPredictionRecompute20x30 is what one pass adds after a
// StorageClass, StorageProfile or CDI change: 20 goldens on 30 classes, the
// predictor (every pair, both sizes), the snapshot rows and the admission
// parameters (every class again, both sizes).
func BenchmarkPredictionRecompute20x30(b *testing.B) {
	var w clonertest.World
	for i := 0; i < 30; i++ {
		expand := i%3 != 0
		w.Class(fmt.Sprintf("class-%02d", i), nil, clonertest.T0).AllowVolumeExpansion = &expand
	}
	t := &testing.T{}
	for i := 0; i < 20; i++ {
		w.Golden(fmt.Sprintf("%064d", i), clonertest.TestVer)
	}
	inv := fleet.BuildInventory(w.Objects(t), config.Namespaces{config.DefaultGoldenNamespace})
	in := clonertest.CsiCloneForced()
	b.ReportAllocs()
	for b.Loop() {
		p := verdict.BuildPredictor(in, inv)
		s := &ledger.Snapshot{}
		ledger.AddPredictions(s, p)
		if len(s.Paths) != 20*31 || len(publish.AdmissionData(p, config.DefaultGoldenNamespace, predict.GuardRules{})) < 20*30*2 {
			b.Fatalf("%d pairs", len(s.Paths))
		}
	}
}

// TestPendingDiskOnABadPathIsFlaggedBeforeItIsMade: a disk CDI has not made
// yet whose prediction is host-assisted or blocked is what the admission
// guard warns about; a DataVolume made by a controller never shows that
// warning to a person, so the disk carries the finding bad-path-predicted
// (a Warning event and csi_clone_bad_disks) until its verdict is decided.
func TestPendingDiskOnABadPathIsFlaggedBeforeItIsMade(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	w.Class("fixed", nil, clonertest.T0).AllowVolumeExpansion = new(bool)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	rwo, block := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, corev1.PersistentVolumeBlock
	for name, class := range map[string]string{"on-fixed": "fixed", "on-golden-class": clonertest.TestClass, "done-on-fixed": "fixed", "no-class": "no-such-class"} {
		d := w.Worker("tenant-a", name, "p", g, 20*clonertest.Gi, publish.PtrTo(class))
		d.Spec.Storage.AccessModes, d.Spec.Storage.VolumeMode = rwo, &block
		if name == "done-on-fixed" {
			w.Cloned(d, "fixed", "copy", 20*clonertest.Gi, clonertest.TapClone("", 20*clonertest.Gi, 20*clonertest.Gi))
		}
	}
	recs := w.JudgeWithCDI(t, clonertest.T0.Add(time.Minute))
	for name, want := range map[string]bool{"on-fixed": true, "on-golden-class": false, "done-on-fixed": false, "no-class": true} {
		r := recs[name]
		if got := clonertest.ReasonsOf(r)[record.ReasonBadPathPredicted]; got != want {
			t.Errorf("%s: verdict %s, predicted %s (%s), reasons %v; want bad-path-predicted %v", name, r.Verdict, r.Predicted, r.PredictedReason, r.BadReasons(), want)
		}
	}
	r := recs["on-fixed"]
	msg := r.MessageFor(record.ReasonBadPathPredicted)
	if !strings.Contains(msg, predict.PathHostAssisted) || !strings.Contains(msg, predict.ReasonNoVolumeExpansion) ||
		!strings.Contains(msg, predict.Fix(predict.ReasonNoVolumeExpansion)) {
		t.Errorf("on-fixed: message %q does not say the path, the reason and its fix", msg)
	}
	if recs["done-on-fixed"].Verdict != record.VerdictHostAssisted {
		t.Errorf("done-on-fixed: verdict %s, want host-assisted (the verdict speaks once decided)", recs["done-on-fixed"].Verdict)
	}
}

// TestGuardedPathsAreThePolicys: the paths a pending disk is flagged for
// are the ones the shipped policy's CEL refuses, read from the policy.
func TestGuardedPathsAreThePolicys(t *testing.T) {
	b, err := os.ReadFile("../deploy/admission/warn/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`!\(variables\.path in \[([^\]]*)\]\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("policy.yaml: no validation of variables.path in a list")
	}
	var inPolicy []string
	for _, q := range strings.Split(string(m[1]), ",") {
		inPolicy = append(inPolicy, strings.Trim(strings.TrimSpace(q), "'"))
	}
	if fmt.Sprint(inPolicy) != fmt.Sprint(verdict.GuardedPaths) {
		t.Fatalf("the policy refuses paths %q, the cloner flags %q", inPolicy, verdict.GuardedPaths)
	}
}
