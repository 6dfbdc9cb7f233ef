package publish

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// A record's Since is when its verdict was first decided: a new verdict
// restamps it; new findings under the same verdict (a driver error's
// class-mismatch, a prediction found wrong) do not, so "pending since"
// keeps saying how long the disk has waited.
func TestSinceMovesWithTheVerdictOnly(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "d0"}}
	kube := fake.NewClientset(pvc)
	w := NewWriter(kube, func() time.Time { return now }, func(string, time.Time) {})
	inv := fleet.NewInventory(nil, nil, func(ref types.NamespacedName) *corev1.PersistentVolumeClaim {
		got, err := kube.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}, nil)
	disk := &fleet.WorkerDisk{Namespace: "tenant-a", Name: "d0", ClaimName: "d0"}
	steps := []struct {
		what  string
		rec   record.Record
		since time.Time
	}{
		{"first verdict", record.Record{Verdict: record.VerdictPending, Message: "clone in progress"}, t0},
		{"a finding added", record.Record{Verdict: record.VerdictPending, Message: "clone in progress",
			Findings: []record.Finding{{Reason: "class-mismatch", Message: "m"}}}, t0},
		{"a new verdict", record.Record{Verdict: record.VerdictCSIClone, Message: "cloned"}, t0.Add(2 * time.Minute)},
		{"the verdict again, findings changed", record.Record{Verdict: record.VerdictCSIClone, Message: "cloned",
			Findings: []record.Finding{{Reason: "class-mismatch", Message: "m"}}}, t0.Add(2 * time.Minute)},
		{"another verdict", record.Record{Verdict: record.VerdictStuck, Message: "stuck"}, t0.Add(4 * time.Minute)},
	}
	for i, s := range steps {
		now = t0.Add(time.Duration(i) * time.Minute)
		rec := s.rec
		if err := w.Publish(ctx, verdict.Assessment{Disk: disk, Record: &rec}, inv); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		got, err := kube.CoreV1().PersistentVolumeClaims("tenant-a").Get(ctx, "d0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var written record.Record
		if err := json.Unmarshal([]byte(got.Annotations[fleet.AnnCloneEvidence]), &written); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if written.Verdict != s.rec.Verdict || len(written.Findings) != len(s.rec.Findings) || !written.Since.Equal(s.since) {
			t.Errorf("%s: written %s, %d findings, since %v; want %s, %d, since %v", s.what, written.Verdict, len(written.Findings),
				written.Since, s.rec.Verdict, len(s.rec.Findings), s.since)
		}
	}
}

// A malformed object's Warning is named by its resource version (the
// occasion): the same version warns once, a new version of the object that
// is still malformed warns again.
func TestMalformedObjectWarnsOncePerVersion(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	w := NewWriter(kube, time.Now, func(string, time.Time) {})
	bad := func(version string) fleet.MalformedObject {
		return fleet.MalformedObject{Kind: "DataVolume", APIVersion: "cdi.kubevirt.io/v1beta1", Namespace: "tenant-a", Name: "d0",
			UID: "uid-d0", ResourceVersion: version, Err: "spec: cannot unmarshal"}
	}
	for _, tc := range []struct {
		version string
		events  int
	}{{"1", 1}, {"1", 1}, {"2", 2}, {"2", 2}, {"3", 3}} {
		if err := w.ReportMalformed(ctx, []fleet.MalformedObject{bad(tc.version)}); err != nil {
			t.Fatal(err)
		}
		evs, err := kube.CoreV1().Events("tenant-a").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) != tc.events {
			t.Fatalf("after version %s: %d events, want %d", tc.version, len(evs.Items), tc.events)
		}
	}
}
