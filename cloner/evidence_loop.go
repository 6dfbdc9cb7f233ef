package cloner

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// RunEvidence turns observations into annotations until ctx ends or
// FinishEvidence asks it to persist what it holds and stop. Every replica
// runs it: the CSI calls reach whichever replica's relay the active
// csi-provisioner uses, not necessarily the leader's.
func (c *Controller) RunEvidence(ctx context.Context) error {
	if err := c.waitCore(ctx); err != nil {
		return err
	}
	c.evidenceRunning.Store(true)
	defer c.evidenceRunning.Store(false)
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

// FinishEvidence is for shutdown, once nothing feeds Observe any more (the
// relay has closed and handed over what its tap had queued): RunEvidence
// applies every queued observation, writes the evidence onto the PVs,
// waiting for the PVs the provisioner is still creating, and returns. It
// waits at most until ctx ends and then says what was not written. The
// informers must run until it returns.
func (c *Controller) FinishEvidence(ctx context.Context) error {
	if !c.evidenceRunning.Load() {
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
// ends. Evidence older than finishFresh waits for a PV nobody is creating
// right now: shutdown does not wait for it (another replica's tap, or CDI's
// annotations, will do).
func (c *Controller) persistRemaining(ctx context.Context) error {
	t := time.NewTicker(finishRetry)
	defer t.Stop()
	for {
		c.drain()
		c.flushEvidence(ctx)
		fresh := c.book.VolumesSeenSince(c.cfg.Clock().Add(-finishFresh))
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
func (c *Controller) drain() {
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
func (c *Controller) flushEvidence(ctx context.Context) {
	b := c.book
	for handle, p := range b.Volumes {
		pv := c.pvByHandle(handle)
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
	now := c.cfg.Clock()
	for claim, pe := range b.Errors {
		// A retry with the same error refreshes the annotation at most once
		// a minute; a new error is written at once.
		if !pe.Dirty || (!pe.Changed() && now.Sub(pe.Written) < fleet.DriverErrorRefresh) {
			continue
		}
		pvc := c.targetClaim(claim)
		if pvc == nil {
			continue
		}
		if err := publish.PatchPVC(ctx, c.clients.Kube, pvc, "", map[string]*string{fleet.AnnDriverError: publish.PtrTo(record.MustJSON(pe.Err))}); err != nil {
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
func (c *Controller) clearDriverErrors(ctx context.Context) {
	for claim, at := range c.book.Cleared {
		pvc := c.targetClaim(claim)
		if pvc == nil {
			continue
		}
		var de fleet.DriverError
		ok, err := fleet.DecodeAnnotation(pvc, fleet.AnnDriverError, &de)
		if (!ok && err == nil) || (err == nil && de.Last.After(at)) {
			delete(c.book.Cleared, claim)
			continue
		}
		if err := publish.PatchPVC(ctx, c.clients.Kube, pvc, "", map[string]*string{fleet.AnnDriverError: nil}); err != nil {
			klog.V(2).InfoS("Void driver error not removed yet, will retry", "claim", claim, "err", err)
			continue
		}
		delete(c.book.Cleared, claim)
	}
}

// persistVolumeEvidence merges the evidence with what the PV already carries
// and writes it, guarded by the PV's resourceVersion.
func (c *Controller) persistVolumeEvidence(ctx context.Context, pv *corev1.PersistentVolume, ev *fleet.VolumeEvidence) error {
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
	return publish.PatchPV(ctx, c.clients.Kube, pv, map[string]*string{fleet.AnnCSIEvidence: &val})
}

func (c *Controller) pvByHandle(handle string) *corev1.PersistentVolume {
	if pv := c.volume(handle); pv != nil && fleet.CsiHandle(pv) == handle {
		return pv
	}
	objs, err := c.pvInf.GetIndexer().ByIndex(indexByHandle, handle)
	if err != nil || len(objs) == 0 {
		return nil
	}
	return objs[0].(*corev1.PersistentVolume)
}

// targetClaim is the PVC a failed CreateVolume's error belongs on: the
// target of CDI's tmp-pvc-<uid>, or the claim itself.
func (c *Controller) targetClaim(claim string) *corev1.PersistentVolumeClaim {
	uid, ref := fleet.TargetOfClaim(claim)
	if uid != "" {
		ref, ok := c.claimUIDs.get(uid)
		if pvc := c.claim(ref); ok && pvc != nil && pvc.UID == uid {
			return pvc
		}
		return nil
	}
	return c.claim(ref)
}

func (c *Controller) claim(ref types.NamespacedName) *corev1.PersistentVolumeClaim {
	obj, ok, err := c.pvcInf.GetStore().GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*corev1.PersistentVolumeClaim)
}

// snapshotSource is the volume a snapshot was cut from: what this replica
// saw CreateSnapshot do, else the VolumeSnapshotContent while it exists.
func (c *Controller) snapshotSource(snapshot string) string {
	if s, ok := c.book.Snapshots[snapshot]; ok {
		return s.Source
	}
	p := c.vscInf.Load()
	if p == nil {
		return ""
	}
	objs, err := (*p).GetIndexer().ByIndex(indexBySnapshot, snapshot)
	if err != nil || len(objs) == 0 {
		return ""
	}
	src, _, _ := unstructured.NestedString(objs[0].(*unstructured.Unstructured).Object, "spec", "source", "volumeHandle")
	return src
}
