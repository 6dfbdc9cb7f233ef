package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

const (
	slowCloneAlert = "CSICloneSlow"
	// slowCloneAfter is the chart's monitoring.alerts.cloneSlowAfterSeconds
	// for this test: its smallest allowed value.
	slowCloneAfter = 60 * time.Second
	// slowCloneFor replaces the alert's `for: 30s` in the rule file, and
	// nothing else (promtool's tests in deploy/monitoring/tests/inflight.yaml
	// check the 30 s).
	slowCloneFor = 5 * time.Second
)

// TestSlowCloneAlertFiresInItsPhaseAndResolves: the driver refuses a
// clone's first seven CreateVolume calls with ResourceExhausted, which
// csi-provisioner retries after 1, 2, 4 ... 64 s: about two minutes in the
// create-volume phase. Prometheus and vmalert, loaded with the chart's rules
// rendered with cloneSlowAfterSeconds=60, see the clone in flight in phase
// create-volume, fire CSICloneSlow while it lasts and resolve it once CDI
// finishes the disk; the disk's record then dates those two minutes in
// create-volume.
func TestSlowCloneAlertFiresInItsPhaseAndResolves(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		DriverArgs:  []string{"--fail-clones=ResourceExhausted:7"},
		SidecarArgs: []string{"--resync-period=2s", "--evidence-grace=3s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rules := ruleFileWithFor(t, chartRuleFile(t, "monitoring.alerts.cloneSlowAfterSeconds=60"), slowCloneAlert, slowCloneFor)
	prom := startPrometheus(t, ctx, c, rules)
	vm := startVictoriaMetrics(t, ctx, c, rules)
	evaluators := map[string]*prometheus{"Prometheus": prom, "vmalert": vm.alerts}

	goldenAndTenant(t, ctx, c)
	holdRuleState(t, ctx, evaluators, slowCloneAlert, "inactive", slowCloneFor+3*promScrape)
	name := "slow-a"
	createWorker(t, ctx, c, workerCase{name: name, pool: "kubernetes-slow", flavor: flavorA, class: "replicated", size: "20Gi"})
	started := time.Now()
	for _, q := range []*prometheus{prom, vm.query} {
		q.waitFor(t, ctx, `count(max by (phase) (csi_clone_in_flight{phase="create-volume"}) > 0)`, 1)
	}
	for name, e := range evaluators {
		waitRuleState(t, ctx, e, slowCloneAlert, "firing")
		t.Logf("%s: %s firing %v after the disk was created", name, slowCloneAlert, time.Since(started).Round(time.Second))
	}
	if firedAfter := time.Since(started); firedAfter < slowCloneAfter {
		t.Errorf("%s fired %v after the disk was created, before its threshold %v", slowCloneAlert, firedAfter, slowCloneAfter)
	}
	rec := waitRecordIn(t, ctx, c, name, "csi-clone", func(r *record.Record) bool { return r.Verdict == record.VerdictCSIClone })
	for name, e := range evaluators {
		waitRuleState(t, ctx, e, slowCloneAlert, "inactive")
		t.Logf("%s: %s resolved %v after the disk was created", name, slowCloneAlert, time.Since(started).Round(time.Second))
	}
	var createVolume time.Duration
	for _, st := range rec.Timeline.Steps() {
		if st.Phase == record.PhaseCreateVolume {
			createVolume = st.Duration
		}
	}
	if createVolume < slowCloneAfter {
		t.Errorf("timeline %+v (steps %+v): want the seven refusals' backoff, over %v, in create-volume", rec.Timeline, rec.Timeline.Steps(), slowCloneAfter)
	}
	checkRefusals(t, rec.Timeline, 7, "ResourceExhausted")
}

// checkRefusals: the timeline names each of n refusals with the driver's
// code, in order, between the first CreateVolume and the one that made the
// volume, and counts n+1 attempts.
func checkRefusals(t *testing.T, tl record.Timeline, n int, code string) {
	t.Helper()
	if tl.CreateVolumeAttempts != n+1 || len(tl.Refusals) != n {
		t.Fatalf("timeline %d attempts, refusals %+v: want %d attempts, %d refusals", tl.CreateVolumeAttempts, tl.Refusals, n+1, n)
	}
	prev := tl.FirstCreateVolume
	for i, r := range tl.Refusals {
		if r.Code != code || r.At.Before(prev) || r.At.After(tl.VolumeCreated) {
			t.Errorf("refusal %d: %+v, want %s after %v and before the volume was made (%v)", i, r, code, prev, tl.VolumeCreated)
		}
		prev = r.At
	}
}

// TestSlowExpandIsTimedInExpand: the driver takes 20 s to answer each
// ControllerExpandVolume. The disk's timeline puts those 20 s in the expand
// phase (from the volume's creation to the expansion's end), and
// csi_clone_phase_duration_seconds counts them there, once.
func TestSlowExpandIsTimedInExpand(t *testing.T) {
	checkNoLeaks(t)
	const expandDelay = 20 * time.Second
	c := cluster.Start(t, cluster.Options{
		DriverArgs:  []string{"--delay=ControllerExpandVolume=" + expandDelay.String()},
		SidecarArgs: []string{"--resync-period=2s", "--evidence-grace=3s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	goldenAndTenant(t, ctx, c)
	createWorker(t, ctx, c, workerCase{name: "expand-a", pool: "kubernetes-expand", flavor: flavorA, class: "replicated", size: "20Gi"})
	rec := waitRecordIn(t, ctx, c, "expand-a", "csi-clone", func(r *record.Record) bool { return r.Verdict == record.VerdictCSIClone })
	// csi-resizer may ask more than once (it did twice in some runs: the
	// claim's resize and a resync); the phase holds the driver's time for
	// all of them, and a few seconds of CDI's and the resizer's own.
	obs, err := c.Observations()
	if err != nil {
		t.Fatal(err)
	}
	var driverTime time.Duration
	for _, o := range obs {
		if o.Method == "/csi.v1.Controller/ControllerExpandVolume" {
			driverTime += o.End.Sub(o.Start)
		}
	}
	checkTimedIn(t, ctx, c, rec, record.PhaseExpand, "replicated", expandDelay, driverTime+15*time.Second)
	// The expansion was asked for once the volume was made, and took the
	// driver's delay at least.
	tl := rec.Timeline
	if tl.ExpandRequested.Before(tl.VolumeCreated.Add(-time.Second)) || tl.Expanded.Sub(tl.ExpandRequested) < expandDelay {
		t.Errorf("timeline %+v: want the expansion requested after the volume was made, %v at least before it ended", tl, expandDelay)
	}
	// CDI binds the disk's claim once it has the whole volume, and declares
	// it ready after (its conditions' times are whole seconds).
	if tl.Bound.IsZero() || tl.Bound.Before(tl.Expanded.Add(-time.Second)) || tl.Ready.Before(tl.Bound) {
		t.Errorf("timeline %+v: want bound after the expansion and before ready", tl)
	}
}

// TestWaitForFirstConsumerIsTimedUntilAPodConsumesIt: golden and worker
// disk on a WaitForFirstConsumer class (the golden asks for an immediate
// bind, as Cozystack's do). CDI makes the clone's claim only once the
// scheduler has picked a node for a pod that mounts the disk, so while no
// such pod exists the clone is in flight in planning, and the disk's
// timeline, and csi_clone_phase_duration_seconds, put that wait there. The
// real kube-scheduler picks the node.
func TestWaitForFirstConsumerIsTimedUntilAPodConsumesIt(t *testing.T) {
	checkNoLeaks(t)
	const consumerAfter = 40 * time.Second
	c := cluster.Start(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{{Name: "replicated-wffc", Pool: "replicated", WaitForFirstConsumer: true}},
		SidecarArgs:    []string{"--resync-period=2s", "--evidence-grace=3s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	createGolden(t, ctx, c, cluster.Golden{SchematicID: flavorA, Version: talosVersion, StorageClass: "replicated-wffc"})
	waitPhase(t, ctx, c, cluster.NamespaceGolden, cluster.GoldenName(flavorA, talosVersion), cdiv1.Succeeded)
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	createWorker(t, ctx, c, workerCase{name: "wffc-a", pool: "kubernetes-wffc", flavor: flavorA, class: "replicated-wffc", size: "20Gi"})
	waitMetrics(t, ctx, c, func(s scrape) error {
		if n, _ := s.value("csi_clone_in_flight", map[string]string{"phase": record.PhasePlanning}); n != 1 {
			return fmt.Errorf(`csi_clone_in_flight{phase="planning"} is %v, want the disk waiting for its consumer`, n)
		}
		return nil
	})
	time.Sleep(consumerAfter)
	if err := c.CreateConsumer(ctx, verdictTenant, "virt-launcher-wffc-a", "wffc-a"); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(created)
	rec := waitRecordIn(t, ctx, c, "wffc-a", "csi-clone", func(r *record.Record) bool { return r.Verdict == record.VerdictCSIClone })
	// Object timestamps are whole seconds; CDI makes the claim and the
	// scheduler picks the node a few seconds after the pod exists.
	checkTimedIn(t, ctx, c, rec, record.PhasePlanning, "replicated-wffc", waited-2*time.Second, waited+10*time.Second)
}

// checkTimedIn: a disk's timeline puts between least and most in phase,
// and csi_clone_phase_duration_seconds counts the disk there once, with at
// least `least`.
func checkTimedIn(t *testing.T, ctx context.Context, c *cluster.Cluster, rec *record.Record, phase, class string, least, most time.Duration) {
	t.Helper()
	var in time.Duration
	for _, st := range rec.Timeline.Steps() {
		if st.Phase == phase {
			in = st.Duration
		}
	}
	t.Logf("timeline steps %+v", rec.Timeline.Steps())
	if in < least || in > most {
		t.Errorf("timeline %+v (steps %+v): want %v to %v in %s, got %v", rec.Timeline, rec.Timeline.Steps(), least, most, phase, in)
	}
	series := map[string]string{"phase": phase, "verdict": record.VerdictCSIClone, "storage_class": class}
	waitMetrics(t, ctx, c, func(s scrape) error {
		if n, _ := s.value("csi_clone_phase_duration_seconds", series); n != 1 {
			return fmt.Errorf("csi_clone_phase_duration_seconds%v counts %v disks, want 1", series, n)
		}
		return nil
	})
	if sum, _ := scrapeSidecar(t, c).sum("csi_clone_phase_duration_seconds", series); sum < least.Seconds() {
		t.Errorf("csi_clone_phase_duration_seconds%v sums %v s, want at least %v", series, sum, least)
	}
}
