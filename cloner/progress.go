package cloner

import (
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// deferProgress reports whether the write of rec over old waits: it only
// follows progress and the disk's record was written less than
// progressRewriteAfter ago by this process. The disk is then re-judged when
// the wait ends, so the latest progress is written if nothing else was.
func (c *Controller) deferProgress(key string, rec, old *record.RecordDigest) bool {
	if !publish.ProgressOnly(rec, old) {
		return false
	}
	now := c.cfg.Clock()
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.progressWritten[key]
	if !ok || now.Sub(last) >= publish.ProgressRewriteAfter {
		return false
	}
	due := last.Add(publish.ProgressRewriteAfter)
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
