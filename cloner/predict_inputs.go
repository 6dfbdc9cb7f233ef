package cloner

import (
	"context"
	"fmt"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// What the clone-path prediction reads besides the verdicts' objects. Read
// only; list and watch through informers.
var (
	StorageProfileGVR      = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "storageprofiles"}
	CDIGVR                 = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "cdis"}
	CDIConfigGVR           = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "cdiconfigs"}
	DataSourceGVR          = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "datasources"}
	VolumeSnapshotClassGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}
)

// predictionResources are the CDI and snapshot resources the prediction
// watches.
var predictionResources = []schema.GroupVersionResource{StorageProfileGVR, CDIGVR, CDIConfigGVR, DataSourceGVR, VolumeSnapshotClassGVR}

// predictionInputs holds the informers of the prediction's own objects.
// They start beside the verdicts' informers and never hold the verdicts up:
// until they have synced (CDI's CRDs served, RBAC granted) there is simply
// no prediction.
type predictionInputs struct {
	csiDrivers cache.SharedIndexInformer

	mu sync.Mutex
	// dynamic informers by resource, once the resource is served and the
	// informer synced; snapshotsAbsent is set while the cluster serves no
	// VolumeSnapshotClasses (CDI then finds none either).
	synced          map[schema.GroupVersionResource]cache.SharedIndexInformer
	snapshotsAbsent bool
}

// startPredictionInputs starts the informers for the life of ctx.
func (c *Controller) startPredictionInputs(ctx context.Context) {
	p := &predictionInputs{synced: map[schema.GroupVersionResource]cache.SharedIndexInformer{}}
	f := informers.NewSharedInformerFactory(c.clients.Kube, c.cfg.ResyncPeriod)
	p.csiDrivers = f.Storage().V1().CSIDrivers().Informer()
	onEvent(p.csiDrivers, func(any) { c.markFull() })
	f.Start(ctx.Done())
	c.predIn.Store(p)
	go c.watchPredictionCRDs(ctx, p)
}

// watchPredictionCRDs starts an informer for each prediction resource once
// it is served, and records it once synced.
func (c *Controller) watchPredictionCRDs(ctx context.Context, p *predictionInputs) {
	f := dynamicinformer.NewDynamicSharedInformerFactory(c.clients.Dynamic, c.cfg.ResyncPeriod)
	started := map[schema.GroupVersionResource]bool{}
	t := time.NewTicker(c.cfg.ResyncPeriod)
	defer t.Stop()
	for {
		for _, gvr := range predictionResources {
			if started[gvr] {
				continue
			}
			if !c.served(gvr) {
				if gvr == VolumeSnapshotClassGVR {
					p.setSnapshotsAbsent(true)
				}
				continue
			}
			started[gvr] = true
			inf := f.ForResource(gvr).Informer()
			onEvent(inf, func(any) { c.markFull() })
			f.Start(ctx.Done())
			go p.recordWhenSynced(ctx, gvr, inf, c.markFull)
		}
		if len(started) == len(predictionResources) {
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

func (p *predictionInputs) recordWhenSynced(ctx context.Context, gvr schema.GroupVersionResource, inf cache.SharedIndexInformer, then func()) {
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	p.mu.Lock()
	p.synced[gvr] = inf
	if gvr == VolumeSnapshotClassGVR {
		p.snapshotsAbsent = false
	}
	p.mu.Unlock()
	then()
}

func (p *predictionInputs) setSnapshotsAbsent(v bool) {
	p.mu.Lock()
	p.snapshotsAbsent = v
	p.mu.Unlock()
}

// inputs copies what the informers hold; ok is false until every input has
// synced. Objects that cannot be read are returned as malformed and left out.
func (p *predictionInputs) inputs() (in predict.Inputs, malformed []fleet.MalformedObject, ok bool) {
	if p == nil || !p.csiDrivers.HasSynced() {
		return in, nil, false
	}
	p.mu.Lock()
	profiles, cdis, configs, sources := p.synced[StorageProfileGVR], p.synced[CDIGVR], p.synced[CDIConfigGVR], p.synced[DataSourceGVR]
	snaps, absent := p.synced[VolumeSnapshotClassGVR], p.snapshotsAbsent
	p.mu.Unlock()
	if profiles == nil || cdis == nil || configs == nil || sources == nil || (snaps == nil && !absent) {
		return in, nil, false
	}
	for _, x := range p.csiDrivers.GetStore().List() {
		in.CSIDrivers = append(in.CSIDrivers, x.(*storagev1.CSIDriver).Name)
	}
	in.Profiles = convertAll[cdiv1.StorageProfile](unstructuredList(profiles.GetStore().List()), &malformed)
	in.CDIs = convertAll[cdiv1.CDI](unstructuredList(cdis.GetStore().List()), &malformed)
	in.CDIConfigs = convertAll[cdiv1.CDIConfig](unstructuredList(configs.GetStore().List()), &malformed)
	in.DataSources = convertAll[cdiv1.DataSource](unstructuredList(sources.GetStore().List()), &malformed)
	if snaps != nil {
		in.SnapshotClasses = snapshotClasses(unstructuredList(snaps.GetStore().List()))
	}
	return in, malformed, true
}

// snapshotClasses reads the fields CDI reads of VolumeSnapshotClasses.
func snapshotClasses(us []*unstructured.Unstructured) []predict.SnapshotClass {
	out := make([]predict.SnapshotClass, 0, len(us))
	for _, u := range us {
		driver, _, _ := unstructured.NestedString(u.Object, "driver")
		out = append(out, predict.SnapshotClass{Name: u.GetName(), Driver: driver,
			Default: u.GetAnnotations()["snapshot.storage.kubernetes.io/is-default-class"] == "true"})
	}
	return out
}

// convertAll converts objects of a CDI kind; those that cannot be read are
// added to bad and left out.
func convertAll[T any](us []*unstructured.Unstructured, bad *[]fleet.MalformedObject) []*T {
	out := make([]*T, 0, len(us))
	for _, u := range us {
		obj := new(T)
		if err := fromUnstructured(u, obj); err != nil {
			*bad = append(*bad, fleet.MalformedFrom(u, err))
			continue
		}
		out = append(out, obj)
	}
	return out
}

// fromUnstructured converts an object of a CDI kind; a field of the wrong
// shape is an error, never a panic.
func fromUnstructured(u *unstructured.Unstructured, into any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cannot read %s: %v", u.GetKind(), r)
		}
	}()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		return fmt.Errorf("cannot read %s: %w", u.GetKind(), err)
	}
	return nil
}

// newPredictor builds the prediction for an inventory; nil while the
// prediction's informers have not synced.
func (c *Controller) newPredictor(inv *fleet.Inventory) (*verdict.Predictor, []fleet.MalformedObject) {
	in, malformed, ok := c.predIn.Load().inputs()
	if !ok {
		return nil, malformed
	}
	return verdict.BuildPredictor(in, inv), malformed
}
