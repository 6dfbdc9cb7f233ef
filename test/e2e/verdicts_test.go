package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The verdict tests run the sidecar binary with its cloner on the loopback
// stack and assert only what an operator sees: the verdict annotations on
// worker PVCs, Warning events on DataVolumes, the scraped metrics and the
// report.

const (
	verdictTenant = "tenant-verdicts"
	// ledgerNS holds the sidecar's ledger ConfigMap: its POD_NAMESPACE.
	ledgerNS   = cluster.NamespaceCSI
	stuckAfter = 20 * time.Second
)

// Flavors of the verdict tests.
var (
	flavorA = strings.Repeat("a1", 32) // imported at once
	flavorB = strings.Repeat("b2", 32) // importing until the Factory recovers
	flavorC = strings.Repeat("c3", 32) // import fails for good (checksum mismatch)
	flavorD = strings.Repeat("d4", 32) // imported, and nothing clones it
)

func verdictCluster(t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	checkNoLeaks(t)
	opts.SidecarArgs = append(opts.SidecarArgs, "--resync-period=2s", "--stuck-after="+stuckAfter.String())
	return cluster.Start(t, opts)
}

// workerCase is one worker disk and what it must become.
type workerCase struct {
	name, pool, flavor, class, size string
	verdict                         string   // expected final verdict
	reasons                         []string // expected bad reasons, exactly
}

// TestVerdictsOnTheLoopbackStack drives one cluster through every verdict
// the csi-clone strategy can produce and checks annotations, events,
// metrics and the report against the cluster's state.
func TestVerdictsOnTheLoopbackStack(t *testing.T) {
	c := verdictCluster(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{
			{Name: "replicated", DefaultVirt: true}, // the goldens' class, the virtualization default
			{Name: "replicated-fixed", Pool: "fixed", NoExpansion: true},
			{Name: "replicated-b", Pool: "b", Default: true}, // same driver, another pool; the Kubernetes default
			{Name: "local", NodeLocal: true},
		},
		// LINSTOR hangs until the caller's deadline; failing at once gives the
		// same verdict sooner and the driver's own words in it.
		DriverArgs: []string{"--node-local-clone=fail"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c.Factory.Fail(flavorB, talosVersion, http.StatusServiceUnavailable)
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavorA, Version: talosVersion, StorageClass: "replicated"})
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavorB, Version: talosVersion, StorageClass: "replicated"})
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavorC, Version: talosVersion, StorageClass: "replicated",
		Checksum: "sha256:" + strings.Repeat("0", 64)})
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavorD, Version: talosVersion, StorageClass: "replicated"})
	waitPhase(t, ctx, c, cluster.NamespaceGolden, cluster.GoldenName(flavorA, talosVersion), cdiv1.Succeeded)
	waitPhase(t, ctx, c, cluster.NamespaceGolden, cluster.GoldenName(flavorD, talosVersion), cdiv1.Succeeded)
	waitPhase(t, ctx, c, cluster.NamespaceGolden, cluster.GoldenName(flavorC, talosVersion), cdiv1.Failed)
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}

	cases := []workerCase{
		{"md0-a", "kubernetes-md0", flavorA, "replicated", "20Gi", record.VerdictCSIClone, nil},
		{"md0-b", "kubernetes-md0", flavorA, "replicated", "20Gi", record.VerdictCSIClone, nil},
		// diskSize equal to the golden's: nothing to expand, nothing missing.
		{"eq-a", "kubernetes-eq", flavorA, "replicated", "6Gi", record.VerdictCSIClone, nil},
		// An empty class is the virtualization default (replicated), not the
		// Kubernetes default (replicated-b).
		{"empty-a", "kubernetes-empty", flavorA, "", "20Gi", record.VerdictCSIClone, nil},
		// A larger target on a class without expansion: CDI copies host-assisted.
		{"fixed-a", "kubernetes-fixed", flavorA, "replicated-fixed", "20Gi", record.VerdictHostAssisted,
			[]string{record.ReasonHostAssisted, record.ReasonClassMismatch}},
		// Another class of the same driver: CDI does not fall back, it asks the
		// driver for a cross-class CSI clone, which this driver (like LINSTOR
		// between two replicated pools) performs. The clone is real; the
		// mismatch is still flagged.
		{"other-a", "kubernetes-other", flavorA, "replicated-b", "20Gi", record.VerdictCSIClone,
			[]string{record.ReasonClassMismatch}},
		// A node-local pool cannot hold a clone of a volume it does not have:
		// the driver refuses, CDI retries for ever, the sidecar says stuck.
		{"local-a", "kubernetes-local", flavorA, "local", "20Gi", record.VerdictStuck,
			[]string{record.ReasonStuck, record.ReasonClassMismatch}},
		// A golden that failed to import: the worker waits for ever, flagged.
		{"failed-a", "kubernetes-failed", flavorC, "replicated", "20Gi", record.VerdictPending,
			[]string{record.ReasonFailedGolden}},
	}
	for _, w := range cases {
		createWorker(t, ctx, c, w)
	}
	createWorker(t, ctx, c, workerCase{name: "late-a", pool: "kubernetes-late", flavor: flavorB, class: "replicated", size: "20Gi"})
	createHTTPWorker(t, ctx, c, "http-a", "kubernetes-http", c.Factory.URL(flavorA, talosVersion))

	for _, w := range cases {
		rec := waitVerdict(t, ctx, c, verdictTenant, w.name, w.verdict, 4*time.Minute)
		assertReasons(t, w.name, rec, w.reasons)
		assertWarnings(t, ctx, c, w.name, w.reasons)
		t.Logf("%s: %s from %s (%s): %s", w.name, rec.Verdict, rec.Source, rec.ContentSource, rec.Message)
	}
	checkCloneEvidence(t, ctx, c)
	checkLateGolden(t, ctx, c)
	if rec := waitVerdict(t, ctx, c, verdictTenant, "http-a", record.VerdictHTTPImport, 2*time.Minute); rec.SchematicID != flavorA {
		t.Errorf("http-a: flavor %q, want %q", rec.SchematicID, flavorA)
	}
	// Counters catch up within a pass or two of the last verdict.
	waitMetrics(t, ctx, c, func(s scrape) error { return checkCounters(s, c) })
	checkStateMetrics(t, scrapeSidecar(t, c))
	checkReport(t, ctx, c)
	checkSecondLeaderCountsNothing(t, ctx, c)
}

// checkCloneEvidence: the good clones carry the storage layer's proof.
func checkCloneEvidence(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	_, gpv, err := c.WaitPVCBound(ctx, cluster.NamespaceGolden, cluster.GoldenName(flavorA, talosVersion), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"md0-a", "md0-b", "eq-a", "empty-a"} {
		// The tap's evidence lands on the PV long before CDI finishes, so the
		// verdict is the storage layer's; allow a pass for the annotation.
		rec := waitRecord(t, ctx, c, verdictTenant, name, 30*time.Second, "judged from the tap",
			func(r *record.Record) bool { return r.Source == record.SourceCSITap })
		if rec.ContentSource != "volume:"+gpv.Spec.CSI.VolumeHandle {
			t.Errorf("%s: content source %s, want the golden's volume %s", name, rec.ContentSource, gpv.Spec.CSI.VolumeHandle)
		}
		if name == "empty-a" && rec.Class != "replicated" {
			t.Errorf("empty-a: class resolved to %q, want replicated (the virtualization default)", rec.Class)
		}
		if want := resource.MustParse("20Gi"); name != "eq-a" && rec.CapacityBytes < want.Value() {
			t.Errorf("%s: capacity %d, want the 20Gi diskSize", name, rec.CapacityBytes)
		}
	}
	if rec := readRecord(t, ctx, c, verdictTenant, "fixed-a"); rec.FallbackReason == "" || !strings.Contains(rec.Message, rec.FallbackReason) {
		t.Errorf("fixed-a: CDI's fallback reason %q missing from %q", rec.FallbackReason, rec.Message)
	}
	// The driver's refusal reaches the record through the PVC annotation the
	// evidence loop writes; give it a pass or two.
	waitRecord(t, ctx, c, verdictTenant, "local-a", time.Minute, "stuck with the driver's error", func(r *record.Record) bool {
		return r.Verdict == record.VerdictStuck && r.DriverError != "" && strings.Contains(r.Message, r.DriverError)
	})
}

// checkLateGolden: while its golden imports the worker is pending and
// nothing warns; once the Factory recovers it becomes a csi-clone.
func checkLateGolden(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	golden := cluster.GoldenName(flavorB, talosVersion)
	if _, err := c.WaitDataVolume(ctx, cluster.NamespaceGolden, golden, 2*time.Minute, func(dv *cdiv1.DataVolume) (bool, error) {
		return dv.Status.RestartCount >= 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	if rec := waitVerdict(t, ctx, c, verdictTenant, "late-a", record.VerdictPending, time.Minute); len(rec.BadReasons()) != 0 {
		t.Errorf("late-a while its golden imports: %v", rec.BadReasons())
	}
	assertWarnings(t, ctx, c, "late-a", nil)
	c.Factory.Fail(flavorB, talosVersion, 0)
	waitPhase(t, ctx, c, cluster.NamespaceGolden, golden, cdiv1.Succeeded)
	rec := waitVerdict(t, ctx, c, verdictTenant, "late-a", record.VerdictCSIClone, 4*time.Minute)
	assertReasons(t, "late-a", rec, nil)
	assertWarnings(t, ctx, c, "late-a", nil)
}

// checkCounters compares the ledger's counters with what really happened.
func checkCounters(s scrape, c *cluster.Cluster) error {
	a := map[string]string{"schematic_id": flavorA, "version": talosVersion}
	b := map[string]string{"schematic_id": flavorB, "version": talosVersion}
	// Every clone of A that finished avoided one fetch, host-assisted included.
	if got, _ := s.value("csi_clone_factory_fetches_avoided_total", a); got != 6 {
		return fmt.Errorf("fetches avoided for A = %v, want 6", got)
	}
	gi6 := resource.MustParse("6Gi")
	if got, _ := s.value("csi_clone_factory_bytes_avoided_total", a); got != 6*float64(gi6.Value()) {
		return fmt.Errorf("bytes avoided for A = %v, want 6 x 6Gi", got)
	}
	// Fetches counted = fetches the Factory served, retries included.
	d := map[string]string{"schematic_id": flavorD, "version": talosVersion}
	for flavor, labels := range map[string]map[string]string{flavorA: a, flavorB: b, flavorD: d} {
		golden, _ := s.value("csi_clone_factory_fetches_total", with(labels, "kind", ledger.FetchGoldenImport))
		worker, _ := s.value("csi_clone_factory_fetches_total", with(labels, "kind", ledger.FetchWorkerImport))
		if served := c.Factory.Fetches(flavor, talosVersion); golden+worker != float64(served) {
			return fmt.Errorf("flavor %s: %v golden + %v worker fetches counted, the Factory served %d", flavor[:4], golden, worker, served)
		}
	}
	if got, _ := s.value("csi_clone_factory_fetches_avoided_total", b); got != 1 {
		return fmt.Errorf("fetches avoided for B = %v, want 1", got)
	}
	return nil
}

// checkStateMetrics: gauges that mirror the cluster.
func checkStateMetrics(t *testing.T, s scrape) {
	t.Helper()
	if got, _ := s.value("csi_clone_bad_disks", map[string]string{"reason": record.ReasonHostAssisted}); got != 1 {
		t.Errorf("bad disks host-assisted = %v, want 1", got)
	}
	if got, _ := s.value("csi_clone_bad_disks", map[string]string{"reason": record.ReasonStuck}); got != 1 {
		t.Errorf("bad disks stuck = %v, want 1", got)
	}
	for _, pool := range []string{"kubernetes-md0", "kubernetes-eq", "kubernetes-empty", "kubernetes-late", "kubernetes-http"} {
		if got, ok := s.value("csi_clone_bad_disks", map[string]string{"pool": pool}); ok {
			t.Errorf("good pool %s has bad-disk series (%v)", pool, got)
		}
	}
	failed := map[string]string{"name": cluster.GoldenName(flavorC, talosVersion), "phase": "Failed", "storage_class": "replicated"}
	if got, _ := s.value("csi_clone_golden_info", failed); got != 1 {
		t.Errorf("failed golden not shown as Failed in csi_clone_golden_info")
	}
	if got, _ := s.value("csi_clone_golden_consumers", map[string]string{"schematic_id": flavorA}); got != 7 {
		t.Errorf("consumers of A = %v, want 7", got)
	}
	if got, _ := s.value("csi_clone_worker_disks", map[string]string{"schematic_id": flavorA, "verdict": record.VerdictCSIClone}); got != 5 {
		t.Errorf("csi-clone disks of A = %v, want 5", got)
	}
	if got, _ := s.value("csi_clone_duration_seconds", map[string]string{"verdict": record.VerdictCSIClone}); got != 6 {
		t.Errorf("clone durations observed = %v, want 6 (5 of A, 1 of B)", got)
	}
	// Every decided disk (all but failed-a) had its path predicted first,
	// and every prediction held (test/e2e/predict_test.go covers each path).
	right, _ := s.value("csi_clone_prediction_checks", map[string]string{"result": "right"})
	wrong, _ := s.value("csi_clone_prediction_checks", map[string]string{"result": "wrong"})
	if right != 8 || wrong != 0 {
		t.Errorf("prediction checks right=%v wrong=%v, want 8 and 0", right, wrong)
	}
}

// checkReport asserts `report -o json` against the cluster's own state.
func checkReport(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	var out bytes.Buffer
	cfg := config.DefaultConfig()
	if err := report.Report(ctx, config.Clients{Kube: c.Client, Dynamic: c.Dynamic}, cfg, &out, "json"); err != nil {
		t.Fatal(err)
	}
	var rep report.ReportData
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Ledger != ledgerNS+"/"+config.DefaultLedgerName {
		t.Errorf("report ledger %q", rep.Ledger)
	}
	s := scrapeSidecar(t, c)
	safe := map[string]bool{}
	for _, f := range rep.Flavors {
		labels := map[string]string{"schematic_id": f.SchematicID, "version": f.Version}
		if got, _ := s.value("csi_clone_factory_fetches_avoided_total", labels); float64(f.FetchesAvoided) != got {
			t.Errorf("report: %s avoided %d, metrics %v", f.SchematicID[:4], f.FetchesAvoided, got)
		}
		for _, g := range f.Goldens {
			dv, err := c.DataVolume(ctx, g.Namespace, g.Name)
			if err != nil || string(dv.Status.Phase) != g.Phase {
				t.Errorf("report: golden %s phase %q, cluster %v %v", g.Name, g.Phase, dv, err)
			}
			if g.SafeToDelete != (g.Consumers == 0) {
				t.Errorf("report: golden %s has %d consumers, safeToDelete %v", g.Name, g.Consumers, g.SafeToDelete)
			}
			safe[g.Name] = g.SafeToDelete
		}
	}
	wantSafe := map[string]bool{}
	for _, f := range []string{flavorA, flavorB, flavorC, flavorD} {
		wantSafe[cluster.GoldenName(f, talosVersion)] = f == flavorD
	}
	if fmt.Sprint(safe) != fmt.Sprint(wantSafe) {
		t.Errorf("report: safe to delete %v, want only the unused golden: %v", safe, wantSafe)
	}
	// Per pool (the DataVolume's annotation) the verdicts on the PVCs.
	dvs, err := c.Dynamic.Resource(fleet.DataVolumeGVR).Namespace(verdictTenant).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, dv := range dvs.Items {
		want[dv.GetAnnotations()[fleet.AnnPool]+"/"+readRecord(t, ctx, c, verdictTenant, dv.GetName()).Verdict]++
	}
	got := map[string]int{}
	for _, p := range rep.Pools {
		for v, n := range p.Verdicts {
			got[p.Pool+"/"+v] += n
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("report pools %v, PVC annotations %v", got, want)
	}
	if len(rep.BadDisks) != 4 { // fixed-a, other-a, local-a, failed-a
		t.Errorf("report lists %d bad disks, want 4: %+v", len(rep.BadDisks), rep.BadDisks)
	}
}

// checkSecondLeaderCountsNothing runs a second verdict engine in the test
// process, as a restarted or overlapping leader would be, against the real
// API server: it must leave every counter as it is.
func checkSecondLeaderCountsNothing(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	before := ledgerData(t, ctx, c)
	cfg := config.DefaultConfig()
	cfg.LedgerNamespace = ledgerNS
	ctrl, err := cloner.New(cfg, config.Clients{Kube: c.Client, Dynamic: c.Dynamic})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ctrl.Start(runCtx)
	if err := ctrl.WaitSynced(runCtx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := ctrl.Pass(runCtx); err != nil {
			t.Fatal(err)
		}
	}
	if after := ledgerData(t, ctx, c); after != before {
		t.Errorf("a second leader changed the ledger:\nbefore %s\nafter  %s", before, after)
	}
}

// ledgerData is every object of the ledger, root and shards, as stored.
func ledgerData(t *testing.T, ctx context.Context, c *cluster.Cluster) string {
	t.Helper()
	var out []string
	for _, name := range ledger.LedgerObjectNames(config.DefaultLedgerName) {
		cm, err := c.Client.CoreV1().ConfigMaps(ledgerNS).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && name != config.DefaultLedgerName {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, name+"="+fmt.Sprint(cm.Data))
	}
	return strings.Join(out, "\n")
}

// goldenAndTenant imports flavor A's golden on replicated and creates the
// tenant namespace: where most single-disk tests start.
func goldenAndTenant(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavorA, Version: talosVersion, StorageClass: "replicated"})
	waitPhase(t, ctx, c, cluster.NamespaceGolden, cluster.GoldenName(flavorA, talosVersion), cdiv1.Succeeded)
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}
}

func createGolden(t *testing.T, ctx context.Context, c *cluster.Cluster, g cluster.Golden) {
	t.Helper()
	if _, err := c.CreateGolden(ctx, g); err != nil {
		t.Fatal(err)
	}
}

func createWorker(t *testing.T, ctx context.Context, c *cluster.Cluster, w workerCase) {
	t.Helper()
	if _, err := c.CreateWorkerDisk(ctx, cluster.Worker{Namespace: verdictTenant, Name: w.name, Pool: w.pool,
		Golden: cluster.GoldenName(w.flavor, talosVersion), StorageClass: w.class, Size: w.size}); err != nil {
		t.Fatal(err)
	}
}

// createHTTPWorker creates a worker disk of a pool that does not use the
// golden: it imports its image from the Factory, as before the feature.
func createHTTPWorker(t *testing.T, ctx context.Context, c *cluster.Cluster, name, pool, url string) {
	t.Helper()
	block := corev1.PersistentVolumeBlock
	dv := &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: verdictTenant, Name: name, Annotations: map[string]string{cluster.AnnPool: pool}},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: url}},
			Storage: &cdiv1.StorageSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &block,
				StorageClassName: ptr("replicated"),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}}},
		},
	}
	if _, err := c.CreateDataVolume(ctx, dv); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

func waitPhase(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name string, phase cdiv1.DataVolumePhase) {
	t.Helper()
	if _, err := c.WaitDataVolumePhase(ctx, ns, name, phase, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// readRecord reads the verdict the sidecar persisted on a worker PVC (nil
// while there is none).
func readRecord(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name string) *record.Record {
	t.Helper()
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	raw := pvc.Annotations[fleet.AnnCloneEvidence]
	if raw == "" {
		return nil
	}
	var r record.Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("%s/%s: unreadable %s: %v", ns, name, fleet.AnnCloneEvidence, err)
	}
	if v := pvc.Annotations[fleet.AnnCloneVerdict]; v != r.Verdict {
		t.Fatalf("%s/%s: verdict annotation %q disagrees with the evidence's %q", ns, name, v, r.Verdict)
	}
	return &r
}

// waitVerdict waits until the persisted verdict is want.
func waitVerdict(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name, want string, timeout time.Duration) *record.Record {
	t.Helper()
	return waitRecord(t, ctx, c, ns, name, timeout, "verdict "+want, func(r *record.Record) bool { return r.Verdict == want })
}

// waitRecord waits until the persisted record satisfies ok.
func waitRecord(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name string, timeout time.Duration,
	what string, ok func(*record.Record) bool) *record.Record {
	t.Helper()
	var last *record.Record
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Failed(); err != nil {
			return false, err
		}
		last = readRecord(t, ctx, c, ns, name)
		return last != nil && ok(last), nil
	})
	if err != nil {
		t.Fatalf("%s/%s: never %s: %v (last record: %+v)", ns, name, what, err, last)
	}
	return last
}

func assertReasons(t *testing.T, name string, rec *record.Record, want []string) {
	t.Helper()
	if got := strings.Join(rec.BadReasons(), ","); got != strings.Join(want, ",") {
		t.Errorf("%s: bad reasons %q, want %q (record %+v)", name, got, strings.Join(want, ","), rec)
	}
}

// assertWarnings: exactly one Warning per bad reason on the DataVolume,
// each naming a fix, and nothing else.
func assertWarnings(t *testing.T, ctx context.Context, c *cluster.Cluster, name string, reasons []string) {
	t.Helper()
	want := map[string]int{}
	for _, r := range reasons {
		want[record.EventReason(r)]++
	}
	evs, err := c.Client.CoreV1().Events(verdictTenant).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name != name || e.InvolvedObject.Kind != "DataVolume" || e.Type != corev1.EventTypeWarning ||
			e.Source.Component != "csi-clone-sidecar" {
			continue
		}
		got[e.Reason]++
		if !strings.Contains(e.Message, "Fix: ") {
			t.Errorf("%s: event %s names no fix: %q", name, e.Reason, e.Message)
		}
	}
	// A disk seen pending on a path the guard refuses was warned about
	// before CDI made it, if the sidecar judged it before it finished
	// (TestPendingDiskOnABadPathIsFlaggedBeforeItIsMade, and the admission
	// test, which holds one pending).
	early := record.EventReason(record.ReasonBadPathPredicted)
	if got[early] == 1 && want[early] == 0 {
		if rec := readRecord(t, ctx, c, verdictTenant, name); rec != nil && verdict.GuardRefuses(rec.Predicted) {
			delete(got, early)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: warnings %v, want %v", name, got, want)
	}
}

// scrape is one parsed scrape of the sidecar's metrics endpoint.
type scrape map[string]*dto.MetricFamily

func scrapeSidecar(t *testing.T, c *cluster.Cluster) scrape {
	t.Helper()
	s, err := fetchScrape(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fetchScrape(c *cluster.Cluster) (scrape, error) { return fetchScrapeFrom(c.SidecarMetrics) }

// fetchScrapeFrom scrapes a sidecar's --http-endpoint.
func fetchScrapeFrom(endpoint string) (scrape, error) {
	resp, err := http.Get("http://" + endpoint + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	return scrape(mfs), err
}

// waitMetrics waits until check passes on a fresh scrape.
func waitMetrics(t *testing.T, ctx context.Context, c *cluster.Cluster, check func(scrape) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		s, err := fetchScrape(c)
		if err != nil {
			last = err
			return false, nil
		}
		last = check(s)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("metrics: %v", last)
	}
}

// value sums the series of a family whose labels include want (counters,
// gauges; a histogram's sample count). ok is false when none matches.
// afterMorePasses returns a scrape taken once the leader has finished n
// more verdict passes than at the first scrape: what a pass would change has
// been changed, so a figure that did not move is settled, not late. A new
// leader (its count starts again) restarts the count.
func afterMorePasses(t *testing.T, ctx context.Context, n int, scrapeOf func() (scrape, error)) scrape {
	t.Helper()
	passes := func(s scrape) float64 { v, _ := s.value("csi_clone_verdict_passes_total", nil); return v }
	var first, last scrape
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
		s, err := scrapeOf()
		if err != nil {
			return false, nil
		}
		if first == nil || passes(s) < passes(first) {
			first = s
			return false, nil
		}
		last = s
		return passes(s) >= passes(first)+float64(n), nil
	})
	if err != nil {
		t.Fatalf("the leader did not finish %d more verdict passes: %v", n, err)
	}
	return last
}

func (s scrape) value(name string, want map[string]string) (float64, bool) {
	mf := s[name]
	if mf == nil {
		return 0, false
	}
	var sum float64
	ok := false
	for _, m := range mf.Metric {
		if !hasLabels(m, want) {
			continue
		}
		ok = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, ok
}

// sum is the sum of the observations of the histograms matching want.
func (s scrape) sum(name string, want map[string]string) (float64, bool) {
	var sum float64
	ok := false
	for _, m := range s[name].GetMetric() {
		if m.Histogram != nil && hasLabels(m, want) {
			sum, ok = sum+m.Histogram.GetSampleSum(), true
		}
	}
	return sum, ok
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.Label {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func with(labels map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range labels {
		out[a] = b
	}
	return out
}

// TestSnapshotStrategyVerdict: with the StorageProfile's strategy set to
// snapshot, CDI snapshots the golden and restores it; the tap sees
// CreateSnapshot of the golden's volume then CreateVolume from that
// snapshot, and the verdict says so.
func TestSnapshotStrategyVerdict(t *testing.T) {
	c := verdictCluster(t, cluster.Options{CloneStrategy: cluster.StrategySnapshot})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	goldenAndTenant(t, ctx, c)
	createWorker(t, ctx, c, workerCase{name: "snap-a", pool: "kubernetes-snap", flavor: flavorA, class: "replicated", size: "20Gi"})
	rec := waitVerdict(t, ctx, c, verdictTenant, "snap-a", record.VerdictSnapshotClone, 4*time.Minute)
	assertReasons(t, "snap-a", rec, nil)
	assertWarnings(t, ctx, c, "snap-a", nil)
	if rec.Source != record.SourceCSITap || !strings.HasPrefix(rec.ContentSource, "snapshot:") || rec.CDICloneType != cluster.StrategySnapshot {
		t.Errorf("snap-a: %+v", rec)
	}
	waitMetrics(t, ctx, c, func(s scrape) error {
		labels := map[string]string{"schematic_id": flavorA, "verdict": record.VerdictSnapshotClone}
		if got, _ := s.value("csi_clone_worker_disks", labels); got != 1 {
			return fmt.Errorf("snapshot-clone disks = %v, want 1", got)
		}
		if got, _ := s.value("csi_clone_factory_fetches_avoided_total", map[string]string{"schematic_id": flavorA}); got != 1 {
			return fmt.Errorf("fetches avoided = %v, want 1", got)
		}
		if _, ok := s.value("csi_clone_bad_disks", nil); ok {
			return fmt.Errorf("bad-disk series for a good snapshot clone")
		}
		return nil
	})
}
