package publish

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// awaitingEcho reports whether the record d was already written to a claim
// the cache still shows as it was before that write. A disk judged again
// before its write's echo arrives (the informers' initial notifications
// reach the handlers after the caches synced, and under load the claim
// watch lags the writes by seconds) would otherwise be written twice. Once
// the cache shows the claim changed, it is the truth again: whoever changed
// it since, the disk is judged against what it says.
func (w *Writer) awaitingEcho(key string, pvc *corev1.PersistentVolumeClaim, d *record.RecordDigest) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.echoes[key]
	if !ok {
		return false
	}
	if pvc == nil || pvc.ResourceVersion != e.Base {
		delete(w.echoes, key)
		return false
	}
	return e.Same == d.Same
}

// expectEcho notes a record written to a claim as the cache showed it.
func (w *Writer) expectEcho(key string, pvc *corev1.PersistentVolumeClaim, d *record.RecordDigest) {
	w.mu.Lock()
	w.echoes[key] = PendingEcho{Base: pvc.ResourceVersion, Same: d.Same}
	w.mu.Unlock()
}

// echoSeen forgets a disk's pending write once the cache shows its record.
func (w *Writer) echoSeen(key string) {
	w.mu.Lock()
	delete(w.echoes, key)
	w.mu.Unlock()
}
