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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The failure tests produce each failure for real, against the real
// cdi-controller, csi-provisioner and csi-resizer and the test driver, and
// check that the verdict tells it at once, in CDI's or the driver's own
// words, everywhere an operator looks: the verdict on the worker PVC, the
// Warning event on the DataVolume, the metrics and `report`.

const (
	// failStuckAfter is long, as in production: every verdict below must
	// come from the definite error, never from waiting this long.
	failStuckAfter = 10 * time.Minute
	// failVerdictWithin bounds each wait; it is far below failStuckAfter.
	failVerdictWithin = 3 * time.Minute
	goldenQuota       = "golden-quota"
)

var (
	flavorT = strings.Repeat("e5", 32) // on the "tight" pool: no room to grow a clone
	flavorG = strings.Repeat("f6", 32) // deleted while its disk waits
)

// failureCase is one failure and what the sidecar must say about it.
type failureCase struct {
	name, pool, flavor, class, size string
	tokenTarget                     string
	verdict                         string
	reasons                         []string
	// words are CDI's or the driver's, and must reach the verdict's message.
	words string
}

func (f failureCase) worker() cluster.Worker {
	return cluster.Worker{Namespace: verdictTenant, Name: f.name, Pool: f.pool, Golden: cluster.GoldenName(f.flavor, talosVersion),
		StorageClass: f.class, Size: f.size, TokenTarget: f.tokenTarget}
}

var (
	// The driver's pool "tight" holds 14Gi: the golden (6Gi) and its clone
	// (6Gi) fit, growing the clone to 20Gi does not.
	resizeCase = failureCase{name: "grow-t", pool: "kubernetes-tight", flavor: flavorT, class: "tight", size: "20Gi",
		verdict: record.VerdictStuck, reasons: []string{record.ReasonStuck, record.ReasonResizeFailed},
		words: "ControllerExpandVolume OutOfRange: pool tight has"}
	// A well-signed token for another disk: CDI's populator refuses it.
	tokenCase = failureCase{name: "token-a", pool: "kubernetes-token", flavor: flavorA, class: "replicated", size: "20Gi",
		tokenTarget: "someone-else", verdict: record.VerdictFailed, reasons: []string{record.ReasonFailed, record.ReasonPredictionWrong},
		words: "(clonePhase Error): invalid token"}
	// diskSize below the golden's 6Gi: CDI's validation refuses the clone.
	smallCase = failureCase{name: "small-a", pool: "kubernetes-small", flavor: flavorA, class: "replicated", size: "4Gi",
		verdict: record.VerdictFailed, reasons: []string{record.ReasonFailed, record.ReasonTooSmall},
		words: "CloneValidationFailed): The clone doesn't meet the validation requirements: target resources requests storage size is smaller than the source"}
	// Its golden is deleted while the disk waits for the golden's import.
	orphanCase = failureCase{name: "orphan-g", pool: "kubernetes-orphan", flavor: flavorG, class: "replicated", size: "20Gi",
		verdict: record.VerdictStuck, reasons: []string{record.ReasonStuck, record.ReasonUnknownGolden},
		words: cluster.GoldenName(flavorG, talosVersion) + " does not exist and no volume was cloned from it yet"}
	// A ResourceQuota in the golden's namespace stops CDI's tmp-pvc there.
	// Both were predicted csi-clone: a failed disk counts against that.
	quotaCase = failureCase{name: "quota-a", pool: "kubernetes-quota", flavor: flavorA, class: "replicated", size: "20Gi",
		verdict: record.VerdictFailed, reasons: []string{record.ReasonFailed, record.ReasonPredictionWrong},
		words: "is forbidden: exceeded quota: " + goldenQuota}
)

// TestFailureVerdicts: one scenario per failure, each on the same stack.
func TestFailureVerdicts(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{{Name: "replicated"}, {Name: "tight"}},
		DriverArgs:     []string{"--capacity=tight=14Gi"},
		// The quota admission needs the quota controller's usage; a deleted
		// golden DataVolume takes its claim with it through the garbage
		// collector, as on any cluster.
		ExtraControllers: []string{"resourcequota-controller", "garbage-collector-controller"},
		SidecarArgs:      []string{"--resync-period=2s", "--stuck-after=" + failStuckAfter.String(), "--evidence-grace=3s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c.Factory.Fail(flavorG, talosVersion, http.StatusServiceUnavailable)
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavorA, Version: talosVersion, StorageClass: "replicated"})
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavorT, Version: talosVersion, StorageClass: "tight"})
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavorG, Version: talosVersion, StorageClass: "replicated"})
	waitPhase(t, ctx, c, cluster.NamespaceGolden, cluster.GoldenName(flavorA, talosVersion), cdiv1.Succeeded)
	waitPhase(t, ctx, c, cluster.NamespaceGolden, cluster.GoldenName(flavorT, talosVersion), cdiv1.Succeeded)
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}
	for _, f := range []failureCase{resizeCase, tokenCase, smallCase, orphanCase} {
		if _, err := c.CreateWorkerDisk(ctx, f.worker()); err != nil {
			t.Fatal(err)
		}
	}
	deleteGoldenUnder(t, ctx, c, orphanCase)

	for _, f := range []failureCase{resizeCase, tokenCase, smallCase, orphanCase} {
		t.Run(f.name, func(t *testing.T) { checkFailure(t, ctx, c, f) })
	}
	t.Run(quotaCase.name, func(t *testing.T) {
		limitGoldenNamespace(t, ctx, c)
		if _, err := c.CreateWorkerDisk(ctx, quotaCase.worker()); err != nil {
			t.Fatal(err)
		}
		checkFailure(t, ctx, c, quotaCase)
	})
	t.Run("runbook", func(t *testing.T) { checkRunbook(t, ctx, c) })
}

// deleteGoldenUnder deletes the golden of f's disk once CDI works on the
// disk (its golden still importing), as a catalog change does, and waits
// until the golden's claim is gone too.
func deleteGoldenUnder(t *testing.T, ctx context.Context, c *cluster.Cluster, f failureCase) {
	t.Helper()
	golden := cluster.GoldenName(f.flavor, talosVersion)
	if _, err := c.WaitDataVolume(ctx, verdictTenant, f.name, time.Minute, func(dv *cdiv1.DataVolume) (bool, error) {
		return dv.Status.Phase != "", nil
	}); err != nil {
		t.Fatal(err)
	}
	if dv, err := c.DataVolume(ctx, cluster.NamespaceGolden, golden); err != nil || dv.Status.Phase == cdiv1.Succeeded {
		t.Fatalf("golden %s should still be importing: %v %v", golden, dv, err)
	}
	bg := metav1.DeletePropagationBackground
	if err := c.Dynamic.Resource(fleet.DataVolumeGVR).Namespace(cluster.NamespaceGolden).Delete(ctx, golden,
		metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Get(ctx, golden, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("the golden's claim outlived its DataVolume: %v", err)
	}
}

// limitGoldenNamespace puts a storage quota on the golden's namespace that
// its goldens already exceed, and waits until the quota controller has
// counted it (the admission refuses nothing before).
func limitGoldenNamespace(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: goldenQuota, Namespace: cluster.NamespaceGolden},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("1Gi")}},
	}
	if _, err := c.Client.CoreV1().ResourceQuotas(q.Namespace).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().ResourceQuotas(q.Namespace).Get(ctx, q.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, counted := got.Status.Used[corev1.ResourceRequestsStorage]
		return counted, nil
	})
	if err != nil {
		t.Fatalf("quota never counted: %v", err)
	}
}

// judged is a disk's verdict as an operator finds it.
type judged struct {
	verdict, message string
	reasons          []string
}

// verdictOf reads the verdict on the disk's PVC; a disk CDI made no claim
// for has its verdict in `report` only.
func verdictOf(t *testing.T, ctx context.Context, c *cluster.Cluster, name string) *judged {
	if rec := readRecord(t, ctx, c, verdictTenant, name); rec != nil {
		return &judged{verdict: rec.Verdict, message: rec.Message, reasons: rec.BadReasons()}
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(verdictTenant).Get(ctx, name, metav1.GetOptions{}); err == nil {
		return nil // a claim that carries no verdict yet
	}
	rep, _ := reportJSON(t, ctx, c)
	for _, b := range rep.BadDisks {
		if b.Namespace == verdictTenant && b.Name == name {
			j := &judged{verdict: b.Verdict, message: b.Reasons[0].Message}
			for _, r := range b.Reasons {
				j.reasons = append(j.reasons, r.Reason)
			}
			return j
		}
	}
	return nil
}

// reportJSON is `report -o json` of the cluster, parsed and as printed.
func reportJSON(t *testing.T, ctx context.Context, c *cluster.Cluster) (report.ReportData, []byte) {
	t.Helper()
	var out bytes.Buffer
	if err := report.Report(ctx, config.Clients{Kube: c.Client, Dynamic: c.Dynamic}, config.DefaultConfig(), &out, "json"); err != nil {
		t.Fatal(err)
	}
	var rep report.ReportData
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep, out.Bytes()
}

// checkFailure asserts what an operator sees of one failure.
func checkFailure(t *testing.T, ctx context.Context, c *cluster.Cluster, f failureCase) {
	var got *judged
	err := wait.PollUntilContextTimeout(ctx, time.Second, failVerdictWithin, true, func(ctx context.Context) (bool, error) {
		got = verdictOf(t, ctx, c, f.name)
		return got != nil && got.verdict == f.verdict && strings.Join(got.reasons, ",") == strings.Join(f.reasons, ","), c.Failed()
	})
	if err != nil {
		t.Fatalf("never verdict %s %v: %v (last: %+v)", f.verdict, f.reasons, err, got)
	}
	t.Logf("%s: %s: %s", f.name, got.verdict, got.message)
	if !strings.Contains(got.message, f.words) {
		t.Errorf("message %q does not carry %q", got.message, f.words)
	}
	assertWarnings(t, ctx, c, f.name, f.reasons)
	checkWarningWords(t, ctx, c, f)
	if f.name == resizeCase.name {
		checkExpandRefusals(t, ctx, c, f)
	}
	waitMetrics(t, ctx, c, func(s scrape) error {
		for _, reason := range f.reasons {
			labels := map[string]string{"namespace": verdictTenant, "pool": f.pool, "reason": reason}
			if got, _ := s.value("csi_clone_bad_disks", labels); got != 1 {
				return fmt.Errorf("csi_clone_bad_disks%v = %v, want 1", labels, got)
			}
		}
		if got, _ := s.value("csi_clone_worker_disks", map[string]string{"verdict": f.verdict}); got < 1 {
			return fmt.Errorf("csi_clone_worker_disks{verdict=%q} = %v", f.verdict, got)
		}
		return nil
	})
	checkReportLines(t, ctx, c, f)
}

// checkExpandRefusals: the disk stuck in its expansion has the driver's
// refusals in its timeline, each with the driver's code, and no expansion.
func checkExpandRefusals(t *testing.T, ctx context.Context, c *cluster.Cluster, f failureCase) {
	t.Helper()
	rec := readRecord(t, ctx, c, verdictTenant, f.name)
	if rec == nil {
		t.Fatalf("%s: no record on its claim", f.name)
	}
	tl := rec.Timeline
	if len(tl.ExpandRefusals) == 0 || !tl.Expanded.IsZero() || tl.ExpandRequested.IsZero() || rec.Phase != record.PhaseExpand {
		t.Fatalf("%s: phase %q, timeline %+v: want refused expansions since expandRequested, none expanded, in phase expand", f.name, rec.Phase, tl)
	}
	for _, r := range tl.ExpandRefusals {
		if r.Code != "OutOfRange" || r.At.Before(tl.ExpandRequested) {
			t.Errorf("%s: expansion refusal %+v: want the driver's OutOfRange after %v", f.name, r, tl.ExpandRequested)
		}
	}
}

// checkWarningWords: the sidecar's Warning for the verdict carries CDI's or
// the driver's words, then the fix; and it was raised from the error, not
// from --stuck-after: before the disk could have been stuck by age.
func checkWarningWords(t *testing.T, ctx context.Context, c *cluster.Cluster, f failureCase) {
	t.Helper()
	evs, err := c.Client.CoreV1().Events(verdictTenant).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := record.EventReason(f.reasons[0])
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == f.name && e.Reason == want && e.Source.Component == "csi-clone-sidecar" {
			if !strings.Contains(e.Message, f.words) || !strings.Contains(e.Message, record.Fix(f.reasons[0])) {
				t.Errorf("event %s: %q lacks %q or the fix", want, e.Message, f.words)
			}
			dv, err := c.DataVolume(ctx, verdictTenant, f.name)
			if err != nil {
				t.Fatal(err)
			}
			if deadline := dv.CreationTimestamp.Add(failStuckAfter); !e.FirstTimestamp.Time.Before(deadline) {
				t.Errorf("%s raised at %s, not before --stuck-after (%s) from the disk's creation at %s",
					want, e.FirstTimestamp, failStuckAfter, dv.CreationTimestamp)
			}
			return
		}
	}
	t.Errorf("no %s event on DataVolume %s", want, f.name)
}

// checkReportLines: `csi-clone-sidecar report` shows one bad-disk line per
// reason, with the disk, the message and the fix.
func checkReportLines(t *testing.T, ctx context.Context, c *cluster.Cluster, f failureCase) {
	t.Helper()
	var out bytes.Buffer
	if err := report.Report(ctx, config.Clients{Kube: c.Client, Dynamic: c.Dynamic}, config.DefaultConfig(), &out, "table"); err != nil {
		t.Fatal(err)
	}
	for _, reason := range f.reasons {
		found := false
		for _, line := range strings.Split(out.String(), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[0] != verdictTenant+"/"+f.name || fields[3] != reason {
				continue
			}
			found = true
			if fields[2] != f.verdict || !strings.Contains(line, record.Fix(reason)) {
				t.Errorf("report line for %s: %q", reason, line)
			}
			if reason == f.reasons[0] && !strings.Contains(line, f.words) {
				t.Errorf("report line %q lacks %q", line, f.words)
			}
		}
		if !found {
			t.Errorf("report has no line for %s %s:\n%s", f.name, reason, out.String())
		}
	}
}
