package cloner

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// startPredictionInputs starts the informers for the life of ctx.
func (c *Controller) startPredictionInputs(ctx context.Context) {
	p := &fleet.PredictionInputs{Synced: map[schema.GroupVersionResource]cache.SharedIndexInformer{}}
	f := informers.NewSharedInformerFactory(c.clients.Kube, c.cfg.ResyncPeriod)
	p.CsiDrivers = f.Storage().V1().CSIDrivers().Informer()
	onEvent(p.CsiDrivers, func(any) { c.markFull() })
	f.Start(ctx.Done())
	c.predIn.Store(p)
	go c.watchPredictionCRDs(ctx, p)
}

// watchPredictionCRDs starts an informer for each prediction resource once
// it is served, and records it once synced.
func (c *Controller) watchPredictionCRDs(ctx context.Context, p *fleet.PredictionInputs) {
	f := dynamicinformer.NewDynamicSharedInformerFactory(c.clients.Dynamic, c.cfg.ResyncPeriod)
	started := map[schema.GroupVersionResource]bool{}
	t := time.NewTicker(c.cfg.ResyncPeriod)
	defer t.Stop()
	for {
		for _, gvr := range fleet.PredictionResources {
			if started[gvr] {
				continue
			}
			if !c.served(gvr) {
				if gvr == fleet.VolumeSnapshotClassGVR {
					p.SetSnapshotsAbsent(true)
				}
				continue
			}
			started[gvr] = true
			inf := f.ForResource(gvr).Informer()
			onEvent(inf, func(any) { c.markFull() })
			f.Start(ctx.Done())
			go p.RecordWhenSynced(ctx, gvr, inf, c.markFull)
		}
		if len(started) == len(fleet.PredictionResources) {
			return
		}
		klog.V(2).InfoS("Clone-path prediction waits for CDI's resources to be served", "served", len(started))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// newPredictor builds the prediction for an inventory; nil while the
// prediction's informers have not synced.
func (c *Controller) newPredictor(inv *fleet.Inventory, sources fleet.DataSources) (*verdict.Predictor, []fleet.MalformedObject) {
	in, malformed, ok := c.predIn.Load().Inputs(sources)
	if !ok {
		return nil, malformed
	}
	return verdict.BuildPredictor(in, inv), malformed
}
