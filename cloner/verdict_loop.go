package cloner

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"
)

// RunVerdicts decides verdicts, persists them, emits events and keeps the
// ledger until ctx ends. Only the leader runs it; when it returns the
// verdict metrics disappear from this replica.
func (c *Controller) RunVerdicts(ctx context.Context) error {
	if err := c.waitCore(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-c.dvReady:
	}
	defer c.setSnapshot(nil)
	t := time.NewTicker(c.cfg.ResyncPeriod)
	defer t.Stop()
	for {
		if err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Verdict pass incomplete; retrying on the next change or resync")
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
		case <-c.recheckTimer():
		}
	}
}

// Pass is one verdict pass over the informers' current view. RunVerdicts
// calls it; it is exported so a test or a one-shot tool can drive it.
func (c *Controller) Pass(ctx context.Context) error {
	if !c.started.Load() || !c.synced() {
		// A pass over half-filled caches would judge disks without their
		// claims and golden: never do it.
		return errors.New("cloner: informers not synced yet")
	}
	inv := buildInventory(c.objectsFromCaches(), c.cfg.GoldenNamespace)
	pred, badInputs := c.newPredictor(inv)
	ev := evaluateWith(inv, c.cfg, c.cfg.now(), pred)
	ev.malformed = append(ev.malformed, badInputs...)
	c.mu.Lock()
	c.recheckAt = ev.recheckAt
	c.mu.Unlock()
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	keep(c.reportMalformed(ctx, ev.malformed))
	for _, a := range ev.assessments {
		keep(c.publish(ctx, a, inv))
	}
	ledger, err := c.updateLedger(ctx, ledgerFacts(ev, c.cfg), inv.dvRefs)
	keep(err)
	snap := c.buildSnapshot(ev, ledger)
	addPredictions(snap, ev, pred)
	snap.AdmissionParams, err = c.publishAdmissionParams(ctx, pred)
	keep(err)
	if ledger == nil {
		// Keep showing the counters last read rather than dropping them.
		prev := c.Snapshot()
		snap.Flavors, snap.Durations = prev.Flavors, prev.Durations
	}
	c.setSnapshot(snap)
	return firstErr
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
	return time.After(at.Sub(c.cfg.now()))
}

// publish persists one disk's record and emits a Warning for each bad
// reason the persisted record did not already carry: a resync that finds
// nothing new writes nothing and emits nothing.
func (c *Controller) publish(ctx context.Context, a assessment, inv *inventory) error {
	rec := a.record
	pvc := inv.claimOf(a.disk.Namespace, a.disk.ClaimName)
	old, err := readRecord(pvc)
	if err != nil {
		c.noteMalformed(malformedAnnotation(pvc, "PersistentVolumeClaim", err))
		old = nil
	}
	if old != nil && rec.sameAs(old) {
		return nil
	}
	rec.Since = c.cfg.now().UTC().Truncate(time.Second)
	if old != nil && old.Verdict == rec.Verdict && !old.Since.IsZero() {
		rec.Since = old.Since
	}
	already := map[string]bool{}
	if old != nil {
		for _, r := range old.BadReasons() {
			already[r] = true
		}
	}
	for _, reason := range rec.BadReasons() {
		if already[reason] {
			continue
		}
		if err := c.warn(ctx, dataVolumeTarget(a.disk), EventReason(reason), "", warningMessage(rec, reason)); err != nil {
			return err
		}
	}
	if pvc == nil {
		return nil // CDI has not created the claim yet; the next pass writes it
	}
	return c.patchPVC(ctx, pvc, "", map[string]*string{
		AnnCloneVerdict:  ptrTo(rec.Verdict),
		AnnCloneEvidence: ptrTo(mustJSON(rec)),
	})
}

// reportMalformed emits one Warning per newly seen unreadable object.
func (c *Controller) reportMalformed(ctx context.Context, ms []malformedObject) error {
	var firstErr error
	for _, m := range ms {
		if !c.noteMalformed(m) {
			continue
		}
		t := eventTarget{APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID}
		err := c.warn(ctx, t, ReasonMalformedObject, m.ResourceVersion, "csi-clone-sidecar cannot read this object and skips it: "+m.Err+
			". Fix: correct the object (or delete it); nothing else is affected")
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (c *Controller) noteMalformed(m malformedObject) bool {
	if m.Kind == "" {
		m.Kind = "DataVolume"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	isNew := c.malformed.add(m)
	if isNew {
		klog.InfoS("Skipping an object that cannot be read", "kind", m.Kind, "namespace", m.Namespace, "name", m.Name, "err", m.Err)
	}
	return isNew
}
