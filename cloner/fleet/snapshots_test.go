package fleet

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
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
