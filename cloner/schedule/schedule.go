// Package schedule keeps which worker disks the leader judges next and
// what each was last judged: the DataVolume keys an object change made due,
// the full pass asked for, the rechecks a verdict's own clock asks for (an
// evidence grace ending, a progress write that waits), and the running
// tally of the judged disks that the metrics read without a pass over the
// fleet. It decides nothing and talks to no API server.
package schedule

import (
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// Queue is the leader's judging schedule; safe for concurrent use.
type Queue struct {
	mu        sync.Mutex
	dirty     map[string]bool // DataVolume keys due for judging
	fullDue   bool
	chunk     int // disks judged per pass at most
	judged    map[string]ledger.JudgedDisk
	tally     *ledger.FleetTally   // judged, summed (tally.go)
	rechecks  map[string]time.Time // per disk, see assessment.recheckAt
	recheckAt time.Time            // the earliest of rechecks
}

// New returns an empty Queue that hands out at most chunk keys a pass.
func New(chunk int) *Queue {
	return &Queue{dirty: map[string]bool{}, chunk: chunk, judged: map[string]ledger.JudgedDisk{},
		tally: ledger.NewFleetTally(), rechecks: map[string]time.Time{}}
}

// SetChunk changes how many keys a pass takes at most.
func (q *Queue) SetChunk(n int) {
	q.mu.Lock()
	q.chunk = n
	q.mu.Unlock()
}

// Mark makes DataVolume keys due.
func (q *Queue) Mark(keys ...string) {
	q.mu.Lock()
	for _, k := range keys {
		q.dirty[k] = true
	}
	q.mu.Unlock()
}

// Unmark takes a key off the due set and reports whether it was due.
func (q *Queue) Unmark(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	due := q.dirty[key]
	delete(q.dirty, key)
	return due
}

// MarkFull asks for a pass over every disk.
func (q *Queue) MarkFull() {
	q.mu.Lock()
	q.fullDue = true
	q.mu.Unlock()
}

// FullDue reports whether a full pass is asked for.
func (q *Queue) FullDue() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.fullDue
}

// Take returns at most chunk DataVolume keys due for judging and forgets
// them (a full pass makes every key of all() due), whether a full pass
// began, and whether keys are left due.
func (q *Queue) Take(now time.Time, all func() []string) (keys []string, full, more bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, at := range q.rechecks {
		if !at.After(now) {
			q.dirty[k] = true
			delete(q.rechecks, k)
		}
	}
	full, q.fullDue = q.fullDue, false
	if full {
		for _, k := range all() {
			q.dirty[k] = true
		}
	}
	for k := range q.dirty {
		if len(keys) == q.chunk {
			break
		}
		keys = append(keys, k)
		delete(q.dirty, k)
	}
	return keys, full, len(q.dirty) > 0
}

// Recheck makes a disk due again at a time, unless it is due sooner.
func (q *Queue) Recheck(key string, due time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if at, ok := q.rechecks[key]; !ok || due.Before(at) {
		q.rechecks[key] = due
	}
	if q.recheckAt.IsZero() || due.Before(q.recheckAt) {
		q.recheckAt = due
	}
}

// RecheckAt is when the earliest recheck is due; zero for none.
func (q *Queue) RecheckAt() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.recheckAt
}

// Tally fills s with the judged disks summed and returns each golden's
// consumers.
func (q *Queue) Tally(s *ledger.Snapshot) map[types.NamespacedName]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tally.Fill(s)
	return maps.Clone(q.tally.Consumers)
}

// Remember records what the pass judged of the given keys: a key judged
// no longer (deleted, or no longer a worker disk) is forgotten and returned.
func (q *Queue) Remember(keys []string, ev *verdict.Evaluation) (gone []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, k := range keys {
		if old, ok := q.judged[k]; ok {
			q.tally.Add(old, -1)
			delete(q.judged, k)
		}
		delete(q.rechecks, k)
	}
	for _, a := range ev.Assessments {
		d := a.Disk
		k := d.Namespace + "/" + d.Name
		j := ledger.JudgedDisk{Namespace: d.Namespace, Pool: d.Pool, Kind: d.Kind, GoldenRef: d.GoldenRef,
			Flavor: fleet.Flavor{SchematicID: a.Record.SchematicID, Version: a.Record.Version}, Verdict: a.Record.Verdict,
			BadReasons: a.Record.BadReasons(), Image: a.Golden != nil && a.Golden.IsImage(),
			Key: k, Phase: a.Record.Phase, Requested: a.Record.Timeline.Requested, Ready: a.Record.Timeline.Ready}
		if d.Kind == fleet.DiskClone {
			j.Class = a.Record.Class
		}
		j.PredictionChecked, j.PredictionRight = verdict.CheckPrediction(a.Record)
		if old, ok := q.judged[k]; ok {
			q.tally.Add(old, -1) // judged twice in one pass
		}
		q.judged[k] = j
		q.tally.Add(j, 1)
		if !a.RecheckAt.IsZero() {
			q.rechecks[k] = a.RecheckAt
		}
	}
	for _, k := range keys {
		if _, ok := q.judged[k]; !ok {
			gone = append(gone, k) // the disk is gone
		}
	}
	q.recheckAt = time.Time{}
	for _, at := range q.rechecks {
		if q.recheckAt.IsZero() || at.Before(q.recheckAt) {
			q.recheckAt = at
		}
	}
	return gone
}
