package cloner

import (
	"fmt"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// judgedDisks is one verdict pass's chunk (passChunk).
const judgedDisks = passChunk

// BenchmarkJudgeFinishedDisks judges a chunk of finished CSI-cloned worker
// disks whose records are persisted as the cache holds them (digests), as
// each chunk of a full pass does: the cost of a resync over a settled
// fleet, per disk.
func BenchmarkJudgeFinishedDisks(b *testing.B) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	for i := range judgedDisks {
		dv := w.Worker(fmt.Sprintf("tenant-%d", i%20), fmt.Sprintf("worker-%d", i), "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
		w.Cloned(dv, clonertest.TestClass, fleet.CdiCloneTypeCSIClone, 20*clonertest.Gi,
			clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 20*clonertest.Gi))
	}
	objs := fleet.Objects{Claims: w.Pvcs, Volumes: w.Pvs, Classes: w.Scs}
	for _, dv := range w.Dvs {
		objs.DataVolumes = append(objs.DataVolumes, fleet.ReadDataVolume(clonertest.ToUnstructured(b, dv)))
	}
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	now := clonertest.T0.Add(time.Hour)
	inv := fleet.BuildInventory(objs, cfg.GoldenNamespaces())
	pred := verdict.BuildPredictor(clonertest.CsiCloneForced(), inv)
	for _, a := range verdict.EvaluateWith(inv, cfg, now, pred).Assessments {
		pvc := inv.ClaimOf(a.Disk.Namespace, a.Disk.ClaimName)
		pvc.Annotations[fleet.AnnCloneEvidence] = record.MustJSON(a.Record)
		if _, err := record.CacheClaim(pvc); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if n := len(verdict.EvaluateWith(inv, cfg, now, pred).Assessments); n != judgedDisks {
			b.Fatalf("%d disks judged, want %d", n, judgedDisks)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*judgedDisks), "ns/disk")
}
