package verdict

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// evaluation is one pass of judgement over an inventory.
type Evaluation struct {
	Inv         *fleet.Inventory
	Assessments []Assessment
	// malformed adds unreadable annotations to the inventory's unreadable objects.
	Malformed []fleet.MalformedObject
	// recheckAt is the earliest time a verdict may change with no object
	// changing; zero when none will.
	RecheckAt time.Time
	// pred is the pass's clone-path prediction (nil: not available).
	Pred *Predictor
	// hearingOf tells what was heard of a disk's Warning events; nil: no
	// events are read (report, tests), a stuck disk is judged without them.
	hearingOf func(*fleet.WorkerDisk) Hearing
}

// evaluate judges every worker disk of the inventory.
func Evaluate(inv *fleet.Inventory, cfg config.Config, now time.Time) *Evaluation {
	return EvaluateWith(inv, cfg, now, nil)
}

// evaluateWith judges every worker disk, recording each one's clone-path
// prediction when pred is not nil.
func EvaluateWith(inv *fleet.Inventory, cfg config.Config, now time.Time, pred *Predictor) *Evaluation {
	return EvaluateHearing(inv, cfg, now, pred, nil)
}

// evaluateHearing is evaluateWith that also knows what CDI's Warning events
// said of each disk (the controller's passes).
func EvaluateHearing(inv *fleet.Inventory, cfg config.Config, now time.Time, pred *Predictor, hearingOf func(*fleet.WorkerDisk) Hearing) *Evaluation {
	ev := &Evaluation{Inv: inv, Pred: pred, hearingOf: hearingOf, Malformed: append([]fleet.MalformedObject(nil), inv.Malformed...)}
	for _, d := range inv.Disks {
		if d.Kind == fleet.DiskHTTPImport {
			ev.Assessments = append(ev.Assessments, judgeHTTP(d, inv.GoldenForFlavor(d.Flavor)))
			continue
		}
		a := Judge(ev.FactsOf(d), cfg, now, inv.SnapshotOf)
		if !a.RecheckAt.IsZero() && (ev.RecheckAt.IsZero() || a.RecheckAt.Before(ev.RecheckAt)) {
			ev.RecheckAt = a.RecheckAt
		}
		ev.Assessments = append(ev.Assessments, a)
	}
	return ev
}

// factsOf joins a clone disk with its golden, claim, volume and evidence.
func (ev *Evaluation) FactsOf(d *fleet.WorkerDisk) DiskFacts {
	inv := ev.Inv
	f := DiskFacts{Disk: d, golden: inv.GoldenOf(d), Pvc: inv.ClaimOf(d.Namespace, d.ClaimName)}
	f.pv = inv.BoundPV(f.Pvc)
	f.class = inv.Classes.ResolveDiskClass(f.Pvc, f.pv, d)
	f.goldenClaimExists = !d.FromSnapshot && inv.ClaimOf(d.GoldenRef.Namespace, d.GoldenRef.Name) != nil
	ev.followClonePath(&f)
	f.heard = Hearing{Known: true}
	if ev.hearingOf != nil {
		f.heard = ev.hearingOf(d)
	}
	f.persisted, f.persistedRead = f.persistedRecord(), true
	if f.predicted = predictionIn(f.persisted); f.predicted == nil {
		f.predicted = ev.Pred.forDisk(f)
	}
	if pv := f.volumeOf(); pv != nil {
		var tap fleet.VolumeEvidence
		if ok, err := fleet.DecodeAnnotation(pv, fleet.AnnCSIEvidence, &tap); err != nil {
			ev.Malformed = append(ev.Malformed, MalformedAnnotation(pv, "PersistentVolume", err))
		} else if ok && tap.CreateSeen() {
			f.tap = &tap
		} else if ok {
			f.partial = &tap
		}
	}
	if f.Pvc != nil {
		var de fleet.DriverError
		if ok, err := fleet.DecodeAnnotation(f.Pvc, fleet.AnnDriverError, &de); err != nil {
			ev.Malformed = append(ev.Malformed, MalformedAnnotation(f.Pvc, "PersistentVolumeClaim", err))
		} else if ok && !staleDriverError(&de, f.tap) {
			f.drvErr = &de
		}
	}
	return f
}

func MalformedAnnotation(obj interface {
	GetNamespace() string
	GetName() string
	GetResourceVersion() string
}, kind string, err error) fleet.MalformedObject {
	m := fleet.MalformedObject{Kind: kind, APIVersion: "v1", Namespace: obj.GetNamespace(), Name: obj.GetName(),
		ResourceVersion: obj.GetResourceVersion(), Err: fleet.Clip(err.Error(), 300)}
	switch o := obj.(type) {
	case *corev1.PersistentVolume:
		m.UID = o.UID
	case *corev1.PersistentVolumeClaim:
		m.UID = o.UID
	}
	return m
}

// importFetches is how many times an import DataVolume fetched from the
// Factory: once when its import started, plus every restart of the importer.
func ImportFetches(phase string, restarts int32) int64 {
	switch phase {
	case "", "Pending", "ImportScheduled", "WaitForFirstConsumer", "PVCBound", "PendingPopulation", "Unknown":
		if restarts == 0 {
			return 0
		}
	}
	return 1 + int64(restarts)
}
