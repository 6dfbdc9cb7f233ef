package verdict

import (
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// Where a disk is before its claim is bound. CDI's clone populator (v1.65)
// makes the volume on a claim of its own, tmp-pvc-<target claim UID>, in the
// source's namespace (the golden's): the clone, and then the resize to the
// disk's size, happen there (clone/planner.go, prep-claim.go); only then is
// that PV re-bound to the disk's claim (rebind.go). Until then the storage
// layer's record of the disk, and the driver's errors on it, are on that
// claim's PV.

// followClonePath fills in, for a disk whose claim has no volume yet, the
// claim and volume CDI is making it on.
func (ev *Evaluation) followClonePath(f *DiskFacts) {
	if f.Disk.Kind == fleet.DiskClone {
		f.cloneClaimNoted = ev.Inv.NotedCloneClaim(f.Pvc)
	}
	if f.pv != nil || f.Disk.Kind != fleet.DiskClone {
		return
	}
	f.ClonePVC = ev.Inv.CloneClaimOf(f.Disk, f.Pvc)
	f.clonePV = ev.Inv.BoundPV(f.ClonePVC)
}

// volumeOf is the PV that holds the disk's data: its own, else the one CDI
// is making it on.
func (f *DiskFacts) volumeOf() *corev1.PersistentVolume {
	if f.pv != nil {
		return f.pv
	}
	return f.clonePV
}

// failedExpansion is the disk volume's last ControllerExpandVolume when the
// driver answered it with an error and no later call succeeded; nil
// otherwise.
func failedExpansion(ev *fleet.VolumeEvidence) *fleet.Expansion {
	if ev == nil || len(ev.Expansions) == 0 {
		return nil
	}
	last := &ev.Expansions[len(ev.Expansions)-1]
	if last.Code == codes.OK.String() {
		return nil
	}
	return last
}

// evidenceOf is the tap's record of the disk's volume: the CreateVolume with
// its expansions, else the expansions alone.
func (f *DiskFacts) evidenceOf() *fleet.VolumeEvidence {
	if f.tap != nil {
		return f.tap
	}
	return f.partial
}

// staleDriverError: the driver error on the claim came from a CreateVolume
// that was retried and then succeeded; it no longer says anything.
func staleDriverError(de *fleet.DriverError, tap *fleet.VolumeEvidence) bool {
	return de != nil && tap != nil && de.Method == MethodCreateVolume && !tap.Created.Before(de.Last)
}

// definiteCode: a gRPC code after which the kubernetes-csi sidecars know the
// driver's operation is over, not still running: external-resizer v2.3.0
// pkg/util/util.go IsFinalError, and the same switch in external-snapshotter
// v8.7.0 pkg/sidecar-controller/snapshot_controller.go isCSIFinalError.
// Canceled, DeadlineExceeded, Unavailable, ResourceExhausted and Aborted are
// not final: the call may still be in progress or pass when retried, and a
// clone that only sees those is judged stuck after --stuck-after, never at
// once. external-provisioner v6.4.0 (pkg/controller/controller.go
// checkError) also calls ResourceExhausted "finished" (out of space, nothing
// in progress), but it retries every CreateVolume error for ever
// (cmd/csi-provisioner sets FailedProvisionThreshold(0)): a pool that gets
// room again makes the clone, so ResourceExhausted waits here too. OK and an
// empty code are no error. cloner/verdict/testdata/kubernetes-csi-final-codes.txt
// holds IsFinalError's answer for every code, checked against the real
// function by test/tools/mod/resizer/finalcodes.
func DefiniteCode(code string) bool {
	switch code {
	case codes.OK.String(), "",
		codes.Canceled.String(), codes.DeadlineExceeded.String(), codes.Unavailable.String(),
		codes.ResourceExhausted.String(), codes.Aborted.String():
		return false
	}
	return true
}

const (
	MethodCreateVolume = "CreateVolume"
	MethodExpand       = "ControllerExpandVolume"
)

// expansionText is a failed expansion as the record shows it. No time: the
// resizer retries, and a message that changed on every retry would rewrite
// the record each time.
func expansionText(x *fleet.Expansion) string {
	return x.Code + ": " + x.Message
}
