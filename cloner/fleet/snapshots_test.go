package fleet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

// ReadSnapshot over every field CDI and the external-provisioner read of a
// golden VolumeSnapshot and its content, each present, absent, null or
// malformed.
func TestReadSnapshotReadsWhatCDIReads(t *testing.T) {
	content := func(ann map[string]any, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "c"}, "spec": spec}}
		if ann != nil {
			u.Object["metadata"].(map[string]any)["annotations"] = ann
		}
		return u
	}
	bound := map[string]any{"boundVolumeSnapshotContentName": "c", "restoreSize": "10Gi"}
	fs := map[string]any{"driver": "linstor.csi.linbit.com", "sourceVolumeMode": "Filesystem"}
	for _, tc := range []struct {
		name    string
		vs      map[string]any // nil: no VolumeSnapshot
		content *unstructured.Unstructured
		want    cdirules.Snapshot
		wantErr string
	}{
		{name: "missing", want: cdirules.Snapshot{}},
		{name: "no status", vs: map[string]any{"spec": map[string]any{"volumeSnapshotClassName": "snap"}},
			want: cdirules.Snapshot{Exists: true, SnapshotClass: "snap"}},
		{name: "null status", vs: map[string]any{"status": nil}, want: cdirules.Snapshot{Exists: true}},
		{name: "empty status", vs: map[string]any{"status": map[string]any{}}, want: cdirules.Snapshot{Exists: true, HasStatus: true}},
		{name: "error without message", vs: map[string]any{"status": map[string]any{"error": map[string]any{}}},
			want: cdirules.Snapshot{Exists: true, HasStatus: true, Error: "no details"}},
		{name: "error with message", vs: map[string]any{"status": map[string]any{"error": map[string]any{"message": "boom"}}},
			want: cdirules.Snapshot{Exists: true, HasStatus: true, Error: "boom"}},
		{name: "null error", vs: map[string]any{"status": map[string]any{"error": nil}}, want: cdirules.Snapshot{Exists: true, HasStatus: true}},
		{name: "restore size as a number", vs: map[string]any{"status": map[string]any{"restoreSize": int64(1024)}},
			want: cdirules.Snapshot{Exists: true, HasStatus: true, RestoreBytes: 1024, HasRestoreSize: true}},
		{name: "restore size malformed", vs: map[string]any{"status": map[string]any{"restoreSize": "ten"}}, wantErr: `status.restoreSize "ten"`},
		{name: "class of the wrong type", vs: map[string]any{"spec": map[string]any{"volumeSnapshotClassName": int64(3)}}, wantErr: "volumeSnapshotClassName"},
		{name: "content gone", vs: map[string]any{"status": bound},
			want: cdirules.Snapshot{Exists: true, HasStatus: true, RestoreBytes: 10 << 30, HasRestoreSize: true}},
		{name: "content bound", vs: map[string]any{"status": bound}, content: content(nil, fs),
			want: cdirules.Snapshot{Exists: true, HasStatus: true, RestoreBytes: 10 << 30, HasRestoreSize: true, ContentBound: true,
				Driver: "linstor.csi.linbit.com", SourceVolumeMode: "Filesystem"}},
		{name: "content without a source volume mode", vs: map[string]any{"status": bound}, content: content(nil, map[string]any{"driver": "d"}),
			want: cdirules.Snapshot{Exists: true, HasStatus: true, RestoreBytes: 10 << 30, HasRestoreSize: true, ContentBound: true, Driver: "d"}},
		{name: "volume mode change allowed", vs: map[string]any{"status": bound}, content: content(map[string]any{AnnAllowVolumeModeChange: "True"}, fs),
			want: cdirules.Snapshot{Exists: true, HasStatus: true, RestoreBytes: 10 << 30, HasRestoreSize: true, ContentBound: true,
				Driver: "linstor.csi.linbit.com", SourceVolumeMode: "Filesystem", AllowVolumeModeChange: true}},
		{name: "volume mode change not parsed", vs: map[string]any{"status": bound}, content: content(map[string]any{AnnAllowVolumeModeChange: "yes"}, fs),
			want: cdirules.Snapshot{Exists: true, HasStatus: true, RestoreBytes: 10 << 30, HasRestoreSize: true, ContentBound: true,
				Driver: "linstor.csi.linbit.com", SourceVolumeMode: "Filesystem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vs *unstructured.Unstructured
			if tc.vs != nil {
				vs = &unstructured.Unstructured{Object: tc.vs}
			}
			got, err := ReadSnapshot(vs, func(name string) (*unstructured.Unstructured, bool) {
				return tc.content, tc.content != nil && name == "c"
			})
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want one naming %q", err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("error %v", err)
			case got != tc.want:
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A VolumeSnapshot of a golden namespace is an image golden (its own
// identity, restore size, content's volume mode and handle, the class of the
// claim it was cut from), and a DataVolume restoring it, through
// source.snapshot or a DataSource of it and without any annotation, is a
// disk of that golden, kept apart from a DataVolume golden of the same
// name; a snapshot elsewhere, or one that cannot be read, makes none.
func TestSnapshotGoldensAndTheirDisks(t *testing.T) {
	class := "replicated"
	snap := func(ns, name string, status map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
			"metadata": map[string]any{"namespace": ns, "name": name, "annotations": map[string]any{AnnImageName: "ubuntu"}},
			"spec":     map[string]any{"volumeSnapshotClassName": "snap", "source": map[string]any{"persistentVolumeClaimName": "ubuntu-src"}}}}
		if status != nil {
			u.Object["status"] = status
		}
		return u
	}
	content := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "snapcontent-1"},
		"spec":   map[string]any{"driver": "linstor.csi.linbit.com", "sourceVolumeMode": "Block", "source": map[string]any{"volumeHandle": "pvc-src"}},
		"status": map[string]any{"snapshotHandle": "snap-handle-1"}}}
	ready := map[string]any{"readyToUse": true, "restoreSize": "5Gi", "boundVolumeSnapshotContentName": "snapcontent-1"}
	snapSource := func(ns, name string) cdiv1.DataVolumeSpec {
		return cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: ns, Name: name}}}
	}
	srcNS := "cozy-public"
	ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "cozy-public", Name: "ubuntu-snap"},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "cozy-public", Name: "ubuntu"}}}}
	objs := Objects{
		SnapshotContents: []*unstructured.Unstructured{content},
		Snapshots: []*unstructured.Unstructured{snap("cozy-public", "ubuntu", ready),
			snap("tenant-a", "elsewhere", ready),
			snap("cozy-public", "broken", map[string]any{"restoreSize": "lots"})},
		Claims: []*corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Namespace: "cozy-public", Name: "ubuntu-src"},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class}}},
		DataVolumes: []*CachedDataVolume{
			routeDV("cozy-public", "ubuntu", nil, nil, cdiv1.DataVolumeSpec{}), // a DataVolume golden of the same name
			routeDV("tenant-a", "restored", nil, nil, snapSource("cozy-public", "ubuntu")),
			routeDV("tenant-a", "via-datasource", nil, nil, sourceRef(&srcNS, "ubuntu-snap")),
			routeDV("tenant-a", "missing-snapshot", nil, nil, snapSource("cozy-public", "gone")),
			routeDV("tenant-a", "tenant-snapshot", nil, nil, snapSource("tenant-a", "elsewhere")),
		},
		DataSources: []*cdiv1.DataSource{ds},
	}
	inv := BuildInventory(objs, config.Namespaces{"cozy-public"})
	ref := types.NamespacedName{Namespace: "cozy-public", Name: "ubuntu"}
	g := inv.SnapshotGoldens[ref]
	if g == nil || !g.IsSnapshot() || g.Image != "ubuntu" || g.Phase != string(cdiv1.Succeeded) || g.SizeBytes() != 5<<30 ||
		g.VolumeMode != "Block" || g.SnapshotHandle != "snap-handle-1" || g.Class.Name != class || g.Class.How != ClassFromSnapshotSource {
		t.Fatalf("snapshot golden %+v", g)
	}
	if dvg := inv.GoldenByRef[ref]; dvg == nil || dvg.IsSnapshot() {
		t.Errorf("the DataVolume golden of the same name: %+v", dvg)
	}
	if len(inv.SnapshotGoldens) != 1 || len(inv.Malformed) != 1 || inv.Malformed[0].Name != "broken" {
		t.Errorf("snapshot goldens %v, malformed %+v: want only ubuntu, and broken malformed", inv.SnapshotGoldens, inv.Malformed)
	}
	disks := map[string]*WorkerDisk{}
	for _, d := range inv.Disks {
		disks[d.Name] = d
	}
	for _, name := range []string{"restored", "via-datasource"} {
		d := disks[name]
		if d == nil || !d.FromSnapshot || d.FromPVC || d.GoldenRef != ref || inv.GoldenOf(d) != g || d.Pool != "tenant-a" {
			t.Errorf("%s: %+v, want a disk of snapshot golden %s", name, d, ref)
		}
	}
	if d := disks["missing-snapshot"]; d == nil || inv.GoldenOf(d) != nil {
		t.Errorf("missing-snapshot: %+v, want a disk of an unknown golden (CDI waits for it)", d)
	}
	if d := disks["tenant-snapshot"]; d != nil {
		t.Errorf("a restore of a tenant's own snapshot is a disk: %+v", d)
	}
}
