package cloner

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
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
	keys, full, more := c.takeDue(c.cfg.Clock())
	if !full && len(keys) == 0 && c.ledger != nil {
		return more, c.awaitWrites()
	}
	klog.V(4).InfoS("Verdict pass", "full", full, "disks", len(keys), "first", firstKey(keys))
	inv := c.storeInventory(keys)
	pred, badInputs := c.newPredictor(inv)
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
	keep(c.reportMalformed(ctx, ev.Malformed))
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
	c.heldFacts = append(c.heldFacts, ledger.LedgerFacts(ev, c.cfg)...)
	c.heldPrune = c.heldPrune || full || c.dataVolumesDeleted.Swap(false)
	if more {
		return nil, nil
	}
	// On an error the loop starts a full pass, which brings every fact again.
	facts, prune := c.heldFacts, c.heldPrune
	c.heldFacts, c.heldPrune = nil, false
	return c.countLedger(ctx, facts, prune, c.dataVolumeLive)
}

func firstKey(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// chunkWrites is one chunk's verdict writes in flight.
type chunkWrites struct {
	keys []string
	full bool
	done chan error
}

// writeBehind starts writing a chunk's records and returns once the chunks
// before it are written, so the loop judges the next chunk while this one
// is written. Judged one after the other, each chunk's judging left the
// client's rate limit idle; and waiting for a chunk's last writes before
// starting the next chunk's left the writers idle through every chunk's
// tail (README, Scale). The writers of all chunks in flight share
// publishWriters slots, and at most two chunks' assessments are held at
// once: the one being written and the one being judged, or, while this
// waits, the one it started and the tail of the one before.
func (c *Controller) writeBehind(ctx context.Context, keys []string, full bool, as []verdict.Assessment, inv *fleet.Inventory) error {
	w := &chunkWrites{keys: keys, full: full, done: make(chan error, 1)}
	go func() { w.done <- c.publishAll(ctx, as, inv) }()
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
func (c *Controller) settle(w *chunkWrites) error {
	if w == nil {
		return nil
	}
	err := <-w.done
	if err != nil {
		c.redo(w.keys, w.full)
	}
	return err
}

// redo marks a pass's disks due again after something in it failed.
func (c *Controller) redo(keys []string, full bool) {
	if full {
		c.markFull()
		return
	}
	c.mu.Lock()
	for _, k := range keys {
		c.dirty[k] = true
	}
	c.mu.Unlock()
}

// publishWriters is how many disks' records are written at once, across
// the chunks in flight: enough to reach the client's --kube-api-qps
// (200/s) when a busy API server takes 150 ms a patch (16 writers made
// about 60 patches/s on this 2-core machine under load); the client's rate
// limit, not this, bounds the load.
const publishWriters = 32

// publishAll persists the pass's records, the bad and the never written
// first (an upgrade that changes every record must not make a bad disk wait
// behind thousands of good ones), each write holding one of the shared
// writer slots.
func (c *Controller) publishAll(ctx context.Context, as []verdict.Assessment, inv *fleet.Inventory) error {
	work := make(chan verdict.Assessment)
	errs := make(chan error, publishWriters)
	var wg sync.WaitGroup
	for range publishWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for a := range work {
				c.writeSlots <- struct{}{}
				err := c.publish(ctx, a, inv)
				<-c.writeSlots
				if err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for _, a := range writeOrder(as, inv) {
		work <- a
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// writeOrder ranks a pass's assessments for writing: bad verdicts, then
// disks whose claim has no record yet, then the rest.
func writeOrder(as []verdict.Assessment, inv *fleet.Inventory) []verdict.Assessment {
	rank := make([]int, len(as))
	order := make([]int, len(as))
	for i, a := range as {
		order[i], rank[i] = i, 2
		if len(a.Record.BadReasons()) > 0 {
			rank[i] = 0
		} else if pvc := inv.ClaimOf(a.Disk.Namespace, a.Disk.ClaimName); pvc == nil || pvc.Annotations[fleet.AnnCloneVerdict] == "" {
			rank[i] = 1
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return rank[order[i]] < rank[order[j]] })
	out := make([]verdict.Assessment, len(as))
	for i, k := range order {
		out[i] = as[k]
	}
	return out
}

// recheckTimer fires when the last pass said a verdict may change with no
// object changing (an evidence grace ending); nil, never firing, otherwise.
func (c *Controller) recheckTimer() <-chan time.Time {
	c.mu.Lock()
	at := c.recheckAt
	c.mu.Unlock()
	if at.IsZero() {
		return nil
	}
	return time.After(at.Sub(c.cfg.Clock()))
}

// publish persists one disk's record and emits a Warning for each bad
// reason the persisted record did not already carry: a resync that finds
// nothing new writes nothing and emits nothing.
func (c *Controller) publish(ctx context.Context, a verdict.Assessment, inv *fleet.Inventory) error {
	rec := a.Record
	pvc := inv.ClaimOf(a.Disk.Namespace, a.Disk.ClaimName)
	old, err := record.PersistedRecord(pvc)
	if err != nil {
		c.noteMalformed(verdict.MalformedAnnotation(pvc, "PersistentVolumeClaim", err))
		old = nil
	}
	digest := record.DigestRecord(rec)
	key := a.Disk.Namespace + "/" + a.Disk.Name
	if old.SameAs(digest) {
		c.echoSeen(key)
		return nil
	}
	if c.awaitingEcho(key, pvc, digest) || c.deferProgress(key, digest, old) {
		return nil
	}
	rec.Since = c.cfg.Clock().UTC().Truncate(time.Second)
	if old != nil && old.Verdict == rec.Verdict && !old.Since.IsZero() {
		rec.Since = old.Since
	}
	already := map[string]bool{}
	if old != nil {
		for _, r := range old.BadReasons {
			already[r] = true
		}
	}
	for _, reason := range rec.BadReasons() {
		if already[reason] {
			continue
		}
		if err := c.warn(ctx, publish.DataVolumeTarget(a.Disk), record.EventReason(reason), "", publish.WarningMessage(rec, reason)); err != nil {
			return err
		}
	}
	if pvc == nil {
		return nil // CDI has not created the claim yet; the next pass writes it
	}
	err = c.patchPVC(ctx, pvc, "", map[string]*string{
		fleet.AnnCloneVerdict:  publish.PtrTo(rec.Verdict),
		fleet.AnnCloneEvidence: publish.PtrTo(record.MustJSON(rec)),
	})
	if err == nil {
		c.noteWritten(key, rec)
		c.expectEcho(key, pvc, digest)
	}
	return err
}

// reportMalformed emits one Warning per newly seen unreadable object.
func (c *Controller) reportMalformed(ctx context.Context, ms []fleet.MalformedObject) error {
	var firstErr error
	for _, m := range ms {
		if !c.noteMalformed(m) {
			continue
		}
		t := publish.EventTarget{APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID}
		err := c.warn(ctx, t, ReasonMalformedObject, m.ResourceVersion, "csi-clone-sidecar cannot read this object and skips it: "+m.Err+
			". Fix: correct the object (or delete it); nothing else is affected")
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (c *Controller) noteMalformed(m fleet.MalformedObject) bool {
	if m.Kind == "" {
		m.Kind = "DataVolume"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	isNew := c.malformed.Add(m)
	if isNew {
		klog.InfoS("Skipping an object that cannot be read", "kind", m.Kind, "namespace", m.Namespace, "name", m.Name, "err", m.Err)
	}
	return isNew
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
		v := c.dataVolumeGone(ctx, ref, uid)
		goneCache[uid] = v
		return v
	}
	err := c.ledger.Update(ctx, kube, facts, prune, live, gone)
	return c.ledger.Merged(false), err
}

// dataVolumeGone asks the API server whether the DataVolume a UID belonged
// to is gone (absent, or replaced by one with another UID).
func (c *Controller) dataVolumeGone(ctx context.Context, ref string, uid types.UID) bool {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return false
	}
	u, err := c.clients.Dynamic.Resource(fleet.DataVolumeGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true
	}
	return err == nil && u.GetUID() != uid
}
