package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

const nodeLocalTenant = "tenant-nodelocal"

// TestNodeLocalVMDiskIsPredictedGuardedAndStuckInWords is cozystack#2908
// end to end: a vm-disk cloned from a vm-default-images golden (on
// "replicated") into "local", a node-local WaitForFirstConsumer class of
// the same driver. Before any such disk exists `report --predict local`
// says blocked (node-local-target); the Deny guard refuses the disk with
// that reason and its fix; the Warn guard admits it with the same words,
// and says the class is not the golden's.
// Once a pod consumes the disk the real kube-scheduler picks the node, CDI
// asks the driver for a cross-pool clone it refuses (as LINSTOR's
// node-local pools do), and after --stuck-after the disk's verdict is
// stuck, quoting the driver's refusal and the scheduler, which gave up
// waiting for the disk to bind (VolumeBinding's bindTimeoutSeconds, set to
// 15 s here).
func TestNodeLocalVMDiskIsPredictedGuardedAndStuckInWords(t *testing.T) {
	checkNoLeaks(t)
	const stuckAfter = 30 * time.Second
	c := cluster.Start(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{
			{Name: "replicated", DefaultVirt: true},
			{Name: "local", NodeLocal: true, WaitForFirstConsumer: true},
		},
		DriverArgs: []string{"--node-local-clone=fail"},
		// The scheduler gives up waiting for the disk to bind after 15 s
		// instead of 10 minutes, and says so: its words come in time.
		SchedulerBindTimeout: 15 * time.Second,
		SidecarArgs: []string{"--resync-period=2s", "--admission-params=true", "--stuck-after=" + stuckAfter.String(),
			"--evidence-grace=3s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	importVMImage(t, ctx, c)
	if err := c.CreateNamespace(ctx, nodeLocalTenant); err != nil {
		t.Fatal(err)
	}
	checkPredictedNodeLocal(t, ctx, c)

	waitAdmissionParams(t, ctx, c, vmGolden+".path.local", predict.PathBlocked+"/"+predict.ReasonNodeLocalTarget)
	a := newAdmissionClient(t, c)
	disk, err := c.VMDiskDataVolume(ctx, cluster.VMDisk{Namespace: nodeLocalTenant, Name: "vm-disk-local", Image: vmImage,
		StorageClass: "local", Size: "10Gi"})
	if err != nil {
		t.Fatal(err)
	}
	want := "CDI will take path blocked (reason node-local-target) for golden " + vmGolden + " on StorageClass local, not a CSI clone. Fix: " +
		predict.Fix(predict.ReasonNodeLocalTarget)
	applyAdmission(t, c, "deny")
	var refusal error
	waitGuard(t, ctx, c, func() (bool, string) {
		_, refusal = a.createDataVolume(ctx, disk.DeepCopy(), false)
		return apierrors.IsInvalid(refusal), fmt.Sprintf("error %v", refusal)
	})
	if !strings.Contains(refusal.Error(), want) {
		t.Errorf("deny mode: refused with %q, want %q", refusal, want)
	}
	applyAdmission(t, c, "warn")
	waitGuard(t, ctx, c, func() (bool, string) {
		w, err := a.createDataVolume(ctx, disk.DeepCopy(), false)
		return err == nil && len(w) > 0, fmt.Sprintf("warnings %q, error %v", w, err)
	})
	warnings, err := a.createDataVolume(ctx, disk.DeepCopy(), true)
	if err != nil {
		t.Fatalf("warn mode refused the disk: %v", err)
	}
	checkMessages(t, "warn mode", warnings, []string{want, "would be on StorageClass local, not on golden " + vmGolden + "'s replicated"})

	launcher := "virt-launcher-vm-disk-local"
	if err := c.CreateConsumer(ctx, nodeLocalTenant, launcher, disk.Name); err != nil {
		t.Fatal(err)
	}
	// The scheduler's first attempt may fail on a conflict with CDI's
	// update of the claim; the words re-read after --stuck-after are its
	// VolumeBinding timeout.
	scheduler := "; the scheduler: FailedScheduling: pod " + launcher + `: running PreBind plugin "VolumeBinding": binding volumes: `
	rec := waitRecord(t, ctx, c, nodeLocalTenant, disk.Name, 3*time.Minute, "stuck with the driver's refusal and the scheduler's words", func(r *record.Record) bool {
		return r.Verdict == record.VerdictStuck && r.DriverError != "" && strings.Contains(r.Message, r.DriverError) &&
			strings.Contains(r.Message, scheduler)
	})
	t.Logf("%s: %s: %s", disk.Name, rec.Verdict, rec.Message)
	if rec.Predicted != predict.PathBlocked || rec.PredictedReason != predict.ReasonNodeLocalTarget {
		t.Errorf("predicted %s/%s, want %s/%s", rec.Predicted, rec.PredictedReason, predict.PathBlocked, predict.ReasonNodeLocalTarget)
	}
	assertReasons(t, disk.Name, rec, []string{record.ReasonStuck, record.ReasonClassMismatch})
}

// checkPredictedNodeLocal: `report --predict local -o json` predicts the
// image golden blocked on the node-local class before any disk exists.
func checkPredictedNodeLocal(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	var out bytes.Buffer
	clients := config.Clients{Kube: c.Client, Dynamic: c.Dynamic}
	if err := report.ReportClonePaths(ctx, clients, config.DefaultConfig(), &out, "json", "local"); err != nil {
		t.Fatal(err)
	}
	var paths []verdict.ClonePathReport
	if err := json.Unmarshal(out.Bytes(), &paths); err != nil {
		t.Fatalf("report --predict local -o json: %v\n%s", err, out.String())
	}
	for _, p := range paths {
		if p.Golden == cluster.NamespaceGolden+"/"+vmGolden {
			if p.Path != predict.PathBlocked || p.Reason != predict.ReasonNodeLocalTarget || p.Image != vmImage {
				t.Errorf("report --predict local: %+v, want %s blocked (%s)", p, vmGolden, predict.ReasonNodeLocalTarget)
			}
			return
		}
	}
	t.Errorf("report --predict local has no row for %s:\n%s", vmGolden, out.String())
}
