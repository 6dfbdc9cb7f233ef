package cloner

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// TestAChangeReJudgesOnlyTheDisksItTouches: after the first pass, a PVC, PV
// or DataVolume change re-judges its own disk, a golden change its
// consumers, and nothing is re-judged while nothing changes.
func TestAChangeReJudgesOnlyTheDisksItTouches(t *testing.T) {
	var w world
	w.class(testClass, nil, t0)
	g, _ := w.golden(testSID, testVer)
	const n = 40
	var disks []*cdiv1.DataVolume
	for i := range n {
		dv := w.worker("tenant-a", fmt.Sprintf("d%02d", i), "p", g, 20*gi, ptrTo(testClass))
		if i > 0 {
			w.cloned(dv, testClass, "csi-clone", 20*gi, nil)
		}
		disks = append(disks, dv)
	}
	fc := newFakeCluster(t, &w)
	cfg := configAt(t0.Add(time.Hour))
	cfg.ResyncPeriod = time.Hour // no full pass but the first
	ctx := t.Context()
	c := fc.controller(t, ctx, cfg)
	c.cfg.ResyncPeriod = time.Hour
	go func() { _ = c.RunVerdicts(ctx) }()
	eventually(t, "first pass", func() bool { return c.judgedCount.Load() >= n })
	eventually(t, "every verdict written", func() bool { return fc.pvc(t, "tenant-a", "d39").Annotations[AnnCloneVerdict] == VerdictCSIClone })
	// The verdict writes come back as PVC events: let them settle.
	settled := func() int64 {
		var last int64 = -1
		for c.judgedCount.Load() != last {
			last = c.judgedCount.Load()
			time.Sleep(3 * minPassInterval)
		}
		return last
	}
	before := settled()

	pvc, pv := w.cloned(disks[0], testClass, "csi-clone", 20*gi, nil)
	if _, err := fc.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.kube.CoreV1().PersistentVolumeClaims("tenant-a").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fc.putDV(t, disks[0])
	eventually(t, "the changed disk judged", func() bool {
		return fc.pvc(t, "tenant-a", "d00").Annotations[AnnCloneVerdict] == VerdictCSIClone
	})
	if got := settled() - before; got < 1 || got > 6 {
		t.Fatalf("one disk's claim, volume and DataVolume changing re-judged %d disks, want 1 per event (at most 6)", got)
	}

	before = c.judgedCount.Load()
	g.Status.RestartCount++ // a change the cache keeps (an unread annotation re-judges nothing)
	fc.putDV(t, g)
	eventually(t, "the golden's consumers re-judged", func() bool { return c.judgedCount.Load()-before >= n })
	if got := settled() - before; got != n {
		t.Fatalf("a golden change re-judged %d disks, want its %d consumers once", got, n)
	}
	if s := c.Snapshot(); len(s.Disks) != 1 || s.Disks[0].Count != n {
		t.Fatalf("metrics show %+v, want %d csi-clone disks", s.Disks, n)
	}
}

// TestAFullPassGoesInChunks: a full pass judges at most a chunk of disks at
// a time, reports the rest as due, counts the ledger once after the last
// chunk, and ends with every disk judged, written and counted once.
func TestAFullPassGoesInChunks(t *testing.T) {
	var w world
	w.class(testClass, nil, t0)
	g, _ := w.golden(testSID, testVer)
	const n, chunk = 23, 5
	for i := range n {
		w.cloned(w.worker("tenant-a", fmt.Sprintf("d%02d", i), "p", g, 20*gi, ptrTo(testClass)), testClass, "csi-clone", 20*gi, nil)
	}
	fc := newFakeCluster(t, &w)
	ctx := t.Context()
	c := fc.controller(t, ctx, configAt(t0.Add(time.Hour)))
	c.chunk = chunk
	c.markFull()
	var passes []int64
	for {
		before := c.judgedCount.Load()
		more, err := c.passDue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		passes = append(passes, c.judgedCount.Load()-before)
		if !more {
			break
		}
		if n := ledgerWrites(fc); n > 0 {
			t.Fatalf("%d ledger writes before the full pass's last chunk, want its facts held until then", n)
		}
	}
	if ledgerWrites(fc) == 0 {
		t.Error("the full pass's last chunk wrote no ledger")
	}
	var total int64
	for _, p := range passes {
		if p > chunk {
			t.Errorf("a pass judged %d disks, want at most %d (passes: %v)", p, chunk, passes)
		}
		total += p
	}
	// The verdict writes come back as claim events and may make a disk due
	// again, so a disk can be judged twice; never fewer than all once.
	if len(passes) < (n+1+chunk-1)/chunk || total < n {
		t.Errorf("passes judged %v, want %d disks (and the golden) in chunks of %d", passes, n, chunk)
	}
	for i := range n {
		if v := fc.pvc(t, "tenant-a", fmt.Sprintf("d%02d", i)).Annotations[AnnCloneVerdict]; v != VerdictCSIClone {
			t.Errorf("d%02d: verdict %q, want %q", i, v, VerdictCSIClone)
		}
	}
	if s := c.Snapshot(); len(s.Disks) != 1 || s.Disks[0].Count != n {
		t.Errorf("metrics show %+v, want %d csi-clone disks", s.Disks, n)
	}
}

// ledgerWrites counts the ConfigMap creates and updates the fake cluster saw.
func ledgerWrites(fc *fakeCluster) int {
	n := 0
	for _, a := range fc.kube.Actions() {
		if a.GetResource().Resource == "configmaps" && (a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "patch") {
			n++
		}
	}
	return n
}
