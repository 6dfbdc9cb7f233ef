package cloner

import (
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	corev1 "k8s.io/api/core/v1"
)

// evaluation is one pass of judgement over an inventory.
type evaluation struct {
	inv         *fleet.Inventory
	assessments []assessment
	// malformed adds unreadable annotations to the inventory's unreadable objects.
	malformed []fleet.MalformedObject
	// recheckAt is the earliest time a verdict may change with no object
	// changing; zero when none will.
	recheckAt time.Time
	// pred is the pass's clone-path prediction (nil: not available).
	pred *predictor
	// hearingOf tells what was heard of a disk's Warning events; nil: no
	// events are read (report, tests), a stuck disk is judged without them.
	hearingOf func(*fleet.WorkerDisk) hearing
}

// evaluate judges every worker disk of the inventory.
func evaluate(inv *fleet.Inventory, cfg config.Config, now time.Time) *evaluation {
	return evaluateWith(inv, cfg, now, nil)
}

// evaluateWith judges every worker disk, recording each one's clone-path
// prediction when pred is not nil.
func evaluateWith(inv *fleet.Inventory, cfg config.Config, now time.Time, pred *predictor) *evaluation {
	return evaluateHearing(inv, cfg, now, pred, nil)
}

// evaluateHearing is evaluateWith that also knows what CDI's Warning events
// said of each disk (the controller's passes).
func evaluateHearing(inv *fleet.Inventory, cfg config.Config, now time.Time, pred *predictor, hearingOf func(*fleet.WorkerDisk) hearing) *evaluation {
	ev := &evaluation{inv: inv, pred: pred, hearingOf: hearingOf, malformed: append([]fleet.MalformedObject(nil), inv.Malformed...)}
	for _, d := range inv.Disks {
		if d.Kind == fleet.DiskHTTPImport {
			ev.assessments = append(ev.assessments, judgeHTTP(d, inv.GoldenForFlavor(d.Flavor)))
			continue
		}
		a := judge(ev.factsOf(d), cfg, now, inv.SnapshotOf)
		if !a.recheckAt.IsZero() && (ev.recheckAt.IsZero() || a.recheckAt.Before(ev.recheckAt)) {
			ev.recheckAt = a.recheckAt
		}
		ev.assessments = append(ev.assessments, a)
	}
	return ev
}

// factsOf joins a clone disk with its golden, claim, volume and evidence.
func (ev *evaluation) factsOf(d *fleet.WorkerDisk) diskFacts {
	inv := ev.inv
	f := diskFacts{disk: d, golden: inv.GoldenByRef[d.GoldenRef], pvc: inv.ClaimOf(d.Namespace, d.ClaimName)}
	f.pv = inv.BoundPV(f.pvc)
	f.class = inv.Classes.ResolveDiskClass(f.pvc, f.pv, d)
	f.goldenClaimExists = inv.ClaimOf(d.GoldenRef.Namespace, d.GoldenRef.Name) != nil
	ev.followClonePath(&f)
	f.heard = hearing{known: true}
	if ev.hearingOf != nil {
		f.heard = ev.hearingOf(d)
	}
	if f.predicted = recordedPrediction(f.pvc); f.predicted == nil {
		f.predicted = ev.pred.forDisk(f)
	}
	if pv := f.volumeOf(); pv != nil {
		var tap fleet.VolumeEvidence
		if ok, err := fleet.DecodeAnnotation(pv, fleet.AnnCSIEvidence, &tap); err != nil {
			ev.malformed = append(ev.malformed, malformedAnnotation(pv, "PersistentVolume", err))
		} else if ok && tap.CreateSeen() {
			f.tap = &tap
		} else if ok {
			f.partial = &tap
		}
	}
	if f.pvc != nil {
		var de fleet.DriverError
		if ok, err := fleet.DecodeAnnotation(f.pvc, fleet.AnnDriverError, &de); err != nil {
			ev.malformed = append(ev.malformed, malformedAnnotation(f.pvc, "PersistentVolumeClaim", err))
		} else if ok && !staleDriverError(&de, f.tap) {
			f.drvErr = &de
		}
	}
	return f
}

func malformedAnnotation(obj interface {
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
func importFetches(phase string, restarts int32) int64 {
	switch phase {
	case "", "Pending", "ImportScheduled", "WaitForFirstConsumer", "PVCBound", "PendingPopulation", "Unknown":
		if restarts == 0 {
			return 0
		}
	}
	return 1 + int64(restarts)
}
