package verdict

import (
	"fmt"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// judgeBlocked decides an unfinished clone that a definite error keeps from
// finishing, at once rather than after --stuck-after. It reports whether it
// decided. The rules, in order:
//   - CDI refused the clone at validation (CloneValidationFailed): failed.
//   - CDI's clone populator reports an error (clonePhase Error) that has
//     lasted --evidence-grace, once the golden is imported: failed. CDI's own
//     phase map calls this Failed; it retries, and the verdict follows if a
//     retry succeeds. While the golden imports CDI also passes through Error
//     ("source/target size info missing": the source has no capacity yet):
//     that is CDI waiting, not failing.
//   - The golden is gone (no DataVolume, no claim) while no volume was cloned
//     from it yet: stuck, CDI waits for a source that does not exist.
//   - The driver refused the clone's ControllerExpandVolume or CreateVolume
//     with a definite code and no later call succeeded: stuck.
//
// The message carries CDI's or the driver's own words.
func judgeBlocked(r *record.Record, f DiskFacts, a *Assessment, cfg config.Config, now time.Time) bool {
	d := f.Disk
	if c := fleet.CdiRefusal(d); c != nil {
		r.Verdict = record.VerdictFailed
		r.Message = fmt.Sprintf("CDI refused the clone (%s): %s", c.Reason, OrNone(c.Message))
		return true
	}
	if msg, since, ok := fleet.CdiCloneError(d, f.Pvc); ok && f.golden != nil && f.golden.Imported() {
		if due := since.Add(cfg.EvidenceGrace); now.Before(due) {
			a.RecheckAt = due
		} else {
			r.Verdict = record.VerdictFailed
			r.Message = "CDI reports an error on the clone and retries it (clonePhase Error): " + OrNone(msg)
			return true
		}
	}
	if goldenGone(f) {
		r.Verdict = record.VerdictStuck
		r.Message = fmt.Sprintf("golden %s does not exist and no volume was cloned from it yet: CDI waits for the source", r.Golden)
		if c := fleet.CdiWaitsForSource(d); c != nil {
			r.Message += " (" + c.Reason + ": " + c.Message + ")"
		}
		return true
	}
	if x := failedExpansion(f.evidenceOf()); x != nil && DefiniteCode(x.Code) && f.volumeOf() != nil {
		r.Verdict = record.VerdictStuck
		r.Message = fmt.Sprintf("the driver refused to grow the clone's volume %s to %d bytes (%s): %s; CDI waits (phase %s)",
			fleet.CsiHandle(f.volumeOf()), x.RequiredBytes, claimText(f), r.DriverError, OrNone(d.Phase))
		return true
	}
	if de := f.drvErr; de != nil && de.Method == MethodCreateVolume && DefiniteCode(de.Code) {
		r.Verdict = record.VerdictStuck
		r.Message = fmt.Sprintf("the driver refused the clone's CreateVolume for %s: %s; CDI retries (phase %s)",
			de.Claim, r.DriverError, OrNone(d.Phase))
		quoteHeard(r, a, f)
		return true
	}
	return false
}

// goldenGone: neither the golden DataVolume nor its claim exists, CDI has
// looked for it (it made the disk's claim, which it does only once the
// source exists, or said CloneWithoutSource), and nothing was cloned yet.
func goldenGone(f DiskFacts) bool {
	if f.golden != nil || f.goldenClaimExists || f.volumeOf() != nil {
		return false
	}
	return f.Pvc != nil || fleet.CdiWaitsForSource(f.Disk) != nil
}

// claimText names the claim a volume is bound to while the disk's own claim
// is not: where the operator finds the driver's events.
func claimText(f DiskFacts) string {
	if f.pv == nil && f.ClonePVC != nil {
		return "claim " + f.ClonePVC.Namespace + "/" + f.ClonePVC.Name
	}
	if f.Pvc != nil {
		return "claim " + f.Pvc.Namespace + "/" + f.Pvc.Name
	}
	return "no claim"
}
