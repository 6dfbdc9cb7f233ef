package publish

import (
	"context"
	"sort"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// Writer sends the leader's verdict writes: each disk's record onto its
// claim, a Warning per new bad reason, one per malformed object; and keeps
// what this process wrote and emitted, so a write is not repeated before
// its echo arrives, while only a clone's progress changed, or across
// resyncs. Its writers, shared by every chunk in flight, hold one of its
// slots per write.
type Writer struct {
	kube  kubernetes.Interface
	clock func() time.Time
	// recheck asks for a disk to be judged again at a time (a progress
	// write that waits).
	recheck func(key string, at time.Time)
	slots   chan struct{}

	mu        sync.Mutex
	malformed *MalformedTracker
	emitted   map[string]bool // event keys emitted by this process
	// progressWritten is when each pending disk's record was last written
	// (progress.go).
	progressWritten map[string]time.Time
	// echoes are the records written whose echo the claim cache has not
	// shown yet (echo.go).
	echoes map[string]PendingEcho
}

// NewWriter builds a Writer that sends through kube, reads the time from
// clock and asks recheck to judge a disk again when its write waits.
func NewWriter(kube kubernetes.Interface, clock func() time.Time, recheck func(key string, at time.Time)) *Writer {
	return &Writer{kube: kube, clock: clock, recheck: recheck,
		slots:     make(chan struct{}, publishWriters),
		malformed: NewMalformedTracker(), emitted: map[string]bool{},
		progressWritten: map[string]time.Time{}, echoes: map[string]PendingEcho{},
	}
}

// Forget drops what the Writer keeps of a disk that is gone.
func (w *Writer) Forget(key string) {
	w.mu.Lock()
	delete(w.progressWritten, key)
	delete(w.echoes, key)
	w.mu.Unlock()
}

// Malformed counts the malformed objects seen, per kind.
func (w *Writer) Malformed() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.malformed.Snapshot()
}

// publishWriters is how many disks' records are written at once, across
// the chunks in flight: enough to reach the client's --kube-api-qps
// (200/s) when a busy API server takes 150 ms a patch (16 writers made
// about 60 patches/s on this 2-core machine under load); the client's rate
// limit, not this, bounds the load.
const publishWriters = 32

// Chunk is one chunk's verdict writes in flight: the DataVolume keys it
// judged and whether it was part of a full pass, for redoing it if a write
// failed.
type Chunk struct {
	Keys []string
	Full bool
	done chan error
}

// Start writes a chunk's records (publishAll) and returns at once.
func (w *Writer) Start(ctx context.Context, keys []string, full bool, as []verdict.Assessment, inv *fleet.Inventory) *Chunk {
	ch := &Chunk{Keys: keys, Full: full, done: make(chan error, 1)}
	go func() { ch.done <- w.publishAll(ctx, as, inv) }()
	return ch
}

// Wait waits for the chunk's writes; an error is the first write's that
// failed.
func (ch *Chunk) Wait() error { return <-ch.done }

// publishAll persists the pass's records, the bad and the never written
// first (an upgrade that changes every record must not make a bad disk wait
// behind thousands of good ones), each write holding one of the shared
// writer slots.
func (w *Writer) publishAll(ctx context.Context, as []verdict.Assessment, inv *fleet.Inventory) error {
	work := make(chan verdict.Assessment)
	errs := make(chan error, publishWriters)
	var wg sync.WaitGroup
	for range publishWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for a := range work {
				w.slots <- struct{}{}
				err := w.Publish(ctx, a, inv)
				<-w.slots
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

// Publish persists one disk's record and emits a Warning for each bad
// reason the persisted record did not already carry: a resync that finds
// nothing new writes nothing and emits nothing.
func (w *Writer) Publish(ctx context.Context, a verdict.Assessment, inv *fleet.Inventory) error {
	rec := a.Record
	pvc := inv.ClaimOf(a.Disk.Namespace, a.Disk.ClaimName)
	old, err := record.PersistedRecord(pvc)
	if err != nil {
		w.NoteMalformed(verdict.MalformedAnnotation(pvc, "PersistentVolumeClaim", err))
		old = nil
	}
	digest := record.DigestRecord(rec)
	key := a.Disk.Namespace + "/" + a.Disk.Name
	if old.SameAs(digest) {
		w.echoSeen(key)
		return nil
	}
	if w.awaitingEcho(key, pvc, digest) || w.deferProgress(key, digest, old) {
		return nil
	}
	rec.Since = w.clock().UTC().Truncate(time.Second)
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
		if err := w.Warn(ctx, DiskTarget(a.Disk), record.EventReason(reason), "", WarningMessage(rec, reason)); err != nil {
			return err
		}
	}
	if pvc == nil {
		return nil // CDI has not created the claim yet; the next pass writes it
	}
	err = PatchPVC(ctx, w.kube, pvc, "", map[string]*string{
		fleet.AnnCloneVerdict:  PtrTo(rec.Verdict),
		fleet.AnnCloneEvidence: PtrTo(record.MustJSON(rec)),
	})
	if err == nil {
		w.noteWritten(key, rec)
		w.expectEcho(key, pvc, digest)
	}
	return err
}

// ReportMalformed emits one Warning per newly seen unreadable object.
func (w *Writer) ReportMalformed(ctx context.Context, ms []fleet.MalformedObject) error {
	var firstErr error
	for _, m := range ms {
		if !w.NoteMalformed(m) {
			continue
		}
		t := EventTarget{APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID}
		err := w.Warn(ctx, t, ReasonMalformedObject, m.ResourceVersion, "csi-clone-sidecar cannot read this object and skips it: "+m.Err+
			". Fix: correct the object (or delete it); nothing else is affected")
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (w *Writer) NoteMalformed(m fleet.MalformedObject) bool {
	if m.Kind == "" {
		m.Kind = "DataVolume"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	isNew := w.malformed.Add(m)
	if isNew {
		klog.InfoS("Skipping an object that cannot be read", "kind", m.Kind, "namespace", m.Namespace, "name", m.Name, "err", m.Err)
	}
	return isNew
}
