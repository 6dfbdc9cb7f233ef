package cloner

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/evidence"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/schedule"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

const (
	indexByHandle   = "volumeHandle"
	indexBySnapshot = "snapshotHandle"
	// minPassInterval spaces verdict passes under a burst of object changes.
	minPassInterval = time.Second
)

// Controller is the cloner: every replica feeds it observations (Observe)
// and runs RunEvidence; the leader also runs RunVerdicts.
type Controller struct {
	cfg     config.Config
	clients config.Clients

	// evidence is this replica's evidence loop.
	evidence *evidence.Loop

	started  atomic.Bool
	coreSync []cache.InformerSynced
	pvcInf   cache.SharedIndexInformer
	pvInf    cache.SharedIndexInformer
	scInf    cache.SharedIndexInformer
	dvInf    atomic.Pointer[cache.SharedIndexInformer]
	vscInf   atomic.Pointer[cache.SharedIndexInformer]
	vsInf    atomic.Pointer[cache.SharedIndexInformer]
	dvReady  chan struct{}
	// claimUIDs and dataVolumeUIDs find a PVC and a DataVolume by UID.
	claimUIDs, dataVolumeUIDs *fleet.UIDKeys
	// cloneClaims remembers when CDI made each tmp-pvc, for the timelines
	// of clones that end between two passes.
	cloneClaims *fleet.ClaimTimes
	// predIn holds the clone-path prediction's informers (predict_inputs.go).
	predIn atomic.Pointer[fleet.PredictionInputs]

	wake chan struct{} // a verdict pass is due

	// writer sends the verdict writes and keeps what this process wrote.
	writer *publish.Writer

	// mu guards snap and heard; the other state has its own owner.
	mu   sync.Mutex
	snap *ledger.Snapshot

	// ledger is the leader's copy of the ledger; only the goroutine running
	// passes touches it.
	ledger *ledger.LedgerBook
	// heldFacts and heldPrune wait for a full pass's last chunk
	// (countPass); only the goroutine running passes touches them.
	heldFacts []ledger.LedgerFact
	heldPrune bool
	// writing is the chunk whose verdict writes are still going while the
	// next chunk is judged (writeBehind); only the goroutine running passes
	// touches it.
	writing *publish.Chunk

	// due is which disks are judged next and what each was last judged
	// (incremental.go).
	due *schedule.Queue
	// heard holds CDI's Warning events on each disk stuck by age
	// (hearing.go), under mu.
	heard map[string]verdict.HeardWords
	// judgedCount counts disk judgements, for tests of how much a change costs.
	judgedCount atomic.Int64
	// passes counts finished verdict passes (Snapshot.Passes).
	passes atomic.Int64
	// dataVolumesDeleted: a DataVolume went away since the last prune.
	dataVolumesDeleted atomic.Bool
}

// New validates the configuration and builds a Controller; nothing runs
// until Start.
func New(cfg config.Config, clients config.Clients) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := clients.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg: cfg, clients: clients,
		dvReady:   make(chan struct{}),
		claimUIDs: fleet.NewUIDKeys(), dataVolumeUIDs: fleet.NewUIDKeys(), cloneClaims: fleet.NewClaimTimes(),
		wake:  make(chan struct{}, 1),
		due:   schedule.New(passChunk),
		heard: map[string]verdict.HeardWords{},
	}
	c.writer = publish.NewWriter(clients.Kube, cfg.Clock, c.due.Recheck)
	c.evidence = evidence.New(clients.Kube, cfg.Clock, cfg.EvidenceQueue, cfg.EvidenceTTL,
		evidence.Lookup{VolumeByHandle: c.pvByHandle, TargetClaim: c.targetClaim, ContentSource: c.contentSource})
	return c, nil
}

// Observe takes one finished CSI call. It never blocks: when the queue is
// full the observation is dropped and counted
// (csi_clone_evidence_dropped_total).
func (c *Controller) Observe(o sidecar.Observation) { c.evidence.Observe(o) }

// RunEvidence turns observations into annotations until ctx ends or
// FinishEvidence asks it to persist what it holds and stop. Every replica
// runs it: the CSI calls reach whichever replica's relay the active
// csi-provisioner uses, not necessarily the leader's.
func (c *Controller) RunEvidence(ctx context.Context) error {
	if err := c.waitCore(ctx); err != nil {
		return err
	}
	return c.evidence.Run(ctx)
}

// FinishEvidence is for shutdown, once nothing feeds Observe any more (the
// relay has closed and handed over what its tap had queued): RunEvidence
// applies every queued observation, writes the evidence onto the PVs,
// waiting for the PVs the provisioner is still creating, and returns. It
// waits at most until ctx ends and then says what was not written. The
// informers must run until it returns.
func (c *Controller) FinishEvidence(ctx context.Context) error { return c.evidence.Finish(ctx) }

// Observes implements sidecar.MethodSelector: the evidence is made of the
// calls whose fields the tap decodes; the rest need not be queued.
func (c *Controller) Observes(method string) bool { return sidecar.DecodedMethod(method) }

var (
	_ sidecar.Observer       = (*Controller)(nil)
	_ sidecar.MethodSelector = (*Controller)(nil)
)

// Start starts the informers for the life of ctx and returns at once.
// DataVolumes and VolumeSnapshotContents are watched as soon as their CRDs
// are served: a missing CDI must not stop the sidecar (it sits in the CSI
// data path), it only delays the verdicts.
func (c *Controller) Start(ctx context.Context) {
	if !c.started.CompareAndSwap(false, true) {
		return
	}
	// No informer resync: nothing is re-judged unless it changed (or the
	// --resync-period full pass comes).
	f := informers.NewSharedInformerFactory(c.clients.Kube, 0)
	c.pvcInf = f.Core().V1().PersistentVolumeClaims().Informer()
	c.pvInf = f.Core().V1().PersistentVolumes().Informer()
	c.scInf = f.Storage().V1().StorageClasses().Informer()
	must(c.pvcInf.SetTransform(record.CacheClaimFrom(c.pvcInf.GetStore().GetByKey)))
	must(c.pvInf.SetTransform(fleet.CacheVolumeFor(c.cfg.GoldenNamespaces())))
	must(c.pvInf.AddIndexers(cache.Indexers{indexByHandle: fleet.PvHandleIndex}))
	must(c.pvcInf.AddIndexers(fleet.ClaimIndexers(c.cfg.GoldenNamespaces())))
	must(c.claimUIDs.Track(c.pvcInf))
	c.watchForVerdicts()
	c.coreSync = []cache.InformerSynced{c.pvcInf.HasSynced, c.pvInf.HasSynced, c.scInf.HasSynced}
	f.Start(ctx.Done())
	go c.watchCRDs(ctx)
	c.startPredictionInputs(ctx)
}

func must(err error) {
	if err != nil {
		panic(err) // adding indexers before start cannot fail
	}
}

func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// watchCRDs starts the dynamic informers once their resources are served.
func (c *Controller) watchCRDs(ctx context.Context) {
	f := dynamicinformer.NewDynamicSharedInformerFactory(c.clients.Dynamic, 0)
	t := time.NewTicker(c.cfg.ResyncPeriod)
	defer t.Stop()
	for {
		if c.vscInf.Load() == nil && c.served(fleet.VolumeSnapshotContentGVR) {
			inf := f.ForResource(fleet.VolumeSnapshotContentGVR).Informer()
			must(inf.SetTransform(fleet.CacheUnstructured))
			must(inf.AddIndexers(cache.Indexers{indexBySnapshot: fleet.SnapshotHandleIndex}))
			c.vscInf.Store(&inf)
			f.Start(ctx.Done())
		}
		if c.vsInf.Load() == nil && c.served(fleet.VolumeSnapshotGVR) {
			c.vsInf.Store(c.watchGoldenSnapshots(f))
			f.Start(ctx.Done())
		}
		if c.dvInf.Load() == nil && c.served(fleet.DataVolumeGVR) {
			inf := f.ForResource(fleet.DataVolumeGVR).Informer()
			must(inf.SetTransform(fleet.CacheDataVolume))
			must(inf.AddIndexers(fleet.DataVolumeIndexers(c.cfg.GoldenNamespaces())))
			onEvent(inf, c.dataVolumeChanged)
			must(c.dataVolumeUIDs.Track(inf))
			_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { c.dataVolumesDeleted.Store(true) }})
			must(err)
			f.Start(ctx.Done())
			if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				c.dvInf.Store(&inf)
				close(c.dvReady)
			}
		}
		if c.dvInf.Load() != nil && c.vscInf.Load() != nil && c.vsInf.Load() != nil {
			return
		}
		if c.dvInf.Load() == nil {
			klog.V(2).InfoS("DataVolumes are not served yet (is CDI installed?); verdicts wait", "resource", fleet.DataVolumeGVR.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchGoldenSnapshots makes the VolumeSnapshot informer: a golden
// namespace's snapshots are image goldens (fleet.AddSnapshots), and a change
// to one asks for a pass over every disk, as a golden DataVolume's does.
func (c *Controller) watchGoldenSnapshots(f dynamicinformer.DynamicSharedInformerFactory) *cache.SharedIndexInformer {
	inf := f.ForResource(fleet.VolumeSnapshotGVR).Informer()
	must(inf.SetTransform(fleet.CacheUnstructured))
	onEvent(inf, func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok && c.cfg.GoldenNamespaces().Has(u.GetNamespace()) {
			c.markFull()
		}
	})
	return &inf
}

// served asks discovery whether a resource exists.
func (c *Controller) served(gvr schema.GroupVersionResource) bool {
	list, err := c.clients.Kube.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil || list == nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true
		}
	}
	return false
}

// waitCore waits for the core informers.
func (c *Controller) waitCore(ctx context.Context) error {
	if !c.started.Load() {
		return errors.New("cloner: Start must be called before RunEvidence/RunVerdicts")
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.coreSync...) {
		return ctx.Err()
	}
	return nil
}

// WaitSynced waits until every informer the verdicts need has synced (the
// DataVolume one only exists once CDI's CRD is served).
func (c *Controller) WaitSynced(ctx context.Context) error {
	if err := c.waitCore(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.dvReady:
		return nil
	}
}

// synced reports whether a pass would see a complete view.
func (c *Controller) synced() bool {
	select {
	case <-c.dvReady:
	default:
		return false
	}
	for _, s := range c.coreSync {
		if !s() {
			return false
		}
	}
	return true
}
