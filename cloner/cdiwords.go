package cloner

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// What CDI says in Warning events about a clone that does not finish. Some
// of its reasons live only there: a pod using the golden makes CDI hold
// the clone with a CloneSourceInUse Warning on the target claim
// (clone/common.go IsSourceClaimReady), and CDI copies the tmp-pvc's events
// (the external-provisioner's, the resizer's) onto the target claim
// prefixed "[tmp-pvc-<uid>] : " (common/util.go CopyEvents). There is no
// events informer (a fleet's events would cost more memory than the rest of
// the cache): the events of a disk's DataVolume, its claim and its tmp-pvc
// are listed, by involvedObject.uid, only when the disk is about to be
// judged stuck by age, and again once those words are --stuck-after old.

const (
	// maxHeardEvents is how many distinct Warning events a verdict quotes.
	maxHeardEvents = 3
	// eventListLimit bounds one object's events listed.
	eventListLimit = 100
	// maxHearingsPerPass bounds the disks whose events one pass lists (up
	// to three lists each); the rest wait a pass, still pending.
	maxHearingsPerPass = 50
)

// heardEvent is one of CDI's Warning events, as the verdict quotes it.
type heardEvent struct{ Reason, Message string }

// heardWords are the Warning events read for one disk, and when.
type heardWords struct {
	uid    types.UID // the DataVolume's: a re-created disk is heard afresh
	events []heardEvent
	at     time.Time
}

// hearing tells judge what was heard of a disk: known is false until its
// events were read, stale once they should be read again.
type hearing struct {
	events       []heardEvent
	known, stale bool
}

// hearingOf is the controller's record of what it heard of a disk.
func (c *Controller) hearingOf(now time.Time) func(d *fleet.WorkerDisk) hearing {
	return func(d *fleet.WorkerDisk) hearing {
		c.mu.Lock()
		h, ok := c.heard[d.Namespace+"/"+d.Name]
		c.mu.Unlock()
		if !ok || h.uid != d.UID {
			return hearing{}
		}
		return hearing{events: h.events, known: true, stale: now.Sub(h.at) >= c.cfg.StuckAfter}
	}
}

// hearCDI reads the Warning events of the disks judge asked to hear (up to
// maxHearingsPerPass), then judges them again with CDI's words; a disk no
// longer stuck is forgotten.
func (c *Controller) hearCDI(ctx context.Context, ev *evaluation, now time.Time) {
	n := 0
	for i := range ev.assessments {
		a := &ev.assessments[i]
		if !a.hear {
			continue
		}
		if n == maxHearingsPerPass {
			if a.record.Verdict != record.VerdictStuck {
				a.recheckAt = now.Add(minPassInterval) // not heard yet: soon
			}
			continue
		}
		n++
		f := ev.factsOf(a.disk)
		h := heardWords{uid: a.disk.UID, events: c.readWarnings(ctx, f), at: now}
		c.mu.Lock()
		c.heard[a.disk.Namespace+"/"+a.disk.Name] = h
		c.mu.Unlock()
		*a = judge(ev.factsOf(a.disk), c.cfg, now, ev.inv.SnapshotOf)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range ev.assessments {
		if a.record.Verdict != record.VerdictStuck {
			delete(c.heard, a.disk.Namespace+"/"+a.disk.Name)
		}
	}
}

// readWarnings lists the Warning events on a disk's DataVolume, claim and
// tmp-pvc, not the sidecar's own: the latest distinct ones, newest first.
// A failed list leaves its object's events out; the verdict does not wait.
func (c *Controller) readWarnings(ctx context.Context, f diskFacts) []heardEvent {
	type object struct {
		ns  string
		uid types.UID
	}
	objs := []object{{f.disk.Namespace, f.disk.UID}}
	for _, pvc := range []*corev1.PersistentVolumeClaim{f.pvc, f.clonePVC} {
		if pvc != nil && pvc.UID != "" {
			objs = append(objs, object{pvc.Namespace, pvc.UID})
		}
	}
	var all []corev1.Event
	for _, o := range objs {
		if o.uid == "" {
			continue
		}
		sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.uid", string(o.uid)),
			fields.OneTermEqualSelector("type", corev1.EventTypeWarning))
		list, err := c.clients.Kube.CoreV1().Events(o.ns).List(ctx, metav1.ListOptions{FieldSelector: sel.String(), Limit: eventListLimit})
		if err != nil {
			klog.V(2).InfoS("Cannot read CDI's events on a stuck disk", "namespace", o.ns, "uid", o.uid, "err", err)
			continue
		}
		for _, e := range list.Items {
			if e.InvolvedObject.UID == o.uid && e.Type == corev1.EventTypeWarning && !ownEvent(&e) {
				all = append(all, e)
			}
		}
	}
	return latestDistinct(all)
}

func ownEvent(e *corev1.Event) bool {
	return e.Source.Component == fleet.EventSourceComponent || e.ReportingController == fleet.EventSourceComponent
}

// latestDistinct keeps the newest event of each reason and message (a
// tmp-pvc event and CDI's copy of it on the target claim are one), at most
// maxHeardEvents, messages clipped.
func latestDistinct(evs []corev1.Event) []heardEvent {
	sort.SliceStable(evs, func(i, j int) bool { return lastSeen(&evs[i]).After(lastSeen(&evs[j])) })
	var out []heardEvent
	seen := map[heardEvent]bool{}
	for _, e := range evs {
		h := heardEvent{Reason: e.Reason, Message: fleet.Clip(withoutCopyPrefix(e.Message), fleet.MaxMessageBytes)}
		if seen[h] {
			continue
		}
		seen[h] = true
		out = append(out, h)
		if len(out) == maxHeardEvents {
			break
		}
	}
	return out
}

// withoutCopyPrefix drops the "[tmp-pvc-<uid>] : " CDI puts before the
// events it copies from the tmp-pvc onto the target claim.
func withoutCopyPrefix(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "["+fleet.CdiTmpPVCPrefix); ok {
		if _, after, found := strings.Cut(rest, "] : "); found {
			return after
		}
	}
	return msg
}

// lastSeen is when an event last happened, in whichever field its
// reporter filled.
func lastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// heardText is what the verdict quotes of the events. A claim's latest
// event may also be in CDI's Bound condition; the event still says which
// reason it was.
func heardText(events []heardEvent) string {
	parts := make([]string, 0, len(events))
	for _, e := range events {
		parts = append(parts, e.Reason+": "+e.Message)
	}
	return strings.Join(parts, "; ")
}
