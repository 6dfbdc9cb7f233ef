package cloner

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
)

// fakeCluster is client-go's fake clientsets holding a world's objects,
// with discovery serving the CDI and snapshot resources and the API
// server's resourceVersion check on ConfigMaps (the ledger's guard).
type fakeCluster struct {
	kube *kubefake.Clientset
	dyn  *dynamicfake.FakeDynamicClient
}

func newFakeCluster(t *testing.T, w *clonertest.World) *fakeCluster {
	t.Helper()
	var kubeObjs []runtime.Object
	for _, o := range w.Pvcs {
		kubeObjs = append(kubeObjs, o)
	}
	for _, o := range w.Pvs {
		kubeObjs = append(kubeObjs, o)
	}
	for _, o := range w.Scs {
		kubeObjs = append(kubeObjs, o)
	}
	kube := kubefake.NewSimpleClientset(kubeObjs...)
	kube.Resources = []*metav1.APIResourceList{
		{GroupVersion: fleet.DataVolumeGVR.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: "datavolumes", Namespaced: true, Kind: "DataVolume"}}},
		{GroupVersion: fleet.VolumeSnapshotContentGVR.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: "volumesnapshotcontents", Kind: "VolumeSnapshotContent"},
			{Name: "volumesnapshots", Namespaced: true, Kind: "VolumeSnapshot"}}},
	}
	enforceResourceVersion(kube, "configmaps")
	var dynObjs []runtime.Object
	for _, dv := range w.Dvs {
		dynObjs = append(dynObjs, clonertest.ToUnstructured(t, dv))
	}
	for _, u := range append(append([]*unstructured.Unstructured(nil), w.Raw...), w.Vscs...) {
		dynObjs = append(dynObjs, u)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		fleet.DataVolumeGVR: "DataVolumeList", fleet.VolumeSnapshotContentGVR: "VolumeSnapshotContentList", fleet.VolumeSnapshotGVR: "VolumeSnapshotList",
		fleet.StorageProfileGVR: "StorageProfileList", fleet.CDIGVR: "CDIList", fleet.CDIConfigGVR: "CDIConfigList", fleet.DataSourceGVR: "DataSourceList", fleet.VolumeSnapshotClassGVR: "VolumeSnapshotClassList",
		report.GrafanaDashboardGVR: "GrafanaDashboardList",
	}, dynObjs...)
	return &fakeCluster{kube: kube, dyn: dyn}
}

// enforceResourceVersion makes the fake behave like the API server for one
// resource: an update must carry the stored resourceVersion, and every write
// gets a new one. The plain fake ignores resourceVersions.
func enforceResourceVersion(kube *kubefake.Clientset, resource string) {
	var mu sync.Mutex
	next := 100
	bump := func(obj runtime.Object) {
		mu.Lock()
		defer mu.Unlock()
		next++
		obj.(metav1.Object).SetResourceVersion(strconv.Itoa(next))
	}
	kube.PrependReactor("create", resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		bump(a.(clienttesting.CreateAction).GetObject())
		return false, nil, nil
	})
	kube.PrependReactor("update", resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		obj := a.(clienttesting.UpdateAction).GetObject().(metav1.Object)
		cur, err := kube.Tracker().Get(a.GetResource(), a.GetNamespace(), obj.GetName())
		if err != nil {
			return true, nil, err
		}
		if cur.(metav1.Object).GetResourceVersion() != obj.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), obj.GetName(), nil)
		}
		bump(obj.(runtime.Object))
		return false, nil, nil
	})
}

// react adds a reactor in front of the others. The fake's own
// PrependReactor does not lock against the calls the running informers
// make; its embedded lock does.
func (fc *fakeCluster) react(verb, resource string, fn clienttesting.ReactionFunc) {
	fc.kube.Lock()
	defer fc.kube.Unlock()
	fc.kube.PrependReactor(verb, resource, fn)
}

func (fc *fakeCluster) clients() config.Clients {
	return config.Clients{Kube: fc.kube, Dynamic: fc.dyn}
}

// controller starts a Controller on the cluster and waits for its caches.
func (fc *fakeCluster) controller(t *testing.T, ctx context.Context, cfg config.Config) *Controller {
	t.Helper()
	return fc.controllerWith(t, ctx, cfg, fc.clients())
}

// controllerWith starts a Controller on the given clients (fc's, wrapped):
// a client is wrapped before the controller starts, since swapping it later
// races the controller's goroutines that read it.
func (fc *fakeCluster) controllerWith(t *testing.T, ctx context.Context, cfg config.Config, clients config.Clients) *Controller {
	t.Helper()
	cfg.ResyncPeriod = time.Second
	c, err := New(cfg, clients)
	if err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitSynced(waitCtx); err != nil {
		t.Fatalf("informers never synced: %v", err)
	}
	return c
}

// eventually polls cond until it holds; it fails only after a generous
// bound, and never asserts how long anything took.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("never happened: %s", what)
	}
}

// settle waits until the controller's caches hold exactly what the API
// holds (the fake keeps no resourceVersions, so objects are compared).
func (fc *fakeCluster) settle(t *testing.T, c *Controller) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "caches caught up", func() bool {
		pvcs, _ := fc.kube.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
		pvs, _ := fc.kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		dvs, _ := fc.dyn.Resource(fleet.DataVolumeGVR).List(ctx, metav1.ListOptions{})
		var wantPVC, wantPV, wantDV []any
		// The caches hold what the informers' transforms keep.
		for i := range pvcs.Items {
			wantPVC = append(wantPVC, mustTransform(record.CacheClaim(&pvcs.Items[i])))
		}
		for i := range pvs.Items {
			wantPV = append(wantPV, mustTransform(fleet.CacheVolume(&pvs.Items[i])))
		}
		for i := range dvs.Items {
			wantDV = append(wantDV, mustTransform(fleet.CacheDataVolume(&dvs.Items[i])))
		}
		return sameObjects(c.pvcInf.GetStore().List(), wantPVC) && sameObjects(c.pvInf.GetStore().List(), wantPV) &&
			sameObjects((*c.dvInf.Load()).GetStore().List(), wantDV)
	})
}

func mustTransform(obj any, err error) any {
	if err != nil {
		panic(err) // the transforms return no errors
	}
	return obj
}

func sameObjects(cached, want []any) bool {
	if len(cached) != len(want) {
		return false
	}
	index := map[string]string{}
	for _, o := range want {
		index[keyOf(o)] = comparableText(o)
	}
	for _, o := range cached {
		if index[keyOf(o)] != comparableText(o) {
			return false
		}
	}
	return true
}

func keyOf(o any) string {
	m := o.(metav1.Object)
	return m.GetNamespace() + "/" + m.GetName()
}

func comparableText(o any) string {
	b, _ := json.Marshal(o)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	delete(m, "kind")
	delete(m, "apiVersion")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
		delete(md, "resourceVersion")
	}
	b, _ = json.Marshal(m)
	return string(b)
}

func (fc *fakeCluster) pvc(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := fc.kube.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

func (fc *fakeCluster) record(t *testing.T, ns, name string) *record.Record {
	t.Helper()
	r, err := record.ReadRecord(fc.pvc(t, ns, name))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ledger is the whole ledger, root and shards summed, with every mark.
func (fc *fakeCluster) ledger(t *testing.T, cfg config.Config) *ledger.Ledger {
	t.Helper()
	b, err := ledger.ReadLedgerBook(context.Background(), fc.kube, cfg.LedgerNamespace, cfg.LedgerName)
	if err != nil {
		t.Fatal(err)
	}
	return b.Merged(true)
}

// warnings lists the Warning events by involved object name and reason.
func (fc *fakeCluster) warnings(t *testing.T) []corev1.Event {
	t.Helper()
	evs, err := fc.kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return evs.Items
}

func countReason(evs []corev1.Event, object, reason string) int {
	n := 0
	for _, e := range evs {
		if e.InvolvedObject.Name == object && e.Reason == reason {
			n++
		}
	}
	return n
}

// everything dumps every object of the cluster as JSON, for "never appears" checks.
func (fc *fakeCluster) everything(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var all []any
	pvcs, _ := fc.kube.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	pvs, _ := fc.kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	cms, _ := fc.kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	evs, _ := fc.kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	all = append(all, pvcs, pvs, cms, evs)
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
