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
	// to three lists each); the rest wait a pass, still pending.
	maxHearingsPerPass = 50
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
		return verdict.Hearing{Events: h.Events, Known: true, Stale: now.Sub(h.At) >= c.cfg.StuckAfter}
	}
}

// hearCDI reads the Warning events of the disks judge asked to hear (up to
// maxHearingsPerPass), then judges them again with CDI's words; a disk no
// longer stuck is forgotten.
func (c *Controller) hearCDI(ctx context.Context, ev *verdict.Evaluation, now time.Time) {
	n := 0
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
		h := verdict.HeardWords{Uid: a.Disk.UID, Events: c.readWarnings(ctx, f), At: now}
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
			if e.InvolvedObject.UID == o.uid && e.Type == corev1.EventTypeWarning && !verdict.OwnEvent(&e) {
				all = append(all, e)
			}
		}
	}
	return verdict.LatestDistinct(all)
}
