package cloner

import (
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// progressRewriteAfter spaces the rewrites of a record that only follows a
// clone's progress. While CDI moves a clone on (its phase, the volume, the
// temporary claim, the capacity) a pending record changed about seven times
// per disk, and every patch of a PVC wakes every controller that watches
// PVCs: kube-controller-manager, CDI and the kubernetes-csi sidecars in the
// same pod. What an operator acts on is written at once: a new verdict, a
// new bad reason, a driver error, CDI's clone type and fallback reason.
const progressRewriteAfter = 30 * time.Second

// progressOnly reports whether rec, pending like old, differs from it only
// in how far the clone has got.
func progressOnly(rec, old *record.RecordDigest) bool {
	if old == nil || rec.Verdict != record.VerdictPending || old.Verdict != record.VerdictPending {
		return false
	}
	return rec.ProgressFree == old.ProgressFree
}

// deferProgress reports whether the write of rec over old waits: it only
// follows progress and the disk's record was written less than
// progressRewriteAfter ago by this process. The disk is then re-judged when
// the wait ends, so the latest progress is written if nothing else was.
func (c *Controller) deferProgress(key string, rec, old *record.RecordDigest) bool {
	if !progressOnly(rec, old) {
		return false
	}
	now := c.cfg.Clock()
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.progressWritten[key]
	if !ok || now.Sub(last) >= progressRewriteAfter {
		return false
	}
	due := last.Add(progressRewriteAfter)
	if at, ok := c.rechecks[key]; !ok || due.Before(at) {
		c.rechecks[key] = due
	}
	if c.recheckAt.IsZero() || due.Before(c.recheckAt) {
		c.recheckAt = due
	}
	return true
}

// noteWritten records when a pending record was written; a decided one
// needs no spacing.
func (c *Controller) noteWritten(key string, rec *record.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rec.Verdict == record.VerdictPending {
		c.progressWritten[key] = c.cfg.Clock()
	} else {
		delete(c.progressWritten, key)
	}
}
