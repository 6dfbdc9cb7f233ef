package cloner

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// TestAChangeReJudgesOnlyTheDisksItTouches: after the first pass, a PVC, PV
// or DataVolume change re-judges its own disk, a golden change its
// consumers, and nothing is re-judged while nothing changes.
func TestAChangeReJudgesOnlyTheDisksItTouches(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	const n = 40
	var disks []*cdiv1.DataVolume
	for i := range n {
		dv := w.Worker("tenant-a", fmt.Sprintf("d%02d", i), "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
		if i > 0 {
			w.Cloned(dv, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
		}
		disks = append(disks, dv)
	}
	fc := newFakeCluster(t, &w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	ctx := t.Context()
	c := fc.controller(t, ctx, cfg)
	// Passes are driven here, not by RunVerdicts: quiesce decides when
	// nothing more is due.
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.judgedCount.Load(); got < n {
		t.Fatalf("first pass judged %d disks, want %d", got, n)
	}
	if v := fc.pvc(t, "tenant-a", "d39").Annotations[fleet.AnnCloneVerdict]; v != record.VerdictCSIClone {
		t.Fatalf("first pass wrote verdict %q, want %s", v, record.VerdictCSIClone)
	}
	// The verdict writes come back as PVC events: judge what they make due.
	barriers := 0
	settled := func() int64 {
		quiesce(t, ctx, fc, c, &barriers)
		return c.judgedCount.Load()
	}
	before := settled()

	pvc, pv := w.Cloned(disks[0], clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	if _, err := fc.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.kube.CoreV1().PersistentVolumeClaims("tenant-a").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fc.putDV(t, disks[0])
	if got := settled() - before; got < 1 || got > 6 {
		t.Fatalf("one disk's claim, volume and DataVolume changing re-judged %d disks, want 1 per event (at most 6)", got)
	}
	if v := fc.pvc(t, "tenant-a", "d00").Annotations[fleet.AnnCloneVerdict]; v != record.VerdictCSIClone {
		t.Fatalf("the changed disk's verdict is %q, want %s", v, record.VerdictCSIClone)
	}

	before = c.judgedCount.Load()
	g.Status.RestartCount++ // a change the cache keeps (an unread annotation re-judges nothing)
	fc.putDV(t, g)
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
	const n, chunk = 23, 5
	fc, c := chunkedFleet(t, n, chunk)
	ctx := t.Context()
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
		if v := fc.pvc(t, "tenant-a", fmt.Sprintf("d%02d", i)).Annotations[fleet.AnnCloneVerdict]; v != record.VerdictCSIClone {
			t.Errorf("d%02d: verdict %q, want %q", i, v, record.VerdictCSIClone)
		}
	}
	if s := c.Snapshot(); len(s.Disks) != 1 || s.Disks[0].Count != n {
		t.Errorf("metrics show %+v, want %d csi-clone disks", s.Disks, n)
	}
}

// TestASettledFullPassHoldsNoFacts: once the ledger has counted every
// disk, a full pass holds none of their facts until its last chunk (at
// 10,000 disks they were several MB at the process's peak) and writes no
// ledger.
func TestASettledFullPassHoldsNoFacts(t *testing.T) {
	const n, chunk = 12, 4
	fc, c := chunkedFleet(t, n, chunk)
	ctx := t.Context()
	fullPass := func(check func(held int)) {
		c.markFull()
		for {
			more, err := c.passDue(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				return
			}
			check(len(c.heldFacts))
		}
	}
	fullPass(func(int) {})
	if s := c.Snapshot(); len(s.Flavors) != 1 || s.Flavors[0].FetchesAvoided != n {
		t.Fatalf("the first full pass counted %+v, want %d fetches avoided", s.Flavors, n)
	}
	writes := ledgerWrites(fc)
	fullPass(func(held int) {
		if held != 0 {
			t.Errorf("a settled full pass holds %d facts between its chunks, want none", held)
		}
	})
	if got := ledgerWrites(fc); got != writes {
		t.Errorf("a settled full pass wrote the ledger %d times", got-writes)
	}
	if s := c.Snapshot(); len(s.Flavors) != 1 || s.Flavors[0].FetchesAvoided != n {
		t.Errorf("after the second full pass: %+v, want still %d fetches avoided", s.Flavors, n)
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

// quiesce judges what is due, round after round, until a round judges
// nothing. Before each round a barrier per verdict informer shows that its
// handler took every notification of the writes made before it: a new
// DataVolume, then its claim, then a volume bound to that claim, each seen
// marking the barrier disk due (and taken off the due set, so it is never
// judged). A round that then judges nothing writes nothing, so nothing more
// can come: no waiting for quiet.
func quiesce(t *testing.T, ctx context.Context, fc *fakeCluster, c *Controller, barriers *int) {
	t.Helper()
	for round := 0; ; round++ {
		if round == 10 {
			t.Fatal("still judging after 10 rounds: the verdict writes keep re-judging their disks")
		}
		*barriers++
		barrier(t, ctx, fc, c, fmt.Sprintf("barrier-%d", *barriers))
		before := c.judgedCount.Load()
		for {
			more, err := c.passDue(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				break
			}
		}
		if c.judgedCount.Load() == before {
			return
		}
	}
}

const barrierNamespace = "barriers"

// barrier creates a DataVolume, its claim and its volume in turn, and waits
// after each until the handler of that kind marked the barrier disk due.
func barrier(t *testing.T, ctx context.Context, fc *fakeCluster, c *Controller, name string) {
	t.Helper()
	key := barrierNamespace + "/" + name
	dv := &cdiv1.DataVolume{TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: barrierNamespace, Name: name}}
	if _, err := fc.dyn.Resource(fleet.DataVolumeGVR).Namespace(barrierNamespace).Create(ctx, clonertest.ToUnstructured(t, dv), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	takeDue(t, c, key, "DataVolume")
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: barrierNamespace, Name: name}}
	if _, err := fc.kube.CoreV1().PersistentVolumeClaims(barrierNamespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	takeDue(t, c, key, "PersistentVolumeClaim")
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name},
		Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: barrierNamespace, Name: name}}}
	if _, err := fc.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	takeDue(t, c, key, "PersistentVolume")
}

// takeDue waits until key is due and takes it off the due set.
func takeDue(t *testing.T, c *Controller, key, kind string) {
	t.Helper()
	eventually(t, "the "+kind+" handler marked "+key+" due", func() bool {
		return c.due.Unmark(key)
	})
}

// TestAClaimGoldenChangeReJudgesItsConsumers: a claim golden (no
// DataVolume made it) has no DataVolume whose change marks its consumers;
// its own claim's change does.
func TestAClaimGoldenChangeReJudgesItsConsumers(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	golden := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "cozy-public", Name: "ubuntu-image"}}
	gpvc, _ := w.Claim(golden, clonertest.TestClass, 6*clonertest.Gi, 6*clonertest.Gi, "golden-vol-ubuntu-image")
	const n = 12
	for i := range n {
		dv := w.DataVolume("tenant-a", fmt.Sprintf("vm-disk-%02d", i), 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
		dv.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: golden.Namespace, Name: golden.Name}}
		w.Cloned(dv, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	}
	ctx := t.Context()
	fc, c, barriers := settledController(t, &w)
	before := c.judgedCount.Load()
	gpvc.Annotations[fleet.AnnImageName] = "ubuntu" // an annotation the cache keeps
	if _, err := fc.kube.CoreV1().PersistentVolumeClaims(gpvc.Namespace).Update(ctx, gpvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	quiesce(t, ctx, fc, c, barriers)
	if got := c.judgedCount.Load() - before; got < n {
		t.Fatalf("a claim golden's change re-judged %d disks, want its %d consumers", got, n)
	}
	if s := c.Snapshot(); len(s.Images) != 1 || s.Images[0].Image != "ubuntu" || s.Images[0].Consumers != n {
		t.Fatalf("image goldens %+v, want the claim golden, now image ubuntu, with %d consumers", s.Images, n)
	}
}

// TestBareClaimsAreJudgedByTheController: a full pass judges the bare
// claims beside the DataVolumes and writes their verdicts on the claims; a
// bare claim made later is judged when it appears; a change of the golden
// they clone re-judges them; a deleted one leaves the metrics.
func TestBareClaimsAreJudgedByTheController(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	const n = 5
	for i := range n {
		w.BareClaim("tenant-a", fmt.Sprintf("copy-%d", i), g, 20*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 20*clonertest.Gi, 20*clonertest.Gi))
	}
	ctx := t.Context()
	fc, c, barriers := settledController(t, &w)
	for i := range n {
		if v := fc.pvc(t, "tenant-a", fmt.Sprintf("copy-%d", i)).Annotations[fleet.AnnCloneVerdict]; v != record.VerdictCSIClone {
			t.Fatalf("copy-%d: verdict %q, want %s", i, v, record.VerdictCSIClone)
		}
	}
	late, latePV := w.BareClaim("tenant-a", "late", g, 20*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 20*clonertest.Gi, 20*clonertest.Gi))
	if _, err := fc.kube.CoreV1().PersistentVolumes().Create(ctx, latePV, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.kube.CoreV1().PersistentVolumeClaims("tenant-a").Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the late bare claim judged", func() bool {
		quiesce(t, ctx, fc, c, barriers)
		return fc.pvc(t, "tenant-a", "late").Annotations[fleet.AnnCloneVerdict] == record.VerdictCSIClone
	})
	before := c.judgedCount.Load()
	g.Status.RestartCount++
	fc.putDV(t, g)
	quiesce(t, ctx, fc, c, barriers)
	if got := c.judgedCount.Load() - before; got < n+1 {
		t.Fatalf("a golden change re-judged %d disks, want its %d bare claims", got, n+1)
	}
	if s := c.Snapshot(); len(s.Disks) != 1 || s.Disks[0].Count != n+1 {
		t.Fatalf("metrics show %+v, want %d csi-clone disks", s.Disks, n+1)
	}
	if err := fc.kube.CoreV1().PersistentVolumeClaims("tenant-a").Delete(ctx, "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted bare claim gone from the metrics", func() bool {
		quiesce(t, ctx, fc, c, barriers)
		s := c.Snapshot()
		return len(s.Disks) == 1 && s.Disks[0].Count == n
	})
}

// settledController starts a controller over w an hour after T0, judges
// every disk once and waits until the echoes of its writes are judged too.
func settledController(t *testing.T, w *clonertest.World) (*fakeCluster, *Controller, *int) {
	t.Helper()
	fc := newFakeCluster(t, w)
	c := fc.controller(t, t.Context(), clonertest.ConfigAt(clonertest.T0.Add(time.Hour)))
	if err := c.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	barriers := 0
	quiesce(t, t.Context(), fc, c, &barriers)
	return fc, c, &barriers
}
