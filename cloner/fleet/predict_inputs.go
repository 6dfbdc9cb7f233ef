package fleet

import (
	"context"
	"fmt"
	"sync"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
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
var PredictionResources = []schema.GroupVersionResource{StorageProfileGVR, CDIGVR, CDIConfigGVR, DataSourceGVR, VolumeSnapshotClassGVR}

// predictionInputs holds the informers of the prediction's own objects.
// They start beside the verdicts' informers and never hold the verdicts up:
// until they have synced (CDI's CRDs served, RBAC granted) there is simply
// no prediction.
type PredictionInputs struct {
	CsiDrivers cache.SharedIndexInformer

	mu sync.Mutex
	// dynamic informers by resource, once the resource is served and the
	// informer synced; snapshotsAbsent is set while the cluster serves no
	// VolumeSnapshotClasses (CDI then finds none either).
	Synced          map[schema.GroupVersionResource]cache.SharedIndexInformer
	snapshotsAbsent bool
}

func (p *PredictionInputs) RecordWhenSynced(ctx context.Context, gvr schema.GroupVersionResource, inf cache.SharedIndexInformer, then func()) {
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	p.mu.Lock()
	p.Synced[gvr] = inf
	if gvr == VolumeSnapshotClassGVR {
		p.snapshotsAbsent = false
	}
	p.mu.Unlock()
	then()
}

func (p *PredictionInputs) SetSnapshotsAbsent(v bool) {
	p.mu.Lock()
	p.snapshotsAbsent = v
	p.mu.Unlock()
}

// DataSources are the DataSources a pass reads once: for its claim
// goldens (NamedClaims) and its prediction (Inputs). Synced is false until
// the informer has synced; those that cannot be read are Malformed.
type DataSources struct {
	List      []*cdiv1.DataSource
	Malformed []MalformedObject
	Synced    bool
}

// ReadDataSources converts the DataSources the informer holds.
func (p *PredictionInputs) ReadDataSources() DataSources {
	inf := p.synced(DataSourceGVR)
	if inf == nil {
		return DataSources{}
	}
	var ds DataSources
	ds.List = ConvertAll[cdiv1.DataSource](UnstructuredList(inf.GetStore().List()), &ds.Malformed)
	ds.Synced = true
	return ds
}

// Claims are the claims the readable DataSources name with a namespace.
func (ds DataSources) Claims() []types.NamespacedName { return DataSourceClaims(ds.List) }

// Inputs copies what the informers hold, with the pass's DataSources; ok is
// false until every input has synced. Objects that cannot be read are
// returned as malformed and left out.
func (p *PredictionInputs) Inputs(sources DataSources) (in predict.Inputs, malformed []MalformedObject, ok bool) {
	if p == nil || !p.CsiDrivers.HasSynced() {
		return in, nil, false
	}
	p.mu.Lock()
	profiles, cdis, configs := p.Synced[StorageProfileGVR], p.Synced[CDIGVR], p.Synced[CDIConfigGVR]
	snaps, absent := p.Synced[VolumeSnapshotClassGVR], p.snapshotsAbsent
	p.mu.Unlock()
	if profiles == nil || cdis == nil || configs == nil || !sources.Synced || (snaps == nil && !absent) {
		return in, nil, false
	}
	for _, x := range p.CsiDrivers.GetStore().List() {
		in.CSIDrivers = append(in.CSIDrivers, x.(*storagev1.CSIDriver).Name)
	}
	in.Profiles = ConvertAll[cdiv1.StorageProfile](UnstructuredList(profiles.GetStore().List()), &malformed)
	in.CDIs = ConvertAll[cdiv1.CDI](UnstructuredList(cdis.GetStore().List()), &malformed)
	in.CDIConfigs = ConvertAll[cdiv1.CDIConfig](UnstructuredList(configs.GetStore().List()), &malformed)
	in.DataSources = sources.List
	malformed = append(malformed, sources.Malformed...)
	if snaps != nil {
		in.SnapshotClasses = SnapshotClasses(UnstructuredList(snaps.GetStore().List()))
	}
	return in, malformed, true
}

// snapshotClasses reads the fields CDI reads of VolumeSnapshotClasses.
func SnapshotClasses(us []*unstructured.Unstructured) []predict.SnapshotClass {
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
func ConvertAll[T any](us []*unstructured.Unstructured, bad *[]MalformedObject) []*T {
	out := make([]*T, 0, len(us))
	for _, u := range us {
		obj := new(T)
		if err := fromUnstructured(u, obj); err != nil {
			*bad = append(*bad, MalformedFrom(u, err))
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

func UnstructuredList(xs []any) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(xs))
	for _, x := range xs {
		if u, ok := x.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}

// DataSource is the DataSource ns/name as the informer holds it; nil while
// it is unknown, unreadable, or the informer has not synced (a disk that
// reaches its golden only through it is then not a disk yet; the sync's
// full pass judges it).
func (p *PredictionInputs) DataSource(ref types.NamespacedName) *cdiv1.DataSource {
	inf := p.synced(DataSourceGVR)
	if inf == nil {
		return nil
	}
	obj, ok, err := inf.GetStore().GetByKey(ref.String())
	if err != nil || !ok {
		return nil
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	ds := &cdiv1.DataSource{}
	if fromUnstructured(u, ds) != nil {
		return nil
	}
	return ds
}

// DataSourceClaims are the claims the DataSources name with a namespace
// (an empty one is each user's own).
func DataSourceClaims(sources []*cdiv1.DataSource) []types.NamespacedName {
	var out []types.NamespacedName
	for _, ds := range sources {
		if pvc := cdirules.DataSourcePVC(ds); pvc != nil && pvc.Namespace != "" && pvc.Name != "" {
			out = append(out, types.NamespacedName{Namespace: pvc.Namespace, Name: pvc.Name})
		}
	}
	return out
}

// DataSourcesOf are the DataSources whose PVC is the golden's (a namespace
// left empty in a DataSource is its users', which no golden change can
// name, so those are left to the full passes).
func (p *PredictionInputs) DataSourcesOf(golden types.NamespacedName) []types.NamespacedName {
	inf := p.synced(DataSourceGVR)
	if inf == nil {
		return nil
	}
	var bad []MalformedObject
	var out []types.NamespacedName
	for _, ds := range ConvertAll[cdiv1.DataSource](UnstructuredList(inf.GetStore().List()), &bad) {
		if pvc := cdirules.DataSourcePVC(ds); pvc != nil && pvc.Namespace == golden.Namespace && pvc.Name == golden.Name {
			out = append(out, types.NamespacedName{Namespace: ds.Namespace, Name: ds.Name})
		}
	}
	return out
}

func (p *PredictionInputs) synced(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Synced[gvr]
}
