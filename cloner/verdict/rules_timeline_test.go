package verdict

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// inFlightPhase, from the latest point a clone reached backwards, over
// every combination of the facts it reads: the golden imported or not, a
// volume (the disk's own or CDI's clone's) and its size against the disk, a
// failed expansion, the driver's CreateVolume error, the claim CDI
// provisions (its tmp-pvc; the disk's own claim, even without a data
// source, is no sign).
// Each row's phase is the one record.Phases documents; every phase is some
// row's.
func TestInFlightPhaseOverEveryFact(t *testing.T) {
	seen := map[string]bool{}
	for _, importing := range []bool{false, true} {
		for _, vol := range []string{"none", "clone-small", "clone-whole", "own-whole"} {
			for _, expandFailed := range []bool{false, true} {
				for _, drvErr := range []bool{false, true} {
					for _, claim := range []string{"none", "tmp-pvc", "own-plain"} {
						f := rulesFacts(cdiv1.CloneInProgress)
						f.Pvc.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "VolumeCloneSource", Name: "x"}
						if importing {
							f.golden.Phase = string(cdiv1.ImportInProgress)
						}
						switch claim {
						case "tmp-pvc":
							f.ClonePVC = rulesClaim("cozy-public", "tmp-pvc-uid", 6<<30, nil)
						case "own-plain":
							f.Pvc.Spec.DataSourceRef = nil
						}
						switch vol {
						case "clone-small":
							f.clonePV = rulesPV("pv-tmp", t0, 6<<30)
						case "clone-whole":
							f.clonePV = rulesPV("pv-tmp", t0, 20<<30)
						case "own-whole":
							f.pv = rulesPV("pv-own", t0, 20<<30)
						}
						if expandFailed && vol != "none" {
							f.partial = &fleet.VolumeEvidence{Expansions: []fleet.Expansion{{At: t0, RequiredBytes: 20 << 30, Code: "ResourceExhausted"}}}
						}
						if drvErr {
							f.drvErr = &fleet.DriverError{Method: MethodCreateVolume, Code: "ResourceExhausted", First: t0, Last: t0, Attempts: 2}
						}
						var want string
						switch {
						case importing:
							want = record.PhaseGoldenImport
						case vol != "none" && (expandFailed || vol == "clone-small"):
							want = record.PhaseExpand
						case vol == "clone-small" || vol == "clone-whole":
							want = record.PhaseBind
						case vol == "own-whole":
							want = record.PhaseFinishing
						case drvErr:
							want = record.PhaseCreateVolume
						case claim == "tmp-pvc":
							want = record.PhaseProvisioning
						default:
							want = record.PhasePlanning
						}
						if got := inFlightPhase(f); got != want {
							t.Errorf("importing %v, volume %s, expand failed %v, driver error %v, claim %s: phase %s, want %s",
								importing, vol, expandFailed, drvErr, claim, got, want)
						}
						seen[want] = true
					}
				}
			}
		}
	}
	for _, p := range record.Phases {
		if !seen[p] {
			t.Errorf("no row reaches phase %s", p)
		}
	}
}

// The timeline takes every point from an object's timestamp or the tap's,
// never from the time of the pass: judged at two different times, the
// same facts give the same timeline.
func TestTimelineIsTheObjectsTimes(t *testing.T) {
	f := rulesFacts(cdiv1.Succeeded)
	f.ClonePVC = rulesClaim("cozy-public", "tmp-pvc-uid", 6<<30, nil)
	f.ClonePVC.CreationTimestamp = metav1.NewTime(t0.Add(5 * time.Second))
	refusals := []fleet.Refusal{{At: t0.Add(10 * time.Second), Code: "ResourceExhausted"}, {At: t0.Add(11 * time.Second), Code: "Unavailable"}}
	f.tap = &fleet.VolumeEvidence{FirstAttempt: t0.Add(9 * time.Second), Created: t0.Add(12 * time.Second), Attempts: 3, Refusals: refusals,
		Expansions: []fleet.Expansion{{At: t0.Add(20 * time.Second), Millis: 2500, Code: "ResourceExhausted"}, {At: t0.Add(31 * time.Second), Millis: 1000, Code: "OK"}}}
	f.Disk.BoundSince, f.Disk.ReadySince = t0.Add(35*time.Second), t0.Add(40*time.Second)
	want := record.Timeline{Requested: t0, Claimed: t0.Add(5 * time.Second), FirstCreateVolume: t0.Add(9 * time.Second),
		VolumeCreated: t0.Add(12 * time.Second), CreateVolumeAttempts: 3, Refusals: refusals,
		ExpandRequested: t0.Add(17500 * time.Millisecond), Expanded: t0.Add(31 * time.Second),
		ExpandRefusals: []fleet.Refusal{{At: t0.Add(20 * time.Second), Code: "ResourceExhausted"}}, Bound: t0.Add(35 * time.Second), Ready: t0.Add(40 * time.Second)}
	for _, now := range []time.Time{t0.Add(time.Minute), t0.Add(time.Hour)} {
		r := Judge(f, rulesConfig(), now, nil).Record
		if !reflect.DeepEqual(r.Timeline, want) || r.Phase != "" {
			t.Fatalf("judged at %v: timeline %+v phase %q, want %+v and no phase (finished)", now, r.Timeline, r.Phase, want)
		}
	}
	steps := want.Steps()
	wantSteps := []record.Step{{Phase: record.PhasePlanning, Duration: 5 * time.Second}, {Phase: record.PhaseProvisioning, Duration: 4 * time.Second},
		{Phase: record.PhaseCreateVolume, Duration: 3 * time.Second}, {Phase: record.PhaseExpand, Duration: 19 * time.Second},
		{Phase: record.PhaseBind, Duration: 4 * time.Second}, {Phase: record.PhaseFinishing, Duration: 5 * time.Second}}
	if len(steps) != len(wantSteps) {
		t.Fatalf("steps %+v, want %+v", steps, wantSteps)
	}
	for i := range steps {
		if steps[i] != wantSteps[i] {
			t.Fatalf("steps %+v, want %+v", steps, wantSteps)
		}
	}
	// A point whose object is gone merges its phase into the next one.
	gone := want
	gone.Claimed = time.Time{}
	if s := gone.Steps(); s[0] != (record.Step{Phase: record.PhaseProvisioning, Duration: 9 * time.Second}) {
		t.Fatalf("without the claim: steps %+v, want planning and provisioning together first", s)
	}
}

// CDI deletes its tmp-pvc once the disk is bound: the claim's time then
// comes from the informer's note of it or the disk's persisted record (its
// JSON, or the cache's digest of it), and a disk with neither has none.
func TestTimelineKeepsTheClaimOnceTheTmpPVCIsGone(t *testing.T) {
	claimed := t0.Add(7 * time.Second)
	persisted := record.Record{Verdict: record.VerdictPending, Timeline: record.Timeline{Requested: t0, Claimed: claimed}}
	raw := string(record.MustJSON(persisted))
	digest, err := record.CacheClaim(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Annotations: map[string]string{fleet.AnnCloneEvidence: raw}}})
	if err != nil {
		t.Fatal(err)
	}
	noted := t0.Add(3 * time.Second)
	for _, tc := range []struct {
		name       string
		annotation string
		noted      time.Time // the informer saw the tmp-pvc made (fleet.ClaimTimes)
		want       time.Time
	}{
		{"the record's JSON", raw, time.Time{}, claimed},
		{"the cache's digest", digest.(*corev1.PersistentVolumeClaim).Annotations[fleet.AnnCloneEvidence], time.Time{}, claimed},
		{"no record", "", time.Time{}, time.Time{}},
		// A clone that ends between two passes: no pass saw the tmp-pvc.
		{"no record, the tmp-pvc noted", "", noted, noted},
		{"the record and the tmp-pvc noted", raw, claimed, claimed},
	} {
		f := rulesFacts(cdiv1.Succeeded)
		f.Pvc.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "VolumeCloneSource", Name: "x"}
		f.cloneClaimNoted = tc.noted
		if tc.annotation != "" {
			f.Pvc.Annotations = map[string]string{fleet.AnnCloneEvidence: tc.annotation}
		}
		if got := timelineOf(f).Claimed; !got.Equal(tc.want) {
			t.Errorf("%s: claimed %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The expand phase's refusals are the failed ControllerExpandVolume calls
// before the one that succeeded, the last eight; while none has
// succeeded, every failure so far.
func TestExpandPointsKeepTheFailuresBeforeTheExpansion(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	x := func(s int, code string) fleet.Expansion { return fleet.Expansion{At: at(s), Millis: 500, Code: code} }
	r := func(s int, code string) fleet.Refusal { return fleet.Refusal{At: at(s), Code: code} }
	var ten []fleet.Expansion
	var lastEight []fleet.Refusal
	for i := range 10 {
		ten = append(ten, x(i+1, "Internal"))
		if i >= 2 {
			lastEight = append(lastEight, r(i+1, "Internal"))
		}
	}
	for _, tc := range []struct {
		name     string
		xs       []fleet.Expansion
		expanded time.Time
		refusals []fleet.Refusal
	}{
		{name: "none"},
		{name: "one success", xs: []fleet.Expansion{x(1, "OK")}, expanded: at(1)},
		{name: "failures, then success", xs: []fleet.Expansion{x(1, "ResourceExhausted"), x(2, "Unavailable"), x(3, "OK")},
			expanded: at(3), refusals: []fleet.Refusal{r(1, "ResourceExhausted"), r(2, "Unavailable")}},
		{name: "still failing", xs: []fleet.Expansion{x(1, "ResourceExhausted"), x(2, "Internal")},
			refusals: []fleet.Refusal{r(1, "ResourceExhausted"), r(2, "Internal")}},
		{name: "a failure after the last success", xs: []fleet.Expansion{x(1, "Internal"), x(2, "OK"), x(3, "Internal")},
			expanded: at(2), refusals: []fleet.Refusal{r(1, "Internal")}},
		{name: "two successes", xs: []fleet.Expansion{x(1, "OK"), x(2, "Aborted"), x(3, "OK")},
			expanded: at(3), refusals: []fleet.Refusal{r(2, "Aborted")}},
		{name: "more than eight failures", xs: ten, refusals: lastEight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requested, expanded, refusals := expandPoints(tc.xs)
			var wantRequested time.Time
			if len(tc.xs) > 0 {
				wantRequested = tc.xs[0].At.Add(-500 * time.Millisecond)
			}
			if !requested.Equal(wantRequested) || !expanded.Equal(tc.expanded) || !reflect.DeepEqual(refusals, tc.refusals) {
				t.Fatalf("got requested %v expanded %v refusals %v, want %v %v %v", requested, expanded, refusals, wantRequested, tc.expanded, tc.refusals)
			}
		})
	}
}
