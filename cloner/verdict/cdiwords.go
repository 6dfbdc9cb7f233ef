package verdict

import (
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
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
// judged stuck by age (or by a driver's refusal), and again once those words
// are --stuck-after old. While the disk's claim is unbound, the scheduler's
// FailedScheduling on the pods that mount it is read too: a VM waiting for
// a disk that never binds is where cozystack#2908 shows.

// maxHeardEvents is how many distinct Warning events a verdict quotes.
const maxHeardEvents = 3

// heardEvent is one of CDI's Warning events, as the verdict quotes it.
type HeardEvent struct{ Reason, Message string }

// heardWords are the Warning events read for one disk, and when.
type HeardWords struct {
	Uid    types.UID // the DataVolume's: a re-created disk is heard afresh
	Events []HeardEvent
	// Scheduler is the newest FailedScheduling of a pod that mounts the
	// disk's unbound claim, its message prefixed "pod <name>: ".
	Scheduler []HeardEvent
	At        time.Time
}

// hearing tells judge what was heard of a disk: known is false until its
// events were read, stale once they should be read again.
type Hearing struct {
	Events, Scheduler []HeardEvent
	Known, Stale      bool
}

// ReasonFailedScheduling is kube-scheduler's event reason for a pod it
// could not place or bind (pkg/scheduler/schedule_one.go, handleSchedulingFailure).
const ReasonFailedScheduling = "FailedScheduling"

// LatestSchedulerWords keeps the newest of the scheduler's events: each
// attempt replaces the last one's reason for waiting.
func LatestSchedulerWords(evs []corev1.Event) []HeardEvent {
	out := LatestDistinct(evs)
	return out[:min(len(out), 1)]
}

func OwnEvent(e *corev1.Event) bool {
	return e.Source.Component == fleet.EventSourceComponent || e.ReportingController == fleet.EventSourceComponent
}

// latestDistinct keeps the newest event of each reason and message (a
// tmp-pvc event and CDI's copy of it on the target claim are one), at most
// maxHeardEvents, messages clipped.
func LatestDistinct(evs []corev1.Event) []HeardEvent {
	sort.SliceStable(evs, func(i, j int) bool { return lastSeen(&evs[i]).After(lastSeen(&evs[j])) })
	var out []HeardEvent
	seen := map[HeardEvent]bool{}
	for _, e := range evs {
		h := HeardEvent{Reason: e.Reason, Message: fleet.Clip(withoutCopyPrefix(e.Message), fleet.MaxMessageBytes)}
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
func heardText(events []HeardEvent) string {
	parts := make([]string, 0, len(events))
	for _, e := range events {
		parts = append(parts, e.Reason+": "+e.Message)
	}
	return strings.Join(parts, "; ")
}
