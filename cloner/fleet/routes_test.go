package fleet

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

func routeDV(ns, name string, labels, ann map[string]string, spec cdiv1.DataVolumeSpec) *CachedDataVolume {
	return &CachedDataVolume{DataVolume: cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name), Labels: labels, Annotations: ann},
		Spec:       spec}}
}

func pvcSource(ns, name string) cdiv1.DataVolumeSpec {
	return cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: name}}}
}

func sourceRef(ns *string, name string) cdiv1.DataVolumeSpec {
	return cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: ns, Name: name}}
}

func dataSource(ns, name string, pvc *cdiv1.DataVolumeSourcePVC) *cdiv1.DataSource {
	return &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: pvc}}}
}

// TestEveryRouteToAGoldenMakesADisk: each way a DataVolume reaches a golden
// of a golden namespace makes it a disk of that golden, pooled by the pool
// annotation, else the release label, else the namespace; the routes that
// reach no golden make nothing.
func TestEveryRouteToAGoldenMakesADisk(t *testing.T) {
	ubuntu := types.NamespacedName{Namespace: "cozy-public", Name: "vm-default-images-ubuntu"}
	other := types.NamespacedName{Namespace: "golden-images", Name: "debian"}
	talos := types.NamespacedName{Namespace: "cozy-public", Name: goldenName("abc123", "v1.13.2")}
	sources := "tenant-a" // the disks' namespace
	srcNS, emptyNS := "boot-sources", ""
	chained := dataSource("boot-sources", "chained", nil)
	chained.Spec.Source.DataSource = &cdiv1.DataSourceRefSourceDataSource{Namespace: "boot-sources", Name: "ubuntu"}
	chained.Status.Source.PVC = &cdiv1.DataVolumeSourcePVC{Namespace: ubuntu.Namespace, Name: ubuntu.Name}
	objs := Objects{
		DataVolumes: []*CachedDataVolume{
			routeDV(ubuntu.Namespace, ubuntu.Name, nil, map[string]string{AnnImageName: "ubuntu"}, cdiv1.DataVolumeSpec{}),
			routeDV(other.Namespace, other.Name, nil, nil, cdiv1.DataVolumeSpec{}),
			routeDV(talos.Namespace, talos.Name, nil, nil, cdiv1.DataVolumeSpec{}),
			routeDV(sources, "vm-disk-web", map[string]string{LabelInstance: "vm-disk-web"}, nil, pvcSource(ubuntu.Namespace, ubuntu.Name)),
			routeDV(sources, "worker-0", map[string]string{LabelInstance: "kubernetes-x"}, map[string]string{AnnPool: "md0"}, pvcSource(talos.Namespace, talos.Name)),
			routeDV(sources, "via-other-ns", nil, nil, sourceRef(&srcNS, "ubuntu")),
			routeDV(sources, "via-own-ns", nil, nil, sourceRef(nil, "local")),
			routeDV(sources, "via-chain", nil, nil, sourceRef(&srcNS, "chained")),
			routeDV(sources, "second-namespace", nil, nil, pvcSource(other.Namespace, other.Name)),
			// A DataSource naming its PVC without a namespace, for a disk of
			// the golden's namespace: that golden, whose clone CDI never
			// starts (UnqualifiedSource).
			routeDV(ubuntu.Namespace, "unqualified", nil, map[string]string{AnnGolden: ubuntu.Name, AnnPool: "unqualified"}, sourceRef(&srcNS, "relative")),
			// A disk made in the golden namespace (a restore of the golden's
			// snapshot, where it lives) names its golden: a disk, not a golden.
			routeDV(talos.Namespace, "restore", nil, map[string]string{AnnGolden: talos.Name, AnnPool: "restores"},
				cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: talos.Namespace, Name: "golden-snap"}}}),
			// Routes to no golden.
			routeDV(sources, "tenant-pvc", nil, nil, pvcSource("", "data")),
			routeDV(sources, "no-such-source", nil, nil, sourceRef(&srcNS, "missing")),
			routeDV(sources, "ds-own-pvc", nil, nil, sourceRef(&srcNS, "relative")),
			routeDV(sources, "empty-ns-ref", nil, nil, sourceRef(&emptyNS, "relative")),
		},
		DataSources: []*cdiv1.DataSource{
			dataSource("boot-sources", "ubuntu", &cdiv1.DataVolumeSourcePVC{Namespace: ubuntu.Namespace, Name: ubuntu.Name}),
			dataSource(sources, "local", &cdiv1.DataVolumeSourcePVC{Namespace: ubuntu.Namespace, Name: ubuntu.Name}),
			// A PVC namespace left empty is the disk's, not the DataSource's.
			dataSource("boot-sources", "relative", &cdiv1.DataVolumeSourcePVC{Name: ubuntu.Name}),
			chained,
		},
	}
	inv := BuildInventory(objs, config.Namespaces{"cozy-public", "golden-images"})
	type want struct {
		golden  types.NamespacedName
		pool    string
		fromPVC bool
	}
	wants := map[string]want{
		"vm-disk-web":      {ubuntu, "vm-disk-web", true},
		"worker-0":         {talos, "md0", true},
		"via-other-ns":     {ubuntu, sources, true},
		"via-own-ns":       {ubuntu, sources, true},
		"via-chain":        {ubuntu, sources, true},
		"second-namespace": {other, sources, true},
		"restore":          {talos, "restores", false},
		"unqualified":      {ubuntu, "unqualified", true},
	}
	got := map[string]want{}
	for _, d := range inv.Disks {
		got[d.Name] = want{d.GoldenRef, d.Pool, d.FromPVC}
		if d.Kind != DiskClone {
			t.Errorf("%s: kind %s", d.Name, d.Kind)
		}
		if d.UnqualifiedSource != (d.Name == "unqualified") {
			t.Errorf("%s: UnqualifiedSource %v", d.Name, d.UnqualifiedSource)
		}
	}
	for name, w := range wants {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
	}
	if len(got) != len(wants) {
		t.Errorf("disks %v, want only %v", got, wants)
	}
	images := map[types.NamespacedName]string{}
	for _, g := range inv.Images {
		images[g.Ref()] = g.Image
	}
	if images[ubuntu] != "ubuntu" || images[other] != "debian" || len(images) != 2 {
		t.Errorf("image goldens %v: want ubuntu (its annotation) and debian (its name)", images)
	}
	if len(inv.Goldens) != 1 || inv.Goldens[0].Ref() != talos || inv.Goldens[0].IsImage() {
		t.Errorf("Talos catalog %+v, want only %s", inv.Goldens, talos)
	}
}

// TestPerDiskAnnotationsSurviveTheCache: the annotations CDI obeys for one
// disk (cloneType, storage.usePopulator, permissiveClone) reach the disk
// through the informer's transform, which keeps only the annotations a
// reader names; a disk without them has none.
func TestPerDiskAnnotationsSurviveTheCache(t *testing.T) {
	ubuntu := types.NamespacedName{Namespace: "cozy-public", Name: "vm-default-images-ubuntu"}
	perDisk := map[string]string{cdirules.AnnCloneType: "csi-clone", cdirules.AnnUsePopulator: "false", cdirules.AnnPermissiveClone: "true",
		"unrelated.example.com/note": "dropped"}
	cached := func(name string, ann map[string]string) *CachedDataVolume {
		dv := routeDV("tenant-a", name, nil, ann, pvcSource(ubuntu.Namespace, ubuntu.Name))
		dv.TypeMeta = metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&dv.DataVolume)
		if err != nil {
			t.Fatal(err)
		}
		return ReadDataVolume(&unstructured.Unstructured{Object: obj})
	}
	objs := Objects{DataVolumes: []*CachedDataVolume{
		routeDV(ubuntu.Namespace, ubuntu.Name, nil, map[string]string{AnnImageName: "ubuntu"}, cdiv1.DataVolumeSpec{}),
		cached("annotated", perDisk), cached("plain", nil),
	}}
	want := map[string]cdirules.PerDisk{"annotated": cdirules.PerDiskOf(perDisk), "plain": {}}
	inv := BuildInventory(objs, config.Namespaces{"cozy-public"})
	for _, d := range inv.Disks {
		if got := d.PerDisk; fmt.Sprint(got.Annotations()) != fmt.Sprint(want[d.Name].Annotations()) {
			t.Errorf("%s: per-disk %v, want %v", d.Name, got.Annotations(), want[d.Name].Annotations())
		}
		delete(want, d.Name)
	}
	if len(want) != 0 {
		t.Errorf("no disk for %v", want)
	}
}

// A DataVolume's per-disk annotation is an input only when someone other
// than CDI set it: CDI writes its own decisions onto the DataVolume
// (cloneType, storage.usePopulator; TestCDIsOwnCloneTypeIsNoPerDiskInput in
// test/e2e reads the real cdi-controller's managedFields), and a disk first
// read after that must be predicted as one read before. Every combination
// of who owns the annotation and who writes the status, for each key.
func TestCDIsOwnDecisionsAreNoInputs(t *testing.T) {
	statusField := `{"f:status":{".":{},"f:phase":{}}}`
	entry := func(manager, subresource, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: subresource,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	for _, key := range perDiskInputs {
		annotation := `{"f:metadata":{"f:annotations":{".":{},"f:` + key + `":{}}}}`
		for _, tc := range []struct {
			name   string
			fields []metav1.ManagedFieldsEntry
			kept   bool
		}{
			{"set by the user, CDI writes the status", []metav1.ManagedFieldsEntry{entry("kubectl-create", "", annotation), entry("cdi-controller", "status", statusField)}, true},
			{"set by CDI, which writes the status subresource", []metav1.ManagedFieldsEntry{entry("kubectl-create", "", `{}`), entry("cdi-controller", "", annotation), entry("cdi-controller", "status", statusField)}, false},
			{"set by CDI, which writes the status in place", []metav1.ManagedFieldsEntry{entry("cdi-controller", "", `{"f:metadata":{"f:annotations":{"f:`+key+`":{}}},"f:status":{}}`)}, false},
			{"set by the user and by CDI", []metav1.ManagedFieldsEntry{entry("helm", "", annotation), entry("cdi-controller", "", annotation), entry("cdi-controller", "status", statusField)}, true},
			{"set by someone who writes no status", []metav1.ManagedFieldsEntry{entry("virt-controller", "", annotation)}, true},
			{"another key set by CDI", []metav1.ManagedFieldsEntry{entry("kubectl-create", "", annotation), entry("cdi-controller", "", `{"f:metadata":{"f:annotations":{"f:other":{}}}}`), entry("cdi-controller", "status", statusField)}, true},
			{"no managedFields (a client that strips them)", nil, true},
		} {
			t.Run(key+"/"+tc.name, func(t *testing.T) {
				dv := routeDV("tenant-a", "disk", nil, map[string]string{key: "true"}, pvcSource("cozy-public", "golden"))
				dv.TypeMeta = metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"}
				dv.ManagedFields = tc.fields
				obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&dv.DataVolume)
				if err != nil {
					t.Fatal(err)
				}
				_, kept := ReadDataVolume(&unstructured.Unstructured{Object: obj}).Annotations[key]
				if kept != tc.kept {
					t.Errorf("kept %v, want %v", kept, tc.kept)
				}
			})
		}
	}
}

// TestClaimAccessModesAreTheClaims: the names of a claim's access modes,
// in order, for none, each single mode Kubernetes defines (a shared slice,
// allocated once) and several.
func TestClaimAccessModesAreTheClaims(t *testing.T) {
	for _, modes := range [][]corev1.PersistentVolumeAccessMode{nil, {corev1.ReadWriteOnce}, {corev1.ReadWriteMany}, {corev1.ReadOnlyMany},
		{corev1.ReadWriteOncePod}, {"Unknown"}, {corev1.ReadWriteOnce, corev1.ReadWriteMany}} {
		pvc := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{AccessModes: modes}}
		got := ClaimAccessModes(pvc)
		if len(got) != len(modes) {
			t.Fatalf("%v: %v", modes, got)
		}
		for i := range modes {
			if got[i] != string(modes[i]) {
				t.Errorf("%v: %v", modes, got)
			}
		}
	}
	pvc := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}
	if n := testing.AllocsPerRun(100, func() { ClaimAccessModes(pvc) }); n != 0 {
		t.Errorf("a single mode allocates %v times", n)
	}
}

// TestClonedSnapshotResolvesAsCDI: a DataVolume's source.snapshot, or a
// DataSource's snapshot (its status's when it chains), an empty namespace
// left empty: the snapshot-clone controller looks it up as named and never
// finds it (clone-controller-base.go populateSourceIfSourceRef,
// snapshot-clone-controller.go validateCloneAndSourceSnapshot; compared
// with cdi-controller by test/e2e's differential); a PVC route is no
// snapshot.
func TestClonedSnapshotResolvesAsCDI(t *testing.T) {
	srcNS := "boot-sources"
	snapDS := func(name, ns string) *cdiv1.DataSource {
		ds := dataSource(srcNS, name, nil)
		ds.Spec.Source.Snapshot = &cdiv1.DataVolumeSourceSnapshot{Namespace: ns, Name: "golden-snap"}
		return ds
	}
	chained := dataSource(srcNS, "chained", nil)
	chained.Spec.Source.DataSource = &cdiv1.DataSourceRefSourceDataSource{Namespace: srcNS, Name: "qualified"}
	chained.Status.Source.Snapshot = &cdiv1.DataVolumeSourceSnapshot{Namespace: "cozy-public", Name: "golden-snap"}
	sources := map[types.NamespacedName]*cdiv1.DataSource{}
	for _, ds := range []*cdiv1.DataSource{snapDS("qualified", "cozy-public"), snapDS("relative", ""), chained,
		dataSource(srcNS, "pvc", &cdiv1.DataVolumeSourcePVC{Namespace: "cozy-public", Name: "golden"})} {
		sources[types.NamespacedName{Namespace: ds.Namespace, Name: ds.Name}] = ds
	}
	lookup := func(r types.NamespacedName) *cdiv1.DataSource { return sources[r] }
	golden := types.NamespacedName{Namespace: "cozy-public", Name: "golden-snap"}
	for _, tc := range []struct {
		name string
		spec cdiv1.DataVolumeSpec
		want types.NamespacedName
		ok   bool
	}{
		{"source.snapshot", cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "cozy-public", Name: "golden-snap"}}}, golden, true},
		{"source.snapshot without a namespace", cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Name: "golden-snap"}}},
			types.NamespacedName{Name: "golden-snap"}, true},
		{"DataSource", sourceRef(&srcNS, "qualified"), golden, true},
		{"DataSource, empty namespace stays empty", sourceRef(&srcNS, "relative"), types.NamespacedName{Name: "golden-snap"}, true},
		{"chained DataSource", sourceRef(&srcNS, "chained"), golden, true},
		{"DataSource of a PVC", sourceRef(&srcNS, "pvc"), types.NamespacedName{}, false},
		{"missing DataSource", sourceRef(&srcNS, "missing"), types.NamespacedName{}, false},
		{"source.pvc", pvcSource("cozy-public", "golden"), types.NamespacedName{}, false},
	} {
		dv := routeDV("tenant-a", "disk", nil, nil, tc.spec)
		got, ok := ClonedSnapshot(&dv.DataVolume, lookup)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
