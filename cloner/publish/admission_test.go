package publish

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// The guard's parameters carry, per golden, kind, mode and class, the
// regions of a disk with each per-disk annotation whose effect depends on
// its size and class, only where they differ: cloneType csi-clone makes a
// larger disk onto a class without expansion fail (the API server refuses
// to grow CDI's claim), where CDI would copy.
func TestAdmissionDataCarriesPerDiskRegions(t *testing.T) {
	yes, no := true, false
	in := predict.Inputs{CSIDrivers: []string{"linstor.csi.linbit.com"}}
	for _, c := range []struct {
		name   string
		expand *bool
	}{{"replicated", &yes}, {"fixed", &no}} {
		in.Classes = append(in.Classes, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Provisioner: "linstor.csi.linbit.com", AllowVolumeExpansion: c.expand})
	}
	csiClone := cdiv1.CloneStrategyCsiClone
	in.CDIs = []*cdiv1.CDI{{Spec: cdiv1.CDISpec{CloneStrategyOverride: &csiClone}}}
	state := predict.NewState(in)
	g := predict.Golden{Namespace: "cozy-public", Name: "talos-worker-x", Class: "replicated", Phase: "Succeeded",
		Driver: "linstor.csi.linbit.com", VolumeMode: cdirules.Block, CapacityBytes: 5 << 30, RequestedBytes: 5 << 30}
	target := predict.Target{Class: "fixed", Kind: cdirules.KindStorage, VolumeMode: cdirules.Block, AccessModes: []string{"ReadWriteOnce"}}
	base := regionsValue(state.Regions(g, target))
	got := perDiskRegions(state, g, target, base, true)
	want := "blocked/" + predict.ReasonCloneTypeNoExpansion
	if v, ok := got[cdirules.StrategyCSIClone]; !ok || v[len(v)-len(want):] != want {
		t.Errorf("csi-clone variant on a class without expansion: %q (present %v), base %q", v, ok, base)
	}
	if _, ok := got["permissive"]; ok {
		t.Errorf("permissive variant written though a Block disk of the golden's size is not refused: %v", got)
	}
	if _, ok := got["pop"]; ok {
		t.Errorf("pop variant written for a class with a CSIDriver: %v", got)
	}
}

// The class-mismatch rule's switch reaches the guard as its parameter.
func TestAdmissionDataCarriesTheClassMismatchRule(t *testing.T) {
	p := &verdict.Predictor{State: predict.NewState(predict.Inputs{})}
	for allow, want := range map[bool]string{false: ruleGuard, true: ruleAllow} {
		if got := AdmissionData(p, "cozy-public", predict.GuardRules{AllowClassMismatch: allow})[paramClassMismatch]; got != want {
			t.Errorf("AllowClassMismatch %v: %s = %q, want %q", allow, paramClassMismatch, got, want)
		}
	}
}

// The worker access-mode warning's parameters: the catalog's goldens in the
// golden namespace are worker goldens, and each class carries the access
// modes CDI renders for a disk that names none, per volume mode it names
// (the first claimPropertySet of that mode); a class CDI renders no claim
// for (no StorageProfile) carries none.
func TestAdmissionDataCarriesWorkerAccessModes(t *testing.T) {
	block, fs := corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem
	set := func(mode *corev1.PersistentVolumeMode, am corev1.PersistentVolumeAccessMode) cdiv1.ClaimPropertySet {
		return cdiv1.ClaimPropertySet{VolumeMode: mode, AccessModes: []corev1.PersistentVolumeAccessMode{am}}
	}
	in := predict.Inputs{CSIDrivers: []string{"linstor.csi.linbit.com"}}
	for _, name := range []string{"replicated", "local", "bare"} {
		in.Classes = append(in.Classes, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "linstor.csi.linbit.com"})
	}
	in.Profiles = []*cdiv1.StorageProfile{
		{ObjectMeta: metav1.ObjectMeta{Name: "replicated"}, Status: cdiv1.StorageProfileStatus{
			ClaimPropertySets: []cdiv1.ClaimPropertySet{set(&block, corev1.ReadWriteMany)}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Status: cdiv1.StorageProfileStatus{
			ClaimPropertySets: []cdiv1.ClaimPropertySet{set(&fs, corev1.ReadWriteOnce), set(&block, corev1.ReadWriteMany)}}},
	}
	p := &verdict.Predictor{State: predict.NewState(in), Goldens: map[types.NamespacedName]predict.Golden{
		{Namespace: "cozy-public", Name: "talos-worker-a"}: {},
		{Namespace: "elsewhere", Name: "talos-worker-b"}:   {},
	}}
	got := AdmissionData(p, "cozy-public", predict.GuardRules{})
	want := map[string]string{
		"talos-worker-a.worker":                "true",
		"class.replicated.accessModes":         "ReadWriteMany",
		"class.replicated.accessModes.Block":   "ReadWriteMany",
		"class.local.accessModes":              "ReadWriteOnce",
		"class.local.accessModes.Block":        "ReadWriteMany",
		"class.local.accessModes.Filesystem":   "ReadWriteOnce",
		"fix." + record.ReasonNotReadWriteMany: record.Fix(record.ReasonNotReadWriteMany),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && (strings.HasSuffix(k, ".worker") || strings.Contains(k, ".accessModes")) {
			t.Errorf("unexpected %s = %q", k, got[k])
		}
	}
}

// A DataSource naming the golden without a namespace: on a class with a
// CSIDriver object CDI fails every sync creating the VolumeCloneSource, so
// the parameters carry the variant unqualified (blocked
// source-namespace-unset, a disk too small refused before it) and its fix;
// on a class without one CDI's legacy path copies all the same, and only
// usePopulator true reaches the failure ("pop.unqualified").
func TestAdmissionDataCarriesTheUnqualifiedSourceVariant(t *testing.T) {
	in := predict.Inputs{CSIDrivers: []string{"linstor.csi.linbit.com"}}
	yes := true
	for _, c := range []struct{ name, provisioner string }{{"replicated", "linstor.csi.linbit.com"}, {"other", "other.csi.example.com"}} {
		in.Classes = append(in.Classes, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Provisioner: c.provisioner, AllowVolumeExpansion: &yes})
	}
	csiClone := cdiv1.CloneStrategyCsiClone
	in.CDIs = []*cdiv1.CDI{{Spec: cdiv1.CDISpec{CloneStrategyOverride: &csiClone}}}
	g := predict.Golden{Namespace: "cozy-public", Name: "talos-worker-x", Class: "replicated", Phase: "Succeeded",
		Driver: "linstor.csi.linbit.com", VolumeMode: cdirules.Block, CapacityBytes: 5 << 30, RequestedBytes: 5 << 30}
	p := &verdict.Predictor{State: predict.NewState(in), Goldens: map[types.NamespacedName]predict.Golden{{Namespace: g.Namespace, Name: g.Name}: g}}
	data := AdmissionData(p, "cozy-public", predict.GuardRules{})
	unset := "blocked/" + predict.ReasonSourceNamespaceUnset
	key := "storage.Block.replicated"
	got, ok := regionsAt(data, g.Name, key+".unqualified")
	regions := strings.Split(got, ":")
	if !ok || len(regions) != 6 || regions[2] != unset || regions[4] != unset || regions[5] != unset ||
		regions[3] != "blocked/"+predict.ReasonTargetTooSmall {
		base, _ := regionsAt(data, g.Name, key)
		t.Errorf("%s.unqualified = %q (present %v), want %s in every region but small's target-too-small; base %q", key, got, ok, unset, base)
	}
	if data["fix."+predict.ReasonSourceNamespaceUnset] != predict.Fix(predict.ReasonSourceNamespaceUnset) {
		t.Errorf("fix.%s = %q", predict.ReasonSourceNamespaceUnset, data["fix."+predict.ReasonSourceNamespaceUnset])
	}
	other := "storage.Block.other"
	if v, ok := regionsAt(data, g.Name, other+".unqualified"); ok {
		t.Errorf("%s.unqualified written (%q) though CDI's legacy path copies without a CSIDriver object", other, v)
	}
	if v, _ := regionsAt(data, g.Name, other+".pop.unqualified"); !strings.Contains(v, unset) {
		t.Errorf("%s.pop.unqualified = %q, want %s", other, v, unset)
	}
}

// A golden VolumeSnapshot reaches the guard under its own keys
// ("_snapshot.<name>", apart from a golden DataVolume of the same name),
// with its class and the regions of CDI's snapshot path per class, and a
// DataSource of it names those keys.
func TestAdmissionDataCarriesSnapshotGoldens(t *testing.T) {
	yes := true
	objs := fleet.Objects{
		Classes: []*storagev1.StorageClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "replicated"}, Provisioner: "linstor.csi.linbit.com", AllowVolumeExpansion: &yes},
			{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Provisioner: "other.csi.example.com", AllowVolumeExpansion: &yes},
		},
		SnapshotContents: []*unstructured.Unstructured{{Object: map[string]any{"metadata": map[string]any{"name": "snapcontent-1"},
			"spec":   map[string]any{"driver": "linstor.csi.linbit.com", "sourceVolumeMode": "Block", "source": map[string]any{"volumeHandle": "pvc-src"}},
			"status": map[string]any{"snapshotHandle": "snap-handle-1"}}}},
		Snapshots: []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
			"metadata": map[string]any{"namespace": "cozy-public", "name": "ubuntu"},
			"spec":     map[string]any{"volumeSnapshotClassName": "snap", "source": map[string]any{"persistentVolumeClaimName": "ubuntu-src"}},
			"status":   map[string]any{"readyToUse": true, "restoreSize": "5Gi", "boundVolumeSnapshotContentName": "snapcontent-1"}}}},
		Claims: []*corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Namespace: "cozy-public", Name: "ubuntu-src"},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptrTo("replicated")}}},
		DataSources: []*cdiv1.DataSource{{ObjectMeta: metav1.ObjectMeta{Namespace: "cozy-public", Name: "ubuntu-snap"},
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "cozy-public", Name: "ubuntu"}}}}},
	}
	inv := fleet.BuildInventory(objs, config.Namespaces{"cozy-public"})
	in := predict.Inputs{CSIDrivers: []string{"linstor.csi.linbit.com", "other.csi.example.com"}, DataSources: objs.DataSources}
	data := AdmissionData(verdict.BuildPredictor(in, inv), "cozy-public", predict.GuardRules{})
	key := SnapshotGoldenKey("ubuntu")
	for k, want := range map[string]string{key + ".phase": "Succeeded", key + ".class": "replicated",
		"dataSource.cozy-public.ubuntu-snap": "cozy-public/" + key} {
		if data[k] != want {
			t.Errorf("%s = %q, want %q", k, data[k], want)
		}
	}
	if _, ok := data["ubuntu.phase"]; ok {
		t.Errorf("the golden VolumeSnapshot is also written as a golden DataVolume of its name")
	}
	sameValue, _ := regionsAt(data, key, "storage.Block.replicated")
	if same := strings.Split(sameValue, ":"); len(same) != 6 || !strings.HasPrefix(same[5], predict.PathSnapshotClone+"/") {
		t.Errorf("%s's storage.Block.replicated = %q, want a larger disk restored at the storage layer", key, sameValue)
	}
	otherValue, _ := regionsAt(data, key, "storage.Block.other")
	if other := strings.Split(otherValue, ":"); len(other) != 6 || !(predict.Prediction{Path: strings.Split(other[5], "/")[0]}).Bad() {
		t.Errorf("%s's storage.Block.other = %q, want a restore onto another driver's class flagged", key, otherValue)
	}
}

// The parameters grow with goldens x classes and must fit one ConfigMap
// (the API server refuses over 1 MiB, and the guard then judges on the
// last ones written): 100 goldens with Talos-length names (flavors,
// vm-default-images and their snapshots) of ten sizes on 10 classes of one
// driver, half without expansion (more per-disk variants differ from the
// base), fit (docs/predict.md). Written with each golden's name in every
// key and every regions value in full, they took 4.3 MB.
func TestAdmissionParamsFitOneConfigMap(t *testing.T) {
	const goldens, classes, limit = 100, 10, 1 << 20
	yes, no := true, false
	in := predict.Inputs{CSIDrivers: []string{"linstor.csi.linbit.com"}}
	for i := range classes {
		expand := &yes
		if i%2 == 1 {
			expand = &no
		}
		in.Classes = append(in.Classes, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("linstor-class-%02d", i)},
			Provisioner: "linstor.csi.linbit.com", AllowVolumeExpansion: expand})
	}
	p := &verdict.Predictor{State: predict.NewState(in), Goldens: map[types.NamespacedName]predict.Golden{}}
	for i := range goldens {
		size := int64(4+i%10) << 30 // ten sizes: goldens of one size share their regions' rows
		g := predict.Golden{Namespace: "cozy-public", Name: fmt.Sprintf("talos-worker-%064d-v1-10-%d", i, i), Class: "linstor-class-00",
			Phase: "Succeeded", Driver: "linstor.csi.linbit.com", VolumeMode: cdirules.Block, CapacityBytes: size, RequestedBytes: size}
		p.Goldens[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}] = g
	}
	size := 0
	for k, v := range AdmissionData(p, "cozy-public", predict.GuardRules{}) {
		size += len(k) + len(v)
	}
	t.Logf("%d goldens x %d classes: %d bytes (%.0f %% of a ConfigMap), %d per golden and class", goldens, classes, size,
		100*float64(size)/limit, size/(goldens*classes))
	if size > limit {
		t.Errorf("the parameters of %d goldens on %d classes take %d bytes, over a ConfigMap's %d", goldens, classes, size, limit)
	}
}

// regionsAt reads the regions the guard reads for a golden's key suffix
// ("<kind>.<mode>.<class>[.<variant>]"): through the golden's id and the
// row its key names.
func regionsAt(data map[string]string, golden, suffix string) (string, bool) {
	id, ok := data[golden+".id"]
	if !ok {
		return "", false
	}
	n, ok := data[id+"."+suffix]
	if !ok {
		return "", false
	}
	v, ok := data[regionsRowPrefix+n]
	return v, ok
}

// An unchanged fleet writes the same parameters on every pass (the leader
// writes them only when they differ): the goldens' ids and the rows'
// numbers do not follow map order.
func TestAdmissionDataIsTheSameEveryPass(t *testing.T) {
	yes, no := true, false
	in := predict.Inputs{CSIDrivers: []string{"linstor.csi.linbit.com"}}
	for i, expand := range []*bool{&yes, &no, nil} {
		in.Classes = append(in.Classes, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("class-%d", i)},
			Provisioner: "linstor.csi.linbit.com", AllowVolumeExpansion: expand})
	}
	p := &verdict.Predictor{State: predict.NewState(in), Goldens: map[types.NamespacedName]predict.Golden{}}
	for i := range 12 {
		size := int64(4+i%3) << 30
		g := predict.Golden{Namespace: "cozy-public", Name: fmt.Sprintf("golden-%02d", i), Class: "class-0", Phase: "Succeeded",
			Driver: "linstor.csi.linbit.com", VolumeMode: cdirules.Block, CapacityBytes: size, RequestedBytes: size}
		p.Goldens[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}] = g
	}
	first := AdmissionData(p, "cozy-public", predict.GuardRules{})
	for range 20 {
		if again := AdmissionData(p, "cozy-public", predict.GuardRules{}); !maps.Equal(again, first) {
			t.Fatalf("two passes over one fleet wrote different parameters")
		}
	}
	for i := range 12 {
		if v, ok := regionsAt(first, fmt.Sprintf("golden-%02d", i), "storage.Block.class-1"); !ok || strings.Count(v, ":") != 5 {
			t.Errorf("golden-%02d's storage.Block.class-1 = %q (present %v)", i, v, ok)
		}
	}
}
