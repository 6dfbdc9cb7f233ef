package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// TestRetriedCreateVolumeErrorsAreNotStuck: the driver answers a clone's
// first three CreateVolume calls with ResourceExhausted, a code the
// kubernetes-csi sidecars retry (external-resizer's IsFinalError), then
// clones. The real csi-provisioner retries, CDI finishes, and the disk ends
// csi-clone without ever having been stuck: the tap saw the four attempts,
// and the DataVolume carries no Warning at all (a stuck verdict's
// CloneStuck would have been raised before the csi-clone record was
// written).
func TestRetriedCreateVolumeErrorsAreNotStuck(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		DriverArgs:  []string{"--fail-clones=ResourceExhausted:3"},
		SidecarArgs: []string{"--resync-period=2s", "--stuck-after=" + failStuckAfter.String(), "--evidence-grace=3s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	goldenAndTenant(t, ctx, c)
	name := "retried-a"
	createWorker(t, ctx, c, workerCase{name: name, pool: "kubernetes-retried", flavor: flavorA, class: "replicated", size: "20Gi"})
	rec := waitRecordIn(t, ctx, c, name, "csi-clone", func(r *record.Record) bool { return r.Verdict == record.VerdictCSIClone })
	if len(rec.BadReasons()) != 0 {
		t.Errorf("csi-clone with bad reasons %v: %q", rec.BadReasons(), rec.Message)
	}
	pv := claimVolume(t, ctx, c, verdictTenant, name)
	var ev fleet.VolumeEvidence
	if err := json.Unmarshal([]byte(pv.Annotations[fleet.AnnCSIEvidence]), &ev); err != nil {
		t.Fatalf("evidence on %s: %v", pv.Name, err)
	}
	if ev.Attempts != 4 {
		t.Errorf("the tap saw %d CreateVolume attempts, want 4 (three ResourceExhausted, then the clone)", ev.Attempts)
	}
	assertRetriesInCreateVolume(t, rec, ev)
	assertWarnings(t, ctx, c, name, nil)
}

// assertRetriesInCreateVolume: the disk's timeline puts the driver's
// refusals in the create-volume phase, exactly from the first attempt to
// the volume's creation as the tap saw them, after the claim was made and
// before the disk was ready (issue 36's timeline).
func assertRetriesInCreateVolume(t *testing.T, rec *record.Record, ev fleet.VolumeEvidence) {
	t.Helper()
	tl := rec.Timeline
	if !tl.FirstCreateVolume.Equal(ev.FirstAttempt) || !tl.VolumeCreated.Equal(ev.Created) {
		t.Errorf("timeline %+v: create-volume from %v to %v, want the tap's %v to %v", tl, tl.FirstCreateVolume, tl.VolumeCreated, ev.FirstAttempt, ev.Created)
	}
	var createVolume time.Duration
	for _, st := range tl.Steps() {
		if st.Phase == record.PhaseCreateVolume {
			createVolume = st.Duration
		}
	}
	// csi-provisioner retries after 1 s, 2 s and 4 s (--retry-interval-start 1s, doubling).
	// Ready is CDI's condition time, whole seconds.
	if createVolume < 3*time.Second || tl.Requested.IsZero() || tl.Ready.Add(time.Second).Before(tl.VolumeCreated) {
		t.Errorf("timeline %+v (steps %+v): want the three refusals' backoff, at least 3 s, in create-volume, between the request and ready",
			tl, tl.Steps())
	}
	if rec.Phase != "" {
		t.Errorf("a finished disk's record still names phase %q", rec.Phase)
	}
}
