package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// DataSource routes of the CDI differential: one arrangement in five
// reaches its source through spec.sourceRef to a DataSource, as KubeVirt
// and CDI publish boot sources, in the source's namespace, the batch's or a
// third one, naming the source with its namespace or without one (CDI reads
// a PVC's empty namespace as the DataVolume's, not the DataSource's:
// clone-controller-base.go populateSourceIfSourceRef, then findSourcePvc,
// and then fails to make its VolumeCloneSource; a snapshot's it looks up as
// named, in no namespace, and never finds).
// The prediction finds the source as the sidecar does (fleet.ClonedPVC,
// fleet.ClonedSnapshot, over the DataSource read back from the API); a
// source it resolves to that does not exist is one CDI waits for
// (CloneWithoutSource).

// diffVia routes an arrangement through a DataSource in namespace ns ("":
// the batch's) naming the source, without its namespace when unqualified.
type diffVia struct {
	ns          string
	unqualified bool
}

// diffDataSourceNamespace holds DataSources that are neither in the
// source's namespace nor the disk's.
const diffDataSourceNamespace = "cdirules-datasources"

// labelDiffChunk marks the DataSources a chunk made outside its namespace.
const labelDiffChunk = "cdirules.test/chunk"

// routeViaDataSource sends one arrangement in five through a DataSource:
// a golden's in the golden namespace, a batch source's in the batch's
// namespace or the third one; one time in eight it names the source
// without a namespace (a golden is then looked for in the disk's namespace
// and not found).
func routeViaDataSource(rng *rand.Rand, a *diffArrangement) {
	if rng.IntN(5) != 0 {
		return
	}
	if a.src.golden {
		a.via = &diffVia{ns: cluster.NamespaceGolden, unqualified: rng.IntN(8) == 0}
		return
	}
	a.via = &diffVia{ns: []string{"", diffDataSourceNamespace}[rng.IntN(2)], unqualified: rng.IntN(8) == 0}
}

// namespace is the DataSource's namespace for a disk of namespace batch.
func (v *diffVia) namespace(batch string) string {
	if v.ns == "" {
		return batch
	}
	return v.ns
}

// name is the arrangement's DataSource's name for a disk of namespace batch.
func (v *diffVia) name(batch string, a diffArrangement) string { return batch + "-" + a.name }

// route names the arrangement's route, for the coverage counts.
func (a diffArrangement) route(batch string) string {
	if a.via == nil {
		return "source"
	}
	where := "the disk's namespace"
	switch ns := a.via.namespace(batch); {
	case ns == a.src.namespace(batch) && ns != batch:
		where = "the source's namespace"
	case ns != batch:
		where = "a third namespace"
	}
	if a.via.unqualified {
		return "DataSource in " + where + ", source unqualified"
	}
	return "DataSource in " + where
}

// createDiffDataSource makes the arrangement's DataSource and returns it as
// read back from the API.
func createDiffDataSource(t *testing.T, ctx context.Context, c *cluster.Cluster, batch string, a diffArrangement) *cdiv1.DataSource {
	t.Helper()
	srcNS := a.src.namespace(batch)
	if a.via.unqualified {
		srcNS = ""
	}
	ds := &cdiv1.DataSource{TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataSource"},
		ObjectMeta: metav1.ObjectMeta{Namespace: a.via.namespace(batch), Name: a.via.name(batch, a), Labels: map[string]string{labelDiffChunk: batch}}}
	if a.src.snap != nil {
		ds.Spec.Source.Snapshot = &cdiv1.DataVolumeSourceSnapshot{Namespace: srcNS, Name: a.src.name}
	} else {
		ds.Spec.Source.PVC = &cdiv1.DataVolumeSourcePVC{Namespace: srcNS, Name: a.src.name}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ds)
	if err != nil {
		t.Fatal(err)
	}
	made, err := c.Dynamic.Resource(fleet.DataSourceGVR).Namespace(ds.Namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%s: DataSource: %v", a.name, err)
	}
	out := new(cdiv1.DataSource)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(made.Object, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// viaGolden is the golden the sidecar's routes find for an arrangement
// through its DataSource, and whether it exists: a PVC route to a claim
// that does not exist has no golden (CDI waits for it); a snapshot route to
// one is the missing snapshot the prediction knows (golden-missing). The
// break datasourcenamespace reads an empty namespace as the DataSource's.
func viaGolden(a diffArrangement, batch string, ds *cdiv1.DataSource, goldens map[string]predict.Golden, brk string) (predict.Golden, bool) {
	if brk == "datasourcenamespace" {
		ds = ds.DeepCopy()
		if pvc := ds.Spec.Source.PVC; pvc != nil && pvc.Namespace == "" {
			pvc.Namespace = ds.Namespace
		}
		if snap := ds.Spec.Source.Snapshot; snap != nil && snap.Namespace == "" {
			snap.Namespace = ds.Namespace
		}
	}
	dv := diffDataVolume(a, batch, "")
	lookup := func(r types.NamespacedName) *cdiv1.DataSource {
		if r.Namespace == ds.Namespace && r.Name == ds.Name {
			return ds
		}
		return nil
	}
	want := types.NamespacedName{Namespace: a.src.namespace(batch), Name: a.src.name}
	if a.src.snap != nil {
		ref, ok := fleet.ClonedSnapshot(dv, lookup)
		if ok && ref == want {
			return goldens[a.src.name], true
		}
		return predict.Golden{Namespace: ref.Namespace, Name: ref.Name, Snapshot: &cdirules.Snapshot{}}, true
	}
	ref, ok := fleet.ClonedPVC(dv, lookup)
	if ok && ref == want {
		return goldens[a.src.name], true
	}
	return predict.Golden{}, false
}

// waitDiffDataSources waits until CDI's DataSource controller has
// reconciled each DataSource (status.conditions set): CDI routes a
// DataVolume with a sourceRef from its informer's cache
// (controller-base.go getSourceRefOp), and a DataVolume created before the
// cache holds its DataSource is dropped, never reconciled again (seed 4,
// chunk 7: "Unable to get DataSource", no claim for 5 minutes). Boot
// sources exist long before their disks; the harness waits as they would.
func waitDiffDataSources(t *testing.T, ctx context.Context, c *cluster.Cluster, sources map[string]*cdiv1.DataSource) {
	t.Helper()
	for _, ds := range sources {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			u, err := c.Dynamic.Resource(fleet.DataSourceGVR).Namespace(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			return len(conditions) > 0, nil
		})
		if err != nil {
			t.Fatalf("DataSource %s/%s never reconciled by CDI: %v", ds.Namespace, ds.Name, err)
		}
	}
}

// emptyDiffDataSources deletes the DataSources a chunk made outside its
// namespace.
func emptyDiffDataSources(t *testing.T, ctx context.Context, c *cluster.Cluster, batch string) {
	t.Helper()
	for _, ns := range []string{cluster.NamespaceGolden, diffDataSourceNamespace} {
		err := c.Dynamic.Resource(fleet.DataSourceGVR).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: labelDiffChunk + "=" + batch})
		if err != nil {
			t.Fatalf("emptying %s's DataSources in %s: %v", batch, ns, err)
		}
	}
}

// waitDiffDataSourceParams waits until the guard's parameters name the PVC
// or the golden VolumeSnapshot of each DataSource routing to a guarded
// golden (the guard follows a DataSource through them), as boot sources
// exist long before their disks.
func waitDiffDataSourceParams(t *testing.T, ctx context.Context, c *cluster.Cluster, batch string, arrs []diffArrangement, sources map[string]*cdiv1.DataSource, guarded map[string]bool) {
	t.Helper()
	want := map[string]string{}
	for _, a := range arrs {
		ds := sources[a.name]
		if ds == nil || !guarded[a.src.name] {
			continue
		}
		if pvc := cdirules.DataSourcePVC(ds); pvc != nil {
			want["dataSource."+ds.Namespace+"."+ds.Name] = pvc.Namespace + "/" + pvc.Name
		} else if vs := cdirules.DataSourceSnapshot(ds); vs != nil {
			want["dataSource."+ds.Namespace+"."+ds.Name] = vs.Namespace + "/" + publish.SnapshotGoldenKey(vs.Name)
		}
	}
	waitParamsHold(t, ctx, c, want)
	var last string
	// The API server reads the parameters through an informer: wait until
	// it follows each qualified DataSource to the golden, which it then
	// refuses to clone onto a class that does not exist.
	ac := newAdmissionClient(t, c)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, a := range arrs {
			if sources[a.name] == nil || !guarded[a.src.name] || a.via.unqualified {
				continue
			}
			// Its DataSource is named after it; a dry run makes nothing.
			probe := a
			probe.classSet, probe.target.Class = true, "no-such-class"
			if refused, _, err := askGuard(ctx, ac, batch, probe); !refused {
				if now := fmt.Sprintf("%s admitted onto a missing class (%v)", a.name, err); now != last {
					t.Logf("waiting: %s", now)
					last = now
				}
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the API server never followed the DataSources: %s", last)
	}
}
