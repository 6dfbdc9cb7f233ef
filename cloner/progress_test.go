package cloner

import (
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// TestProgressRewritesAreSpaced: a pending record that only follows the
// clone's progress is rewritten at most once per progressRewriteAfter, and
// the disk is re-judged when the wait ends; a new verdict, a driver error,
// CDI's clone type or a new bad reason is written at once.
func TestProgressRewritesAreSpaced(t *testing.T) {
	clk := clonertest.NewClock(clonertest.T0)
	cfg := clonertest.TestConfig()
	cfg.Now = clk.Now
	c := &Controller{cfg: cfg, rechecks: map[string]time.Time{}, progressWritten: map[string]time.Time{}}
	const key = "tenant-a/d0"
	written := &record.Record{Verdict: record.VerdictPending, Source: record.SourceNone, Message: "clone in progress (phase CloneScheduled)"}
	if c.deferProgress(key, record.DigestRecord(written), nil) {
		t.Fatal("a disk's first record waited")
	}
	c.noteWritten(key, written)

	moved := *written
	moved.Message, moved.Volume, moved.CloneClaim, moved.CapacityBytes = "clone in progress (phase CSICloneInProgress)", "pvc-1", "cozy-public/tmp-pvc-1", 5<<30
	clk.Set(clonertest.T0.Add(publish.ProgressRewriteAfter - time.Second))
	if !c.deferProgress(key, record.DigestRecord(&moved), record.DigestRecord(written)) {
		t.Fatal("progress within the spacing was written at once")
	}
	if got, want := c.rechecks[key], clonertest.T0.Add(publish.ProgressRewriteAfter); !got.Equal(want) || !c.recheckAt.Equal(want) {
		t.Fatalf("re-judging due at %v (controller %v), want %v", got, c.recheckAt, want)
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
	clk.Set(clonertest.T0.Add(publish.ProgressRewriteAfter))
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
