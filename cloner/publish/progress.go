package publish

import (
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// deferProgress reports whether the write of rec over old waits: it only
// follows progress and the disk's record was written less than
// progressRewriteAfter ago by this process. The disk is then re-judged when
// the wait ends, so the latest progress is written if nothing else was.
func (w *Writer) deferProgress(key string, rec, old *record.RecordDigest) bool {
	if !ProgressOnly(rec, old) {
		return false
	}
	now := w.clock()
	w.mu.Lock()
	last, ok := w.progressWritten[key]
	w.mu.Unlock()
	if !ok || now.Sub(last) >= ProgressRewriteAfter {
		return false
	}
	w.recheck(key, last.Add(ProgressRewriteAfter))
	return true
}

// noteWritten records when a pending record was written; a decided one
// needs no spacing.
func (w *Writer) noteWritten(key string, rec *record.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rec.Verdict == record.VerdictPending {
		w.progressWritten[key] = w.clock()
	} else {
		delete(w.progressWritten, key)
	}
}
