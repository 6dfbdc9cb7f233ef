package e2e

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

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
	var expand time.Duration
	for _, st := range rec.Timeline.Steps() {
		if st.Phase == record.PhaseExpand {
			expand = st.Duration
		}
	}
	if expand < expandDelay {
		t.Errorf("timeline %+v (steps %+v): want the driver's %v in expand", rec.Timeline, rec.Timeline.Steps(), expandDelay)
	}
	expandSeries := map[string]string{"phase": record.PhaseExpand, "verdict": record.VerdictCSIClone, "storage_class": "replicated"}
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		s, err := fetchScrape(c)
		if err != nil {
			return false, nil
		}
		n, ok := s.value("csi_clone_phase_duration_seconds", expandSeries)
		return ok && n == 1, nil
	})
	if err != nil {
		t.Fatalf("csi_clone_phase_duration_seconds%v never counted the disk once: %v", expandSeries, err)
	}
	if sum, _ := scrapeSidecar(t, c).sum("csi_clone_phase_duration_seconds", expandSeries); sum < expandDelay.Seconds() {
		t.Errorf("csi_clone_phase_duration_seconds%v sums %v s, want at least the driver's %v", expandSeries, sum, expandDelay)
	}
}
