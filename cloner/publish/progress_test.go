package publish

import (
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// TestProgressRewritesAreSpaced: a pending record that only follows the
// clone's progress is rewritten at most once per progressRewriteAfter, and
// the disk is re-judged when the wait ends; a new verdict, a driver error,
// CDI's clone type or a new bad reason is written at once.
func TestProgressRewritesAreSpaced(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	rechecks := map[string]time.Time{}
	c := NewWriter(nil, func() time.Time { return now }, func(key string, at time.Time) { rechecks[key] = at })
	const key = "tenant-a/d0"
	written := &record.Record{Verdict: record.VerdictPending, Source: record.SourceNone, Message: "clone in progress (phase CloneScheduled)"}
	if c.deferProgress(key, record.DigestRecord(written), nil) {
		t.Fatal("a disk's first record waited")
	}
	c.noteWritten(key, written)

	moved := *written
	moved.Message, moved.Volume, moved.CloneClaim, moved.CapacityBytes = "clone in progress (phase CSICloneInProgress)", "pvc-1", "cozy-public/tmp-pvc-1", 5<<30
	now = t0.Add(ProgressRewriteAfter - time.Second)
	if !c.deferProgress(key, record.DigestRecord(&moved), record.DigestRecord(written)) {
		t.Fatal("progress within the spacing was written at once")
	}
	if got, want := rechecks[key], t0.Add(ProgressRewriteAfter); !got.Equal(want) {
		t.Fatalf("re-judging due at %v, want %v", got, want)
	}
	for what, change := range map[string]func(r *record.Record){
		"a verdict":        func(r *record.Record) { r.Verdict, r.Message = record.VerdictStuck, "stuck" },
		"a driver error":   func(r *record.Record) { r.DriverError = "CreateVolume ResourceExhausted: pool full" },
		"CDI's clone type": func(r *record.Record) { r.CDICloneType = fleet.CdiCloneTypeHostAssis },
		"a fallback":       func(r *record.Record) { r.FallbackReason = "no volume snapshot class" },
		"a bad reason":     func(r *record.Record) { r.Findings = []record.Finding{{Reason: "class-mismatch", Message: "m"}} },
	} {
		urgent := moved
		change(&urgent)
		if c.deferProgress(key, record.DigestRecord(&urgent), record.DigestRecord(written)) {
			t.Errorf("%s waited for the progress spacing", what)
		}
	}
	now = t0.Add(ProgressRewriteAfter)
	if c.deferProgress(key, record.DigestRecord(&moved), record.DigestRecord(written)) {
		t.Fatal("progress still waits once the spacing has passed")
	}
	if c.deferProgress("tenant-a/other", record.DigestRecord(&moved), record.DigestRecord(written)) {
		t.Fatal("a disk this process never wrote waited")
	}
	decided := moved
	decided.Verdict = record.VerdictCSIClone
	c.noteWritten(key, &decided)
	if _, kept := c.progressWritten[key]; kept {
		t.Fatal("a decided disk is still spaced")
	}
}
