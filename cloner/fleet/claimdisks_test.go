package fleet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

func bareClaim(ns, name string, source *corev1.TypedObjectReference) *corev1.PersistentVolumeClaim {
	class := "replicated"
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, DataSourceRef: source,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}}},
	}
}

func claimRef(ns *string, name string) *corev1.TypedObjectReference {
	return &corev1.TypedObjectReference{Kind: kindClaim, Name: name, Namespace: ns}
}

func snapshotRef(ns *string, name string) *corev1.TypedObjectReference {
	group := groupVolumeSnapshots
	return &corev1.TypedObjectReference{APIGroup: &group, Kind: kindVolumeSnapshot, Name: name, Namespace: ns}
}

// TestClaimSourceOfEveryKindOfClaim: the closed set of what a claim's
// source may be and who made it; only a claim CDI did not make, naming a
// PVC or a VolumeSnapshot, is a bare claim's.
func TestClaimSourceOfEveryKindOfClaim(t *testing.T) {
	golden := "cozy-public"
	cdiGroup, otherGroup := "cdi.kubevirt.io", "example.com"
	dataSourceOnly := bareClaim("tenant", "legacy", nil)
	dataSourceOnly.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: kindClaim, Name: "ubuntu"}
	both := bareClaim("tenant", "both", claimRef(&golden, "ubuntu"))
	both.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: kindClaim, Name: "local"}
	mark := func(pvc *corev1.PersistentVolumeClaim, f func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		f(pvc)
		return pvc
	}
	cdiMarked := func(key, value string, label bool) *corev1.PersistentVolumeClaim {
		return mark(bareClaim(golden, "tmp", claimRef(nil, "ubuntu")), func(p *corev1.PersistentVolumeClaim) {
			if label {
				p.Labels = map[string]string{key: value}
			} else {
				p.Annotations = map[string]string{key: value}
			}
		})
	}
	for _, tc := range []struct {
		name     string
		pvc      *corev1.PersistentVolumeClaim
		want     types.NamespacedName
		snapshot bool
	}{
		{"dataSourceRef to a PVC in another namespace", bareClaim("tenant", "a", claimRef(&golden, "ubuntu")), types.NamespacedName{Namespace: golden, Name: "ubuntu"}, false},
		{"dataSourceRef to a PVC of its namespace", bareClaim(golden, "a", claimRef(nil, "ubuntu")), types.NamespacedName{Namespace: golden, Name: "ubuntu"}, false},
		{"dataSource only", dataSourceOnly, types.NamespacedName{Namespace: "tenant", Name: "ubuntu"}, false},
		{"dataSourceRef wins over dataSource", both, types.NamespacedName{Namespace: golden, Name: "ubuntu"}, false},
		{"dataSourceRef to a VolumeSnapshot", bareClaim("tenant", "a", snapshotRef(&golden, "ubuntu-snap")), types.NamespacedName{Namespace: golden, Name: "ubuntu-snap"}, true},
		{"no source", bareClaim("tenant", "a", nil), types.NamespacedName{}, false},
		{"a populator's source", bareClaim("tenant", "a", &corev1.TypedObjectReference{APIGroup: &cdiGroup, Kind: "VolumeCloneSource", Name: "x"}), types.NamespacedName{}, false},
		{"a PVC kind of another group", bareClaim("tenant", "a", &corev1.TypedObjectReference{APIGroup: &otherGroup, Kind: kindClaim, Name: "x"}), types.NamespacedName{}, false},
		{"a VolumeSnapshot without its group", bareClaim("tenant", "a", &corev1.TypedObjectReference{Kind: kindVolumeSnapshot, Name: "x"}), types.NamespacedName{}, false},
		{"no name", bareClaim("tenant", "a", claimRef(nil, "")), types.NamespacedName{}, false},
		{"owned by a DataVolume", mark(bareClaim("tenant", "a", claimRef(&golden, "ubuntu")), func(p *corev1.PersistentVolumeClaim) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DataVolume", Name: "a"}}
		}), types.NamespacedName{}, false},
		{"CDI's tmp-pvc", cdiMarked(annCDIPopulatorKind, "VolumeCloneSource", false), types.NamespacedName{}, false},
		{"CDI's event source", cdiMarked(annCDIEventSource, "tenant/a", false), types.NamespacedName{}, false},
		{"CDI's snapshot fallback claim", cdiMarked(annCDIOwnerUID, "uid", false), types.NamespacedName{}, false},
		{"created for a DataVolume", cdiMarked(annCDICreatedForDV, "uid", false), types.NamespacedName{}, false},
		{"CDI's component label", cdiMarked(labelCDIComponent, "cdi-clone-from-snapshot-source", true), types.NamespacedName{}, false},
		{"CDI's app label", cdiMarked(labelApp, labelAppCDI, true), types.NamespacedName{}, false},
	} {
		ref, snapshot, ok := ClaimSourceRef(tc.pvc)
		if ok != (tc.want.Name != "") || ref != tc.want || snapshot != tc.snapshot {
			t.Errorf("%s: %v snapshot=%v ok=%v, want %v snapshot=%v", tc.name, ref, snapshot, ok, tc.want, tc.snapshot)
		}
		// The cache keeps exactly what ClaimSourceRef reads.
		trimmed := TrimClaim(tc.pvc.DeepCopy())
		if tref, tsnap, tok := ClaimSourceRef(trimmed); tref != ref || tsnap != snapshot || tok != ok {
			t.Errorf("%s: trimmed: %v snapshot=%v ok=%v, want %v snapshot=%v ok=%v", tc.name, tref, tsnap, tok, ref, snapshot, ok)
		}
	}
}

// TestBareClaimsOfGoldensAreDisks: bare claims of a golden DataVolume's
// claim, of a claim golden and of a golden VolumeSnapshot are disks of that
// golden, pooled like DataVolumes, in CDI's phase words; a bare claim of
// another namespace's PVC, of an unknown source, or of a DataVolume's name
// is none.
func TestBareClaimsOfGoldensAreDisks(t *testing.T) {
	golden := "cozy-public"
	ubuntu := types.NamespacedName{Namespace: golden, Name: "vm-default-images-ubuntu"}
	bound := bareClaim("tenant", "bound", claimRef(&golden, ubuntu.Name))
	bound.Labels = map[string]string{LabelInstance: "vm-disk-web"}
	bound.Status.Phase, bound.Spec.VolumeName = corev1.ClaimBound, "pv-bound"
	lost := bareClaim(golden, "lost", claimRef(nil, ubuntu.Name))
	lost.Annotations = map[string]string{AnnPool: "md0"}
	lost.Status.Phase = corev1.ClaimLost
	raw := bareClaim(golden, "raw-golden", nil)
	raw.Status.Phase = corev1.ClaimBound
	shadow := bareClaim("tenant", "vm-disk-x", claimRef(&golden, ubuntu.Name)) // a DataVolume's name
	// A restore of the golden snapshot that a DataVolume clones: a claim
	// golden, not a disk.
	restoredGolden := bareClaim(golden, "restored-golden", snapshotRef(nil, "ubuntu-snap"))
	restoredGolden.Status.Phase = corev1.ClaimBound
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-bound", CreationTimestamp: metav1.Unix(1000, 0)}}
	snap := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"namespace": golden, "name": "ubuntu-snap", "uid": "snap-uid"}}}
	objs := Objects{
		DataVolumes: []*CachedDataVolume{
			routeDV(golden, ubuntu.Name, nil, map[string]string{AnnImageName: "ubuntu"}, cdiv1.DataVolumeSpec{}),
			routeDV("tenant", "vm-disk-x", nil, nil, pvcSource(golden, ubuntu.Name)),
			routeDV("tenant", "vm-disk-y", nil, nil, pvcSource(golden, "restored-golden")),
		},
		Claims: []*corev1.PersistentVolumeClaim{bound, lost, raw, shadow, restoredGolden,
			bareClaim("tenant", "pending", claimRef(&golden, "raw-golden")),
			bareClaim("tenant", "restore", snapshotRef(&golden, "ubuntu-snap")),
			bareClaim("tenant", "tenant-clone", claimRef(nil, "data")),
			bareClaim("tenant", "unknown", claimRef(&golden, "missing")),
			bareClaim("tenant", "unknown-snap", snapshotRef(&golden, "missing")),
		},
		Volumes:   []*corev1.PersistentVolume{pv},
		Snapshots: []*unstructured.Unstructured{snap},
	}
	inv := BuildInventory(objs, config.Namespaces{golden})
	type want struct {
		golden, pool, phase string
		snapshot            bool
	}
	wants := map[string]want{
		"tenant/bound":     {ubuntu.String(), "vm-disk-web", string(cdiv1.Succeeded), false},
		golden + "/lost":   {ubuntu.String(), "md0", string(cdiv1.Failed), false},
		"tenant/pending":   {golden + "/raw-golden", "tenant", string(cdiv1.Pending), false},
		"tenant/restore":   {golden + "/ubuntu-snap", "tenant", string(cdiv1.Pending), true},
		"tenant/vm-disk-x": {ubuntu.String(), "tenant", "", false}, // the DataVolume
		"tenant/vm-disk-y": {golden + "/restored-golden", "tenant", "", false},
	}
	got := map[string]*WorkerDisk{}
	for _, d := range inv.Disks {
		got[d.Ref().String()] = d
	}
	if len(got) != len(wants) {
		t.Errorf("disks %v, want %d", keysOf(got), len(wants))
	}
	for key, w := range wants {
		d := got[key]
		if d == nil {
			t.Errorf("%s: no disk", key)
			continue
		}
		if d.BareClaim == strings.HasPrefix(key, "tenant/vm-disk-") || d.GoldenRef.String() != w.golden || d.Pool != w.pool || d.Phase != w.phase || d.FromSnapshot != w.snapshot {
			t.Errorf("%s: bare %v golden %s pool %s phase %q snapshot %v, want %+v", key, d.BareClaim, d.GoldenRef, d.Pool, d.Phase, d.FromSnapshot, w)
		}
	}
	if d := got["tenant/bound"]; d != nil && (!d.Finished() || !d.ReadySince.Equal(pv.CreationTimestamp.Time) || d.RequestedBytes != 10<<30 || d.ClaimName != "bound") {
		t.Errorf("bound: finished %v, ready %v, bytes %d, claim %s", d.Finished(), d.ReadySince, d.RequestedBytes, d.ClaimName)
	}
	if g := inv.GoldenByRef[types.NamespacedName{Namespace: golden, Name: "raw-golden"}]; g == nil || !g.FromClaim {
		t.Errorf("a claim a bare claim clones is a claim golden: %+v", g)
	}
}

func keysOf(m map[string]*WorkerDisk) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
