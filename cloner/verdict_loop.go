package cloner

import (
	"context"
	"errors"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// RunVerdicts decides verdicts, persists them, emits events and keeps the
// ledger until ctx ends. Only the leader runs it; when it returns the
// verdict metrics disappear from this replica. It judges every disk once,
// then only the disks an object change touches (incremental.go), and every
// disk again each --resync-period.
func (c *Controller) RunVerdicts(ctx context.Context) error {
	if err := c.waitCore(ctx); err != nil {
		return err
	}
	defer c.awaitWrites() // no chunk's writes outlive the term
	select {
	case <-ctx.Done():
		return nil
	case <-c.dvReady:
	}
	klog.InfoS("Verdict caches synced; judging every worker disk", "dataVolumes", len((*c.dvInf.Load()).GetStore().ListKeys()))
	defer c.setSnapshot(nil)
	c.ledger = nil // a new term reads the ledger afresh
	c.markFull()
	t := time.NewTicker(c.cfg.ResyncPeriod)
	defer t.Stop()
	for {
		more, err := c.passDue(ctx)
		if err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Verdict pass incomplete; retrying on the next change or resync")
			c.markFull()
		}
		if more && err == nil && ctx.Err() == nil {
			continue // the rest of a full pass, at once
		}
		// Space passes so a burst of object changes costs one pass.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(minPassInterval):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-t.C:
			c.markFull()
		case <-c.recheckTimer():
		}
	}
}

// Pass judges every worker disk over the informers' current view. It is
// exported so a test or a one-shot tool can drive it.
func (c *Controller) Pass(ctx context.Context) error {
	c.markFull()
	defer c.awaitWrites()
	for {
		more, err := c.passDue(ctx)
		if err != nil || !more {
			return err
		}
	}
}

// passDue judges a chunk of the disks that are due (every disk once a full
// pass is due, else those an object change touched or whose recheck time
// came) and reports whether more are due.
func (c *Controller) passDue(ctx context.Context) (more bool, err error) {
	if !c.started.Load() || !c.synced() {
		// A pass over half-filled caches would judge disks without their
		// claims and golden: never do it.
		return false, errors.New("cloner: informers not synced yet")
	}
	keys, full, more := c.due.Take(c.cfg.Clock(), c.diskKeys)
	if !full && len(keys) == 0 && c.ledger != nil {
		return more, c.awaitWrites()
	}
	klog.V(4).InfoS("Verdict pass", "full", full, "disks", len(keys), "first", firstKey(keys))
	sources := c.predIn.Load().ReadDataSources()
	inv := c.storeInventory(keys, sources)
	pred, badInputs := c.newPredictor(inv, sources)
	now := c.cfg.Clock()
	ev := verdict.EvaluateHearing(inv, c.cfg, now, pred, c.hearingOf(now))
	c.hearCDI(ctx, ev, now)
	ev.Malformed = append(ev.Malformed, badInputs...)
	c.judgedCount.Add(int64(len(ev.Assessments)))
	c.remember(keys, ev)
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	keep(c.writer.ReportMalformed(ctx, ev.Malformed))
	keep(c.writeBehind(ctx, keys, full, ev.Assessments, inv))
	if !more {
		keep(c.awaitWrites()) // the ledger counts what was written
	}
	counted, err := c.countPass(ctx, ev, full, more)
	keep(err)
	snap := c.buildSnapshot(inv, counted)
	ledger.AddPredictions(snap, pred)
	snap.AdmissionParams, err = c.publishAdmissionParams(ctx, pred)
	keep(err)
	if counted == nil {
		// Keep showing the counters last read rather than dropping them.
		prev := c.Snapshot()
		snap.Flavors, snap.Durations = prev.Flavors, prev.Durations
	}
	snap.Passes = c.passes.Add(1)
	c.setSnapshot(snap)
	if firstErr != nil {
		c.redo(keys, full)
	}
	return more, firstErr
}

// countPass brings what a pass judged to the ledger. The chunks of a full
// pass count together after the last one: one write per ledger shard, not
// one per chunk, which would compete with the verdict writes for the
// client's rate limit. Marks are pruned on full passes and after a
// DataVolume went away: a pass for one changed disk does not walk the whole
// ledger. A nil Ledger means nothing was counted this time.
func (c *Controller) countPass(ctx context.Context, ev *verdict.Evaluation, full, more bool) (*ledger.Ledger, error) {
	// Only what the ledger lacks is held until the pass's last chunk: at
	// a settled fleet's full pass, holding every disk's fact (and copying
	// them by shard) was a peak of several MB at 10,000 disks.
	for _, f := range ledger.LedgerFacts(ev, c.cfg) {
		if c.ledger == nil || c.ledger.Adds(f) {
			c.heldFacts = append(c.heldFacts, f)
		}
	}
	c.heldPrune = c.heldPrune || full || c.dataVolumesDeleted.Swap(false)
	if more {
		return nil, nil
	}
	// On an error the loop starts a full pass, which brings every fact again.
	facts, prune := c.heldFacts, c.heldPrune
	c.heldFacts, c.heldPrune = nil, false
	return c.countLedger(ctx, facts, prune, c.diskLive)
}

func firstKey(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// writeBehind starts writing a chunk's records and returns once the chunks
// before it are written, so the loop judges the next chunk while this one
// is written. Judged one after the other, each chunk's judging left the
// client's rate limit idle; and waiting for a chunk's last writes before
// starting the next chunk's left the writers idle through every chunk's
// tail (README, Scale). The writers of all chunks in flight share
// publish.Writer's slots, and at most two chunks' assessments are held at
// once: the one being written and the one being judged, or, while this
// waits, the one it started and the tail of the one before.
func (c *Controller) writeBehind(ctx context.Context, keys []string, full bool, as []verdict.Assessment, inv *fleet.Inventory) error {
	w := c.writer.Start(ctx, keys, full, as, inv)
	before := c.writing
	c.writing = w
	return c.settle(before)
}

// awaitWrites waits for the chunk in flight, if any; when one of its writes
// failed, its disks are due again and the error is the pass's.
func (c *Controller) awaitWrites() error {
	w := c.writing
	c.writing = nil
	return c.settle(w)
}

// settle waits for one chunk's writes, if any, and makes its disks due
// again if they failed.
func (c *Controller) settle(w *publish.Chunk) error {
	if w == nil {
		return nil
	}
	err := w.Wait()
	if err != nil {
		c.redo(w.Keys, w.Full)
	}
	return err
}

// redo marks a pass's disks due again after something in it failed.
func (c *Controller) redo(keys []string, full bool) {
	if full {
		c.markFull()
		return
	}
	c.due.Mark(keys...)
}

// recheckTimer fires when the last pass said a verdict may change with no
// object changing (an evidence grace ending); nil, never firing, otherwise.
func (c *Controller) recheckTimer() <-chan time.Time {
	at := c.due.RecheckAt()
	if at.IsZero() {
		return nil
	}
	return time.After(at.Sub(c.cfg.Clock()))
}

// countLedger adds one pass's facts to the ledger and forgets the marks of
// DataVolumes confirmed gone. The leader reads the whole ledger the first
// time (migrating a format-1 one) and keeps it from its own writes; it
// returns the counters as they now stand (nil when the ledger was never read).
func (c *Controller) countLedger(ctx context.Context, facts []ledger.LedgerFact, prune bool, live func(types.UID) bool) (*ledger.Ledger, error) {
	kube := c.clients.Kube
	if c.ledger == nil {
		b, err := ledger.ReadLedgerBook(ctx, kube, c.cfg.LedgerNamespace, c.cfg.LedgerName)
		if err != nil {
			return nil, err
		}
		if err := b.Migrate(ctx, kube); err != nil {
			return nil, err
		}
		c.ledger = b
	}
	goneCache := map[types.UID]bool{}
	gone := func(ref string, uid types.UID) bool {
		if v, ok := goneCache[uid]; ok {
			return v
		}
		v := c.diskGone(ctx, ref, uid)
		goneCache[uid] = v
		return v
	}
	err := c.ledger.Update(ctx, kube, facts, prune, live, gone)
	return c.ledger.Merged(false), err
}

// diskGone asks the API server whether the DataVolume a UID belonged to is
// gone (absent, or replaced by one with another UID); where no DataVolume
// of that name is left, whether a bare claim of that UID is.
func (c *Controller) diskGone(ctx context.Context, ref string, uid types.UID) bool {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return false
	}
	u, err := c.clients.Dynamic.Resource(fleet.DataVolumeGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return err == nil && u.GetUID() != uid
	}
	// A list of one name: the sidecar may list claims, not get them.
	claims, err := c.clients.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx,
		metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return false
	}
	return len(claims.Items) == 0 || claims.Items[0].UID != uid
}
