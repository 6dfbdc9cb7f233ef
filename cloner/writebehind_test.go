package cloner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	clienttesting "k8s.io/client-go/testing"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// chunkedFleet is n csi-cloned disks in one namespace, judged c.chunk at a
// time.
func chunkedFleet(t *testing.T, n, chunk int) (*fakeCluster, *Controller) {
	t.Helper()
	return chunkedFleetWith(t, n, chunk, nil)
}

// chunkedFleetWith is chunkedFleet whose PVC patches first pass through
// gate, when it is not nil.
func chunkedFleetWith(t *testing.T, n, chunk int, gate func(name string)) (*fakeCluster, *Controller) {
	t.Helper()
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	for i := range n {
		w.Cloned(w.Worker("tenant-a", fmt.Sprintf("d%02d", i), "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass)), clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	}
	fc := newFakeCluster(t, &w)
	clients := fc.clients()
	if gate != nil {
		clients.Kube = gatedClaims{fc.kube, gate}
	}
	c := fc.controllerWith(t, t.Context(), clonertest.ConfigAt(clonertest.T0.Add(time.Hour)), clients)
	c.due.SetChunk(chunk)
	return fc, c
}

// passAndCheckEveryDisk finishes the due passes and checks that every one
// of the fleet's n disks carries its verdict.
func passAndCheckEveryDisk(t *testing.T, fc *fakeCluster, c *Controller, n int) {
	t.Helper()
	if err := c.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if v := fc.pvc(t, "tenant-a", fmt.Sprintf("d%02d", i)).Annotations[fleet.AnnCloneVerdict]; v != record.VerdictCSIClone {
			t.Errorf("d%02d: verdict %q, want %q", i, v, record.VerdictCSIClone)
		}
	}
}

type passResult struct {
	more bool
	err  error
}

func passAsync(ctx context.Context, c *Controller) chan passResult {
	done := make(chan passResult, 1)
	go func() {
		more, err := c.passDue(ctx)
		done <- passResult{more, err}
	}()
	return done
}

// TestChunkWritesOverlapTheNextChunksJudging: while a chunk's verdict
// writes are held up, its pass returns and the next chunk is judged; that
// pass then waits for the first chunk's writes before it returns (two
// chunks held at most), and in the end every disk is written.
func TestChunkWritesOverlapTheNextChunksJudging(t *testing.T) {
	const n, chunk = 12, 5
	fc, c := chunkedFleet(t, n, chunk)
	release := make(chan struct{})
	var patched atomic.Int64
	fc.react("patch", "persistentvolumeclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		<-release
		patched.Add(1)
		return false, nil, nil // on to the tracker, which applies it
	})
	releaseAll := sync.OnceFunc(func() { close(release) })
	defer releaseAll()
	ctx := t.Context()
	c.markFull()
	select {
	case r := <-passAsync(ctx, c):
		if r.err != nil || !r.more {
			t.Fatalf("first chunk: more %v, err %v; want more due and no error", r.more, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first chunk's pass waited for its own writes instead of leaving them in flight")
	}
	firstJudged := c.judgedCount.Load()
	second := passAsync(ctx, c)
	eventually(t, "the second chunk judged while the first chunk's writes are held", func() bool {
		return c.judgedCount.Load() > firstJudged
	})
	select {
	case r := <-second:
		t.Fatalf("the second chunk's pass returned (%+v) before the first chunk's writes finished", r)
	case <-time.After(50 * time.Millisecond):
	}
	if p := patched.Load(); p != 0 {
		t.Fatalf("%d patches went through while all were held", p)
	}
	releaseAll()
	if r := <-second; r.err != nil {
		t.Fatal(r.err)
	}
	passAndCheckEveryDisk(t, fc, c, n)
}

// gatedClaims holds PVC patches before they reach the fake clientset,
// which runs its reactors one at a time and so cannot hold one write while
// another goes through.
type gatedClaims struct {
	kubernetes.Interface
	gate func(name string)
}

func (g gatedClaims) CoreV1() corev1client.CoreV1Interface {
	return gatedCoreV1{g.Interface.CoreV1(), g.gate}
}

type gatedCoreV1 struct {
	corev1client.CoreV1Interface
	gate func(name string)
}

func (g gatedCoreV1) PersistentVolumeClaims(ns string) corev1client.PersistentVolumeClaimInterface {
	return gatedPVCs{g.CoreV1Interface.PersistentVolumeClaims(ns), g.gate}
}

type gatedPVCs struct {
	corev1client.PersistentVolumeClaimInterface
	gate func(name string)
}

// IsWatchListSemanticsUnSupported passes on the fake clientset's answer,
// which the embedding would hide: without it client-go's informers ask the
// fake for a watch list, which it does not serve, and never sync.
func (g gatedClaims) IsWatchListSemanticsUnSupported() bool { return true }

func (g gatedPVCs) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.PersistentVolumeClaim, error) {
	g.gate(name)
	return g.PersistentVolumeClaimInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// TestTheNextChunksWritesFillTheLastChunksTail: the next chunk's writes
// start while the last of the chunk before are still in flight, so the
// writers do not idle through each chunk's tail; the next chunk's pass
// still returns only once the chunk before is written.
func TestTheNextChunksWritesFillTheLastChunksTail(t *testing.T) {
	const n, chunk = 12, 5
	known, release := make(chan struct{}), make(chan struct{})
	first := map[string]bool{} // the first chunk's claims, whose patches wait
	var passed atomic.Int64
	var armed atomic.Bool // writes before the test's passes go through, as on a plain fleet
	fc, c := chunkedFleetWith(t, n, chunk, func(name string) {
		if !armed.Load() {
			return
		}
		<-known
		if first[name] {
			<-release
			return
		}
		passed.Add(1)
	})
	armed.Store(true)
	releaseAll := sync.OnceFunc(func() { close(release) })
	defer releaseAll()
	ctx := t.Context()
	c.markFull()
	if r := <-passAsync(ctx, c); r.err != nil || !r.more {
		t.Fatalf("first chunk: more %v, err %v", r.more, r.err)
	}
	for _, k := range c.writing.Keys {
		_, name, _ := strings.Cut(k, "/") // the claim is named as its DataVolume
		first[name] = true
	}
	close(known)
	second := passAsync(ctx, c)
	eventually(t, "the second chunk's writes done while the first chunk's are held", func() bool {
		return passed.Load() >= chunk-1 // a chunk's keys may hold the golden
	})
	select {
	case r := <-second:
		t.Fatalf("the second chunk's pass returned (%+v) before the first chunk's writes finished", r)
	case <-time.After(50 * time.Millisecond):
	}
	releaseAll()
	if r := <-second; r.err != nil {
		t.Fatal(r.err)
	}
	passAndCheckEveryDisk(t, fc, c, n)
}

// TestAFailedChunkWriteIsRetried: a chunk whose writes fail while the next
// is judged makes that next pass fail and the full pass due again; the
// retry writes every disk.
func TestAFailedChunkWriteIsRetried(t *testing.T) {
	const n, chunk = 12, 5
	fc, c := chunkedFleet(t, n, chunk)
	var failing atomic.Bool
	failing.Store(true)
	fc.react("patch", "persistentvolumeclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("injected: API server unavailable")
		}
		return false, nil, nil
	})
	ctx := t.Context()
	c.markFull()
	if more, err := c.passDue(ctx); err != nil || !more {
		t.Fatalf("first chunk: more %v, err %v; want its writes in flight", more, err)
	}
	if _, err := c.passDue(ctx); err == nil {
		t.Fatal("the pass after a chunk whose writes failed reported no error")
	}
	if !c.due.FullDue() {
		t.Fatal("a full pass's failed chunk did not make the full pass due again")
	}
	_ = c.awaitWrites() // the second chunk's writes, failed too
	failing.Store(false)
	passAndCheckEveryDisk(t, fc, c, n)
}

// TestADiskJudgedAgainBeforeItsEchoIsWrittenOnce: a disk judged again while
// the claim cache still shows it as before its record was written is not
// written again (nor warned of again); once the cache shows the claim
// changed, by anyone, the disk is judged against what it says.
func TestADiskJudgedAgainBeforeItsEchoIsWrittenOnce(t *testing.T) {
	fc, c := chunkedFleet(t, 1, 10)
	var patches atomic.Int64
	fc.react("patch", "persistentvolumeclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		return false, nil, nil
	})
	ctx := t.Context()
	key := "tenant-a/d00"
	stale := c.claim(types.NamespacedName{Namespace: "tenant-a", Name: "d00"})
	judge := func(claim *corev1.PersistentVolumeClaim) {
		t.Helper()
		sources := c.predIn.Load().ReadDataSources()
		inv := c.storeInventory([]string{key}, sources)
		inv.Claims = func(types.NamespacedName) *corev1.PersistentVolumeClaim { return claim }
		pred, _ := c.newPredictor(inv, sources)
		ev := verdict.EvaluateWith(inv, c.cfg, c.cfg.Clock(), pred)
		if len(ev.Assessments) != 1 {
			t.Fatalf("%d assessments, want 1", len(ev.Assessments))
		}
		if err := c.writer.Publish(ctx, ev.Assessments[0], inv); err != nil {
			t.Fatal(err)
		}
	}
	judge(stale)
	judge(stale) // the echo has not reached the cache
	if n := patches.Load(); n != 1 {
		t.Fatalf("%d patches for one record judged twice before its echo, want 1", n)
	}
	moved := stale.DeepCopy() // someone else's update, our record not on it
	moved.ResourceVersion += "1"
	judge(moved)
	if n := patches.Load(); n != 2 {
		t.Fatalf("%d patches after the cache showed the claim without the record, want 2", n)
	}
}
