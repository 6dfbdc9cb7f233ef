package cloner

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

const (
	// eventListLimit bounds one object's events listed.
	eventListLimit = 100
	// maxHearingsPerPass bounds the disks whose events one pass lists (up
	// to three lists each; for an unbound claim also one per consumer, up
	// to maxConsumersHeard, and its namespace's pods once a pass); the rest
	// wait a pass, still pending.
	maxHearingsPerPass = 50
	// maxConsumersHeard bounds the pods of one claim whose events are read.
	maxConsumersHeard = 2
	// podListPage is how many pods one list of a namespace's pods returns.
	podListPage = 500
)

// hearingOf is the controller's record of what it heard of a disk.
func (c *Controller) hearingOf(now time.Time) func(d *fleet.WorkerDisk) verdict.Hearing {
	return func(d *fleet.WorkerDisk) verdict.Hearing {
		c.mu.Lock()
		h, ok := c.heard[d.Namespace+"/"+d.Name]
		c.mu.Unlock()
		if !ok || h.Uid != d.UID {
			return verdict.Hearing{}
		}
		return verdict.Hearing{Events: h.Events, Scheduler: h.Scheduler, Known: true, Stale: now.Sub(h.At) >= c.cfg.StuckAfter}
	}
}

// hearCDI reads the Warning events of the disks judge asked to hear (up to
// maxHearingsPerPass), CDI's and the scheduler's, then judges them again
// with those words; a disk no longer stuck is forgotten.
func (c *Controller) hearCDI(ctx context.Context, ev *verdict.Evaluation, now time.Time) {
	n := 0
	consumers := c.claimConsumers(ctx)
	for i := range ev.Assessments {
		a := &ev.Assessments[i]
		if !a.Hear {
			continue
		}
		if n == maxHearingsPerPass {
			if a.Record.Verdict != record.VerdictStuck {
				a.RecheckAt = now.Add(minPassInterval) // not heard yet: soon
			}
			continue
		}
		n++
		f := ev.FactsOf(a.Disk)
		h := verdict.HeardWords{Uid: a.Disk.UID, Events: c.readWarnings(ctx, f), Scheduler: c.readSchedulerWords(ctx, f, consumers), At: now}
		c.mu.Lock()
		c.heard[a.Disk.Namespace+"/"+a.Disk.Name] = h
		c.mu.Unlock()
		*a = verdict.Judge(ev.FactsOf(a.Disk), c.cfg, now, ev.Inv.SnapshotOf)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range ev.Assessments {
		if a.Record.Verdict != record.VerdictStuck {
			delete(c.heard, a.Disk.Namespace+"/"+a.Disk.Name)
		}
	}
}

// readWarnings lists the Warning events on a disk's DataVolume, claim and
// tmp-pvc, not the sidecar's own: the latest distinct ones, newest first.
// A failed list leaves its object's events out; the verdict does not wait.
func (c *Controller) readWarnings(ctx context.Context, f verdict.DiskFacts) []verdict.HeardEvent {
	type object struct {
		ns  string
		uid types.UID
	}
	objs := []object{{f.Disk.Namespace, f.Disk.UID}}
	for _, pvc := range []*corev1.PersistentVolumeClaim{f.Pvc, f.ClonePVC} {
		if pvc != nil && pvc.UID != "" && pvc.UID != f.Disk.UID { // a bare claim is its own disk
			objs = append(objs, object{pvc.Namespace, pvc.UID})
		}
	}
	var all []corev1.Event
	for _, o := range objs {
		if o.uid == "" {
			continue
		}
		all = append(all, c.eventsOn(ctx, o.ns, o.uid, "type", corev1.EventTypeWarning, func(e *corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && !verdict.OwnEvent(e)
		})...)
	}
	return verdict.LatestDistinct(all)
}

// readSchedulerWords lists the FailedScheduling events of the pods that
// mount a disk's claim while it is not bound: a VM whose disk never binds
// waits there, and the scheduler says why (a WaitForFirstConsumer claim
// whose provisioning fails: "binding volumes: context deadline exceeded"
// once the VolumeBinding plugin's bindTimeoutSeconds, 600 by default,
// passed; an Immediate one: "pod has unbound immediate
// PersistentVolumeClaims"). The namespace's pods are read only for a disk
// heard in this pass (about to be judged stuck, or whose words are stale),
// once a pass (claimConsumers).
func (c *Controller) readSchedulerWords(ctx context.Context, f verdict.DiskFacts, consumersOf func(ns, claim string) []podRef) []verdict.HeardEvent {
	claim := f.Pvc
	if claim == nil || claim.Status.Phase == corev1.ClaimBound {
		return nil
	}
	pods := consumersOf(claim.Namespace, claim.Name)
	var all []corev1.Event
	for _, pod := range pods[:min(len(pods), maxConsumersHeard)] {
		for _, e := range c.eventsOn(ctx, claim.Namespace, pod.uid, "reason", verdict.ReasonFailedScheduling, func(e *corev1.Event) bool {
			return e.Reason == verdict.ReasonFailedScheduling
		}) {
			e.Message = "pod " + pod.name + ": " + e.Message
			all = append(all, e)
		}
	}
	return verdict.LatestSchedulerWords(all)
}

// eventsOn lists the events on one object (by uid) whose field is value,
// and keeps those keep accepts (a fake or an old API server may ignore the
// field selector). A failed list returns none; the verdict does not wait.
func (c *Controller) eventsOn(ctx context.Context, ns string, uid types.UID, field, value string, keep func(*corev1.Event) bool) []corev1.Event {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.uid", string(uid)), fields.OneTermEqualSelector(field, value))
	list, err := c.clients.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel.String(), Limit: eventListLimit})
	if err != nil {
		klog.V(2).InfoS("Cannot read the events on a stuck disk's object", "namespace", ns, "uid", uid, "err", err)
		return nil
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.UID == uid && keep(&e) {
			out = append(out, e)
		}
	}
	return out
}

// podRef names a pod that mounts a claim.
type podRef struct {
	name string
	uid  types.UID
}

// claimConsumers tells the pods that mount a claim, listing each namespace
// once a pass: every stuck disk of the namespace heard in the pass looks
// for its consumers in the same list. Only the pods' names, uids and claim
// names are kept (a page of podListPage pods at a time), not the pods.
func (c *Controller) claimConsumers(ctx context.Context) func(ns, claim string) []podRef {
	byNamespace := map[string]map[string][]podRef{}
	return func(ns, claim string) []podRef {
		consumers, ok := byNamespace[ns]
		if !ok {
			consumers = c.listConsumers(ctx, ns)
			byNamespace[ns] = consumers
		}
		return consumers[claim]
	}
}

// listConsumers lists a namespace's pods by the claims they mount. A failed
// list keeps what it read: it loses only the scheduler's words.
func (c *Controller) listConsumers(ctx context.Context, ns string) map[string][]podRef {
	consumers := map[string][]podRef{}
	opts := metav1.ListOptions{Limit: podListPage}
	for {
		list, err := c.clients.Kube.CoreV1().Pods(ns).List(ctx, opts)
		if err != nil {
			klog.V(2).InfoS("Cannot read the pods of stuck disks' claims", "namespace", ns, "err", err)
			return consumers
		}
		for i := range list.Items {
			pod := &list.Items[i]
			for _, v := range pod.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					claim := v.PersistentVolumeClaim.ClaimName
					consumers[claim] = append(consumers[claim], podRef{name: pod.Name, uid: pod.UID})
				}
			}
		}
		if list.Continue == "" {
			return consumers
		}
		opts.Continue = list.Continue
	}
}
