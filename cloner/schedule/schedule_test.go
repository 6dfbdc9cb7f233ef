package schedule

import (
	"slices"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

var t0 = time.Date(2026, 11, 8, 12, 0, 0, 0, time.UTC)

// TestTakeHandsOutChunksAndDueRechecks: a pass takes at most a chunk of
// the due keys, a full pass makes every key due, and a recheck becomes due
// at its time, not before.
func TestTakeHandsOutChunksAndDueRechecks(t *testing.T) {
	q := New(2)
	all := func() []string { return []string{"ns/a", "ns/b", "ns/c"} }
	q.MarkFull()
	var seen []string
	keys, full, more := q.Take(t0, all)
	if !full || !more || len(keys) != 2 {
		t.Fatalf("first take: keys %v full %v more %v; want 2 keys of a full pass, more due", keys, full, more)
	}
	seen = append(seen, keys...)
	keys, full, more = q.Take(t0, all)
	if full || more || len(keys) != 1 {
		t.Fatalf("second take: keys %v full %v more %v; want the last key", keys, full, more)
	}
	seen = append(seen, keys...)
	slices.Sort(seen)
	if !slices.Equal(seen, all()) {
		t.Fatalf("a full pass took %v, want every key once", seen)
	}
	q.Recheck("ns/a", t0.Add(time.Minute))
	q.Recheck("ns/a", t0.Add(2*time.Minute)) // later: the earlier stays
	if at := q.RecheckAt(); !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("recheck at %v, want the earliest", at)
	}
	if keys, _, _ := q.Take(t0.Add(59*time.Second), all); len(keys) != 0 {
		t.Fatalf("took %v before the recheck was due", keys)
	}
	if keys, _, _ := q.Take(t0.Add(time.Minute), all); !slices.Equal(keys, []string{"ns/a"}) {
		t.Fatalf("took %v when the recheck came, want ns/a", keys)
	}
}

// TestRememberTalliesEachDiskOnceAndReturnsTheGone: a disk judged again
// replaces its old tally entry, a key no longer judged is returned as
// gone, and the earliest recheck is the assessments'.
func TestRememberTalliesEachDiskOnceAndReturnsTheGone(t *testing.T) {
	q := New(10)
	disk := func(name string) *fleet.WorkerDisk {
		return &fleet.WorkerDisk{Namespace: "ns", Name: name, Kind: fleet.DiskClone}
	}
	judged := func(name, v string, recheck time.Time) verdict.Assessment {
		return verdict.Assessment{Disk: disk(name), Record: &record.Record{Verdict: v}, RecheckAt: recheck}
	}
	ev := &verdict.Evaluation{Assessments: []verdict.Assessment{
		judged("a", record.VerdictPending, t0.Add(time.Hour)), judged("b", record.VerdictCSIClone, time.Time{})}}
	if gone := q.Remember([]string{"ns/a", "ns/b"}, ev); len(gone) != 0 {
		t.Fatalf("gone %v after judging both", gone)
	}
	ev = &verdict.Evaluation{Assessments: []verdict.Assessment{judged("a", record.VerdictCSIClone, time.Time{})}}
	if gone := q.Remember([]string{"ns/a", "ns/b"}, ev); !slices.Equal(gone, []string{"ns/b"}) {
		t.Fatalf("gone %v, want ns/b (no longer judged)", gone)
	}
	if at := q.RecheckAt(); !at.IsZero() {
		t.Fatalf("recheck at %v after a judging that asked for none", at)
	}
	var s ledger.Snapshot
	q.Tally(&s)
	if len(s.Disks) != 1 || s.Disks[0].Verdict != record.VerdictCSIClone || s.Disks[0].Count != 1 {
		t.Fatalf("tallied %+v, want one csi-clone disk", s.Disks)
	}
}
