package cloner

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// awaitingEcho reports whether the record d was already written to a claim
// the cache still shows as it was before that write. A disk judged again
// before its write's echo arrives (the informers' initial notifications
// reach the handlers after the caches synced, and under load the claim
// watch lags the writes by seconds) would otherwise be written twice. Once
// the cache shows the claim changed, it is the truth again: whoever changed
// it since, the disk is judged against what it says.
func (c *Controller) awaitingEcho(key string, pvc *corev1.PersistentVolumeClaim, d *record.RecordDigest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.echoes[key]
	if !ok {
		return false
	}
	if pvc == nil || pvc.ResourceVersion != e.Base {
		delete(c.echoes, key)
		return false
	}
	return e.Same == d.Same
}

// expectEcho notes a record written to a claim as the cache showed it.
func (c *Controller) expectEcho(key string, pvc *corev1.PersistentVolumeClaim, d *record.RecordDigest) {
	c.mu.Lock()
	c.echoes[key] = publish.PendingEcho{Base: pvc.ResourceVersion, Same: d.Same}
	c.mu.Unlock()
}

// echoSeen forgets a disk's pending write once the cache shows its record.
func (c *Controller) echoSeen(key string) {
	c.mu.Lock()
	delete(c.echoes, key)
	c.mu.Unlock()
}
