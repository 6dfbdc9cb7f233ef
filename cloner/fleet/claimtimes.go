package fleet

import (
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ClaimTimesKept is how long ClaimTimes keeps a tmp-pvc's creation after a
// newer one was noted: far longer than the verdict pass that dates the
// disk's record with it takes, which keeps it from then on.
const ClaimTimesKept = time.Hour

// ClaimTimes remembers when CDI made each tmp-pvc-<target UID>, by that
// target claim's UID, from the PVC informer's events. A clone that ends
// within the second between two verdict passes (an Immediate class, or a
// WaitForFirstConsumer disk once its pod is scheduled) has its tmp-pvc
// made and deleted before any pass sees it, and that claim's creation is
// the only date of the end of the clone's planning. An entry costs about
// 70 bytes; entries older than ClaimTimesKept before the newest are
// dropped as new ones come (once a minute of creations), so the map holds
// the tmp-pvcs of about the last hour.
type ClaimTimes struct {
	mu sync.Mutex
	at map[types.UID]time.Time
	// pruned is the newest creation the last prune ran at: a prune walks
	// the map, so it runs at most once per claimTimesPruneEvery of
	// creations, not on every new tmp-pvc (the informer's handler).
	pruned time.Time
}

// claimTimesPruneEvery spaces the prunes.
const claimTimesPruneEvery = time.Minute

// NewClaimTimes returns an empty ClaimTimes.
func NewClaimTimes() *ClaimTimes { return &ClaimTimes{at: map[types.UID]time.Time{}} }

// Note keeps the creation time of pvc when it is a tmp-pvc-<UID> (callers
// pass only claims of golden namespaces).
func (c *ClaimTimes) Note(pvc *corev1.PersistentVolumeClaim) {
	uid, ok := strings.CutPrefix(pvc.Name, CdiTmpPVCPrefix)
	if !ok || uid == "" || pvc.CreationTimestamp.IsZero() {
		return
	}
	made := pvc.CreationTimestamp.Time
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at[types.UID(uid)] = made
	if made.Before(c.pruned.Add(claimTimesPruneEvery)) {
		return
	}
	c.pruned = made
	for k, t := range c.at {
		if t.Before(made.Add(-ClaimTimesKept)) {
			delete(c.at, k)
		}
	}
}

// Of is when CDI made the tmp-pvc of the claim with the UID (zero: none
// noted).
func (c *ClaimTimes) Of(target types.UID) time.Time {
	if c == nil {
		return time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[target]
}

// Len is how many tmp-pvcs are remembered.
func (c *ClaimTimes) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}
