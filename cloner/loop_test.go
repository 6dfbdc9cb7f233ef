package cloner

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// TestRunVerdictsFollowsChangesAndStopsReportingWhenLeadershipEnds runs the
// real loop: a DataVolume that finishes gets its verdict without a manual
// pass, and the verdict metrics vanish when the loop's context ends.
func TestRunVerdictsFollowsChangesAndStopsReportingWhenLeadershipEnds(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	fc := newFakeCluster(t, &w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Minute))
	ctx := t.Context()
	c := fc.controller(t, ctx, cfg)
	leadCtx, lose := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.RunVerdicts(leadCtx) }()
	eventually(t, "first pass", func() bool { return c.Snapshot().Leader })

	pvc, pv := w.Cloned(dv, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	if _, err := fc.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.kube.CoreV1().PersistentVolumeClaims("tenant-a").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fc.putDV(t, dv)
	eventually(t, "verdict after the change", func() bool {
		return fc.pvc(t, "tenant-a", "d").Annotations[fleet.AnnCloneVerdict] == record.VerdictCSIClone
	})
	lose()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.Snapshot().Leader {
		t.Fatal("a replica that stopped leading still reports verdict metrics")
	}
}

// TestWithoutCDIEvidenceStillRunsAndVerdictsWait: the sidecar sits in the
// CSI data path, so a cluster without CDI must not make it fail.
func TestWithoutCDIEvidenceStillRunsAndVerdictsWait(t *testing.T) {
	fc := newFakeCluster(t, &clonertest.World{})
	fc.kube.Resources = nil // neither CDI nor snapshot CRDs served
	cfg := clonertest.TestConfig()
	cfg.ResyncPeriod = time.Second
	c, err := New(cfg, fc.clients())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	verdicts, evidence := make(chan error, 1), make(chan error, 1)
	go func() { verdicts <- c.RunVerdicts(ctx) }()
	go func() { evidence <- c.RunEvidence(ctx) }()
	c.Observe(createVolume("pvc-1", "ns/c", "", clonertest.Gi, "vol-1", clonertest.T0))
	select {
	case err := <-verdicts:
		t.Fatalf("RunVerdicts returned %v without CDI; it must wait", err)
	case err := <-evidence:
		t.Fatalf("RunEvidence returned %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-verdicts; err != nil {
		t.Fatal(err)
	}
	if err := <-evidence; err != nil {
		t.Fatal(err)
	}
}

func TestRunBeforeStartIsAnError(t *testing.T) {
	c, err := New(clonertest.TestConfig(), newFakeCluster(t, &clonertest.World{}).clients())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RunEvidence(context.Background()); err == nil || !strings.Contains(err.Error(), "Start") {
		t.Fatalf("got %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := clonertest.TestConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*config.Config){
		"--golden-namespace":    func(c *config.Config) { c.GoldenNamespace = "Not_A_Namespace" },
		"--ledger-namespace":    func(c *config.Config) { c.LedgerNamespace = "" },
		"--ledger-name":         func(c *config.Config) { c.LedgerName = "UPPER" },
		"--stuck-after":         func(c *config.Config) { c.StuckAfter = 0 },
		"--resync-period":       func(c *config.Config) { c.ResyncPeriod = -time.Second },
		"--factory-image-bytes": func(c *config.Config) { c.FactoryImageBytes = -1 },
		"--evidence-queue":      func(c *config.Config) { c.EvidenceQueue = 0 },
	} {
		c := good
		mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want a one-line error naming the flag", name, err)
		}
	}
	if _, err := New(good, config.Clients{}); err == nil {
		t.Fatal("New without clients must fail")
	}
}

func TestFetchesCountRestartsOnceStarted(t *testing.T) {
	for _, tc := range []struct {
		phase    cdiv1.DataVolumePhase
		restarts int32
		want     int64
	}{
		{cdiv1.ImportScheduled, 0, 0}, {cdiv1.ImportInProgress, 0, 1}, {cdiv1.ImportInProgress, 2, 3},
		{cdiv1.Succeeded, 1, 2}, {cdiv1.Failed, 0, 1}, {cdiv1.Pending, 1, 2},
	} {
		if got := verdict.ImportFetches(string(tc.phase), tc.restarts); got != tc.want {
			t.Errorf("%s with %d restarts: %d fetches, want %d", tc.phase, tc.restarts, got, tc.want)
		}
	}
}

func TestPassRefusesHalfFilledCaches(t *testing.T) {
	c, err := New(clonertest.TestConfig(), newFakeCluster(t, &clonertest.World{}).clients())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Pass(context.Background()); err == nil {
		t.Fatal("a pass before Start/sync must be refused")
	}
}

func TestReportConfigNeedsNoLedgerNamespace(t *testing.T) {
	c := config.DefaultConfig() // no POD_NAMESPACE outside the pod
	if err := c.ValidateReport(); err != nil {
		t.Fatal(err)
	}
	c.GoldenNamespace = "Bad"
	if err := c.ValidateReport(); err == nil || !strings.Contains(err.Error(), "--golden-namespace") {
		t.Fatalf("got %v", err)
	}
}

// TestADeletedBareClaimWakesTheVerdictLoop: with no resync due for an hour,
// a bare claim's deletion is judged at once (the claim's own event wakes
// the loop), not at the next resync.
func TestADeletedBareClaimWakesTheVerdictLoop(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	for _, name := range []string{"kept", "deleted"} {
		w.BareClaim("tenant-a", name, g, 20*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 20*clonertest.Gi, 20*clonertest.Gi))
	}
	fc := newFakeCluster(t, &w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	cfg.ResyncPeriod = time.Hour
	c, err := New(cfg, fc.clients())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	c.Start(ctx)
	done := make(chan error, 1)
	go func() { done <- c.RunVerdicts(ctx) }()
	disks := func() int {
		n := 0
		for _, d := range c.Snapshot().Disks {
			n += d.Count
		}
		return n
	}
	eventually(t, "both bare claims judged", func() bool { return disks() == 2 })
	// Let the passes the verdict writes' echoes ask for run out: no pass
	// for three times minPassInterval.
	last, quietSince := c.Snapshot().Passes, time.Now()
	eventually(t, "the loop quiet", func() bool {
		if p := c.Snapshot().Passes; p != last {
			last, quietSince = p, time.Now()
		}
		return time.Since(quietSince) > 3*minPassInterval
	})
	if err := fc.kube.CoreV1().PersistentVolumeClaims("tenant-a").Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted bare claim gone from the metrics before any resync", func() bool { return disks() == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
