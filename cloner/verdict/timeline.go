package verdict

import (
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// timelineOf dates a clone disk's points from its objects and the tap's
// evidence alone (record.Timeline).
func timelineOf(f DiskFacts) record.Timeline {
	t := record.Timeline{Requested: cloneRequestedAt(f.Disk, f.golden), Bound: f.Disk.BoundSince, Ready: f.Disk.ReadySince}
	switch c := provisionedClaim(f); {
	case c != nil:
		t.Claimed = c.CreationTimestamp.Time
	case !f.cloneClaimNoted.IsZero(): // CDI deleted its tmp-pvc, perhaps before any pass saw it
		t.Claimed = f.cloneClaimNoted
	case f.persistedRecord() != nil:
		t.Claimed = f.persistedRecord().Claimed
	}
	switch {
	case f.tap != nil:
		t.FirstCreateVolume, t.VolumeCreated = f.tap.FirstAttempt, f.tap.Created
		t.CreateVolumeAttempts, t.Refusals = f.tap.Attempts, f.tap.Refusals
	case f.drvErr != nil && f.drvErr.Method == MethodCreateVolume:
		t.FirstCreateVolume = f.drvErr.First
	}
	if ev := f.evidenceOf(); ev != nil {
		t.ExpandRequested, t.Expanded, t.ExpandRefusals = expandPoints(ev.Expansions)
	}
	return t
}

// expandPoints dates the expand phase from the volume's ControllerExpandVolume
// calls, oldest first: when the first was asked for, the end of the last
// that succeeded, and the failures before that one (the last
// record.MaxExpandRefusals; all of them while none has succeeded).
func expandPoints(xs []fleet.Expansion) (requested, expanded time.Time, refusals []fleet.Refusal) {
	lastOK := -1
	for i, x := range xs {
		if i == 0 {
			requested = x.At.Add(-time.Duration(x.Millis) * time.Millisecond)
		}
		if x.Code == codes.OK.String() {
			expanded, lastOK = x.At, i
		}
	}
	for i, x := range xs {
		if x.Code != codes.OK.String() && (lastOK < 0 || i < lastOK) {
			refusals = append(refusals, fleet.Refusal{At: x.At, Code: x.Code})
		}
	}
	if n := len(refusals); n > record.MaxExpandRefusals {
		refusals = refusals[n-record.MaxExpandRefusals:]
	}
	return requested, expanded, refusals
}

// persistedRecord is the disk's persisted record, nil when it has none or
// it cannot be read (the writer reports that).
func (f *DiskFacts) persistedRecord() *record.RecordDigest {
	if f.persistedRead {
		return f.persisted
	}
	old, err := record.PersistedRecord(f.Pvc)
	if err != nil {
		return nil
	}
	return old
}

// provisionedClaim is the claim the disk's volume is provisioned for: CDI's
// tmp-pvc; nil while CDI has not made it (or has deleted it). The disk's
// own claim is no sign: CDI makes it at once, and the cache keeps no data
// source to tell a blank one from a populated one.
func provisionedClaim(f DiskFacts) *corev1.PersistentVolumeClaim {
	return f.ClonePVC
}

// inFlightPhase is where a disk CDI has neither finished nor failed is, from
// the latest point reached backwards.
func inFlightPhase(f DiskFacts) string {
	vol := f.volumeOf()
	switch {
	case f.golden != nil && f.golden.Importing():
		return record.PhaseGoldenImport
	case vol != nil && (failedExpansion(f.evidenceOf()) != nil || smallerThanDisk(vol, f.Disk)):
		return record.PhaseExpand
	case vol != nil && f.pv == nil:
		return record.PhaseBind
	case vol != nil:
		return record.PhaseFinishing
	case f.drvErr != nil:
		return record.PhaseCreateVolume
	case provisionedClaim(f) != nil:
		return record.PhaseProvisioning
	}
	return record.PhasePlanning
}

// smallerThanDisk: the volume's capacity is below what the disk asks.
func smallerThanDisk(pv *corev1.PersistentVolume, d *fleet.WorkerDisk) bool {
	q, ok := pv.Spec.Capacity[corev1.ResourceStorage]
	return ok && d.RequestedBytes > 0 && q.Value() < d.RequestedBytes
}
