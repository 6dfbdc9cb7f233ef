// Package evidence turns the tap's observations into annotations: every
// replica applies the CSI calls it relayed to its book (fleet.EvidenceBook)
// and writes each volume's evidence onto its PV and each driver error onto
// its target claim, and at shutdown persists what it holds before the
// process exits. It decides no verdict.
package evidence

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

const (
	// flushInterval bounds how long evidence waits when no PV event comes.
	flushInterval = 2 * time.Second
	// finishRetry is the same at shutdown, when every PV counts;
	// FinishFresh is how recent the evidence a shutdown waits for is: a
	// CreateVolume answered that long ago has its PV by now or will not
	// get it from this replica's provisioner.
	finishRetry = 100 * time.Millisecond
	FinishFresh = 30 * time.Second
)

// Lookup is what the loop reads of the informers' caches.
type Lookup struct {
	// VolumeByHandle is the PV of a CSI volume handle, nil if none.
	VolumeByHandle func(handle string) *corev1.PersistentVolume
	// TargetClaim is the PVC a failed CreateVolume's error belongs on.
	TargetClaim func(claim string) *corev1.PersistentVolumeClaim
	// ContentSource is the source volume a VolumeSnapshotContent of the
	// snapshot handle names, "" if none.
	ContentSource func(snapshot string) string
}

// Loop is one replica's evidence: the observations queued, the book they
// are applied to, and the loop that writes them.
type Loop struct {
	kube    kubernetes.Interface
	clock   func() time.Time
	world   Lookup
	obs     chan sidecar.Observation
	dropped atomic.Int64
	expired atomic.Int64
	book    *fleet.EvidenceBook
	flush   chan struct{} // an evidence flush is due
	// finish carries Finish's request to the loop, which sets running
	// while it takes requests.
	finish  chan finishRequest
	running atomic.Bool
}

// New builds a Loop with a queue of the given size whose evidence waits
// for its objects at most ttl.
func New(kube kubernetes.Interface, clock func() time.Time, queue int, ttl time.Duration, world Lookup) *Loop {
	return &Loop{kube: kube, clock: clock, world: world,
		obs:    make(chan sidecar.Observation, queue),
		book:   fleet.NewEvidenceBook(ttl),
		flush:  make(chan struct{}, 1),
		finish: make(chan finishRequest),
	}
}

// Observe takes one finished CSI call. It never blocks: when the queue is
// full the observation is dropped and counted
// (csi_clone_evidence_dropped_total).
func (c *Loop) Observe(o sidecar.Observation) {
	select {
	case c.obs <- o:
	default:
		c.dropped.Add(1)
	}
}

// Nudge asks for a flush soon (a PV appeared or changed).
func (c *Loop) Nudge() {
	select {
	case c.flush <- struct{}{}:
	default:
	}
}

// Dropped and Expired count the observations dropped on a full queue and
// the evidence that waited too long for its object.
func (c *Loop) Dropped() int64 { return c.dropped.Load() }
func (c *Loop) Expired() int64 { return c.expired.Load() }

// VolumesWaiting counts the volumes whose evidence waits for its PV; read
// it only while Run is not running.
func (c *Loop) VolumesWaiting() int { return c.book.VolumesSeenSince(time.Time{}) }

// Running reports whether Run is taking requests.
func (c *Loop) Running() bool { return c.running.Load() }

// Run turns observations into annotations until ctx ends or Finish asks it
// to persist what it holds and stop.
func (c *Loop) Run(ctx context.Context) error {
	c.running.Store(true)
	defer c.running.Store(false)
	t := time.NewTicker(flushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case req := <-c.finish:
			req.done <- c.persistRemaining(req.ctx)
			return nil
		case o := <-c.obs:
			c.book.Apply(o)
			c.drain()
			c.flushEvidence(ctx)
		case <-c.flush:
			c.flushEvidence(ctx)
		case <-t.C:
			c.flushEvidence(ctx)
		}
	}
}

// finishRequest asks the evidence loop to persist what it holds and stop;
// ctx bounds the work, done receives how it went.
type finishRequest struct {
	ctx  context.Context
	done chan error
}

// Finish asks Run to apply every queued observation, write the evidence
// onto the PVs, waiting for the PVs being created, and return; it waits at
// most until ctx ends and then says what was not written.
func (c *Loop) Finish(ctx context.Context) error {
	if !c.running.Load() {
		return fmt.Errorf("%d observations queued and not turned into evidence: the evidence loop is not running (caches not synced)", len(c.obs))
	}
	req := finishRequest{ctx: ctx, done: make(chan error, 1)}
	select {
	case c.finish <- req:
	case <-ctx.Done():
		return fmt.Errorf("evidence loop did not take the shutdown request: %w", ctx.Err())
	}
	// The loop is bounded by ctx itself and says what it left.
	return <-req.done
}

// persistRemaining applies what is queued and flushes until no recent
// volume's evidence waits for its PV, retrying as PVs appear, until ctx
// ends. Evidence older than FinishFresh waits for a PV nobody is creating
// right now: shutdown does not wait for it (another replica's tap, or CDI's
// annotations, will do).
func (c *Loop) persistRemaining(ctx context.Context) error {
	t := time.NewTicker(finishRetry)
	defer t.Stop()
	for {
		c.drain()
		c.flushEvidence(ctx)
		fresh := c.book.VolumesSeenSince(c.clock().Add(-FinishFresh))
		if len(c.obs) == 0 && fresh == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("evidence of %d volumes not written at shutdown (no PV yet, or the API server did not take it): %w", fresh, ctx.Err())
		case <-c.flush:
		case <-t.C:
		}
	}
}

// drain applies what else is queued, so a burst costs one flush.
func (c *Loop) drain() {
	for {
		select {
		case o := <-c.obs:
			c.book.Apply(o)
		default:
			return
		}
	}
}

// flushEvidence writes pending evidence onto PVs and driver errors onto
// target PVCs; what has no object yet waits, up to EvidenceTTL.
func (c *Loop) flushEvidence(ctx context.Context) {
	b := c.book
	for handle, p := range b.Volumes {
		pv := c.world.VolumeByHandle(handle)
		if pv == nil {
			continue
		}
		ev := p.Ev
		if ev.SourceSnapshot != "" && ev.SnapshotOf == "" {
			ev.SnapshotOf = c.snapshotSource(ev.SourceSnapshot)
		}
		if err := c.persistVolumeEvidence(ctx, pv, &ev); err != nil {
			klog.V(2).InfoS("Evidence not written yet, will retry", "pv", pv.Name, "err", err)
			continue
		}
		delete(b.Volumes, handle)
	}
	now := c.clock()
	for claim, pe := range b.Errors {
		// A retry with the same error refreshes the annotation at most once
		// a minute; a new error is written at once.
		if !pe.Dirty || (!pe.Changed() && now.Sub(pe.Written) < fleet.DriverErrorRefresh) {
			continue
		}
		pvc := c.world.TargetClaim(claim)
		if pvc == nil {
			continue
		}
		if err := publish.PatchPVC(ctx, c.kube, pvc, "", map[string]*string{fleet.AnnDriverError: publish.PtrTo(record.MustJSON(pe.Err))}); err != nil {
			klog.V(2).InfoS("Driver error not written yet, will retry", "claim", claim, "err", err)
			continue
		}
		pe.Dirty, pe.Written, pe.LastWritten = false, now, pe.Err.Code+"\x00"+pe.Err.Message
	}
	c.clearDriverErrors(ctx)
	b.Expire(now)
	c.expired.Store(b.Expired)
}

// clearDriverErrors removes the driver error from the claims whose
// CreateVolume later succeeded, unless the error on the claim is newer than
// that success. A claim that does not exist yet is tried again until the
// entry expires.
func (c *Loop) clearDriverErrors(ctx context.Context) {
	for claim, at := range c.book.Cleared {
		pvc := c.world.TargetClaim(claim)
		if pvc == nil {
			continue
		}
		var de fleet.DriverError
		ok, err := fleet.DecodeAnnotation(pvc, fleet.AnnDriverError, &de)
		if (!ok && err == nil) || (err == nil && de.Last.After(at)) {
			delete(c.book.Cleared, claim)
			continue
		}
		if err := publish.PatchPVC(ctx, c.kube, pvc, "", map[string]*string{fleet.AnnDriverError: nil}); err != nil {
			klog.V(2).InfoS("Void driver error not removed yet, will retry", "claim", claim, "err", err)
			continue
		}
		delete(c.book.Cleared, claim)
	}
}

// persistVolumeEvidence merges the evidence with what the PV already carries
// and writes it, guarded by the PV's resourceVersion.
func (c *Loop) persistVolumeEvidence(ctx context.Context, pv *corev1.PersistentVolume, ev *fleet.VolumeEvidence) error {
	var onPV fleet.VolumeEvidence
	ok, err := fleet.DecodeAnnotation(pv, fleet.AnnCSIEvidence, &onPV)
	if err != nil {
		// Unreadable evidence is replaced by what this replica saw; the
		// verdict pass reports the object.
		ok = false
	}
	merged := *ev
	if ok {
		merged = onPV
		merged.Merge(ev)
	}
	val := record.MustJSON(merged)
	if pv.Annotations[fleet.AnnCSIEvidence] == val {
		return nil
	}
	return publish.PatchPV(ctx, c.kube, pv, map[string]*string{fleet.AnnCSIEvidence: &val})
}

// snapshotSource is the volume a snapshot was cut from: what this replica
// saw CreateSnapshot do, else the VolumeSnapshotContent while it exists.
func (c *Loop) snapshotSource(snapshot string) string {
	if s, ok := c.book.Snapshots[snapshot]; ok {
		return s.Source
	}
	return c.world.ContentSource(snapshot)
}
