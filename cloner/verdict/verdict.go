package verdict

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// assessment is one judged worker disk.
type Assessment struct {
	Disk   *fleet.WorkerDisk
	Golden *fleet.Golden
	Record *record.Record
	// duration is first CreateVolume to the disk being ready (csi-tap
	// only, see cloneDuration).
	Duration time.Duration
	Timed    bool
	// recheckAt, when set, is when the verdict may change with no object
	// changing (the evidence grace ends).
	RecheckAt time.Time
	// hear: the disk is stuck by age, and CDI's Warning events on it are to
	// be read (cdiwords.go).
	Hear bool
}

// diskFacts is everything one verdict is decided from.
type DiskFacts struct {
	Disk    *fleet.WorkerDisk
	golden  *fleet.Golden
	Pvc     *corev1.PersistentVolumeClaim
	pv      *corev1.PersistentVolume
	tap     *fleet.VolumeEvidence // nil unless the tap saw the CreateVolume
	partial *fleet.VolumeEvidence // expansions seen without the CreateVolume
	drvErr  *fleet.DriverError
	class   fleet.ClassResolution
	// clonePVC and clonePV are where CDI makes the disk while pv is nil
	// (see path.go); goldenClaimExists tells a deleted golden DataVolume
	// whose claim is still there.
	ClonePVC          *corev1.PersistentVolumeClaim
	clonePV           *corev1.PersistentVolume
	goldenClaimExists bool
	// cloneClaimNoted is when the informer saw CDI make the disk's tmp-pvc
	// (fleet.ClaimTimes): kept after CDI deletes it, even when no pass saw it.
	cloneClaimNoted time.Time
	// persisted is the disk's persisted record (as the cache holds it),
	// decoded once by FactsOf, which sets persistedRead; facts built
	// otherwise decode it when read (persistedRecord).
	persisted     *record.RecordDigest
	persistedRead bool
	// predicted is the disk's clone-path prediction (nil: none available).
	predicted *predict.Prediction
	// heard is what CDI said in Warning events on the disk's objects.
	heard Hearing
}

// judge decides the verdict and findings of one worker disk. The rules, in
// order: a failed DataVolume is failed; a finished one is judged by what the
// storage layer did (the tap's record, else CDI's annotation); an unfinished
// one that a definite error blocks is failed or stuck at once (judgeBlocked,
// blocked.go); otherwise it is pending while its golden imports, stuck once a
// requested clone has waited --stuck-after, pending before that.
func Judge(f DiskFacts, cfg config.Config, now time.Time, snapshotOf map[string]string) Assessment {
	d, g := f.Disk, f.golden
	r := &record.Record{Verdict: record.VerdictPending, Source: record.SourceNone, Pool: d.Pool, Golden: d.GoldenRef.String(),
		DiskBytes: d.RequestedBytes, Class: f.class.Name}
	describeGolden(r, g)
	describeVolume(r, f)
	if f.predicted != nil {
		r.Predicted, r.PredictedReason = f.predicted.Path, f.predicted.Reason
	}
	a := Assessment{Disk: d, Golden: g, Record: r}
	switch {
	case d.Failed():
		r.Verdict, r.Message = record.VerdictFailed, failedText(d)
	case d.Finished() && f.pv != nil && f.tap == nil && now.Before(evidenceDue(f.pv, cfg)):
		// The tap's evidence lands on the PV a moment after the PV appears;
		// judging from CDI's annotations before then would claim that no
		// sidecar watched.
		a.RecheckAt = evidenceDue(f.pv, cfg)
		r.Message = "volume " + f.pv.Name + " made; waiting for the tap's evidence on it until " +
			a.RecheckAt.UTC().Format(time.RFC3339)
	case d.Finished() && f.pv != nil:
		judgeMechanism(r, f, snapshotOf)
		a.Duration, a.Timed = cloneDuration(r, f)
	case judgeBlocked(r, f, &a, cfg, now):
	case g != nil && g.Importing():
		// Without the golden's DataVolume nothing imports: CDI clones from
		// its claim, or already did, and the clock below runs.
		r.Message = "waiting for the golden's import"
	case now.Sub(cloneRequestedAt(d, g)) >= cfg.StuckAfter && !f.heard.Known:
		// The controller reads CDI's Warning events first (cdiwords.go).
		a.Hear = true
		r.Message = "clone in progress (phase " + OrNone(d.Phase) + ")"
	case now.Sub(cloneRequestedAt(d, g)) >= cfg.StuckAfter:
		// No "ago" in the message: it must not change on every pass, or the
		// record would be rewritten on every resync.
		r.Verdict = record.VerdictStuck
		r.Message = fmt.Sprintf("clone requested at %s and not finished after %s (phase %s); last driver error: %s",
			cloneRequestedAt(d, g).UTC().Format(time.RFC3339), cfg.StuckAfter, OrNone(d.Phase), OrNone(r.DriverError))
		if why := fleet.CdiExplanation(d); why != "" {
			r.Message += "; CDI: " + why
		}
		quoteHeard(r, &a, f)
	default:
		r.Message = "clone in progress (phase " + OrNone(d.Phase) + ")"
		// The verdict turns stuck then with no object changing, unless a
		// CDI error's grace (judgeBlocked) ends first.
		if stuckAt := cloneRequestedAt(d, g).Add(cfg.StuckAfter); a.RecheckAt.IsZero() || stuckAt.Before(a.RecheckAt) {
			a.RecheckAt = stuckAt
		}
	}
	r.Findings = findings(r, f, snapshotOf)
	r.Timeline = timelineOf(f)
	if !d.Finished() && !d.Failed() {
		r.Phase = inFlightPhase(f)
	}
	return a
}

// failedText says who gave up on a failed disk: CDI on a DataVolume, the
// claim itself on a bare claim (fleet.newClaimDisk).
func failedText(d *fleet.WorkerDisk) string {
	if d.BareClaim {
		return d.FailMessage
	}
	return "CDI marked the DataVolume Failed: " + OrNone(d.FailMessage)
}

// evidenceDue is when a PV's tap evidence, if any replica saw its
// CreateVolume, has had time to be written.
func evidenceDue(pv *corev1.PersistentVolume, cfg config.Config) time.Time {
	return pv.CreationTimestamp.Add(cfg.EvidenceGrace)
}

// cloneRequestedAt is when CDI could start the clone: the later of the
// disk's creation and the golden's import finishing (the disk's creation
// when the golden's DataVolume is gone).
func cloneRequestedAt(d *fleet.WorkerDisk, g *fleet.Golden) time.Time {
	if g != nil && g.ReadySince.After(d.Created) {
		return g.ReadySince
	}
	return d.Created
}

// describeGolden copies the golden's flavor, volume, class and size. An
// untrusted golden's flavor is not copied: its schematic ID and version are
// not a flavor anywhere (labels, ledger, report), only a problem.
func describeGolden(r *record.Record, g *fleet.Golden) {
	if g == nil || !g.Trusted() {
		return
	}
	r.SchematicID, r.Version = g.Flavor.SchematicID, g.Flavor.Version
	r.GoldenVolume, r.GoldenClass, r.GoldenBytes = g.VolumeHandle, g.Class.Name, g.RequestedBytes
	if r.GoldenBytes == 0 {
		r.GoldenBytes = g.SizeBytes()
	}
}

func describeVolume(r *record.Record, f DiskFacts) {
	if f.Pvc != nil {
		r.CDICloneType = f.Pvc.Annotations[fleet.AnnCDICloneType]
		r.FallbackReason = fleet.Clip(f.Pvc.Annotations[fleet.AnnCDIFallbackReason], fleet.MaxMessageBytes)
	}
	if pv := f.volumeOf(); pv != nil {
		r.Volume = fleet.CsiHandle(pv)
		if q, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok {
			r.CapacityBytes = q.Value()
		}
	}
	if f.pv == nil && f.ClonePVC != nil {
		r.CloneClaim = f.ClonePVC.Namespace + "/" + f.ClonePVC.Name
	}
	if f.drvErr != nil {
		// Attempts and times stay on the PVC's own annotation: they change on
		// every retry and would make the record churn.
		r.DriverError = fmt.Sprintf("%s %s: %s", f.drvErr.Method, f.drvErr.Code, f.drvErr.Message)
	}
	if x := failedExpansion(f.evidenceOf()); x != nil {
		r.DriverError = MethodExpand + " " + expansionText(x)
	}
}

// judgeMechanism decides how a finished disk was made. The tap's record of
// the CreateVolume is the authority; CDI's cloneType is used only for a
// volume created while no sidecar watched, and the record says so.
func judgeMechanism(r *record.Record, f DiskFacts, snapshotOf map[string]string) {
	if f.tap != nil {
		r.Source = record.SourceCSITap
		switch {
		case f.tap.SourceVolume != "":
			r.Verdict, r.ContentSource = record.VerdictCSIClone, "volume:"+f.tap.SourceVolume
			r.Message = "CSI clone of volume " + f.tap.SourceVolume
		case f.tap.SourceSnapshot != "":
			r.Verdict, r.ContentSource = record.VerdictSnapshotClone, "snapshot:"+f.tap.SourceSnapshot
			r.Message = fmt.Sprintf("CSI restore of snapshot %s of volume %s", f.tap.SourceSnapshot,
				OrNone(snapshotSource(f.tap, snapshotOf)))
		default:
			r.Verdict, r.ContentSource = record.VerdictHostAssisted, "none"
			r.Message = "the driver created a blank volume (no content source): the data was copied by pods over the network; CDI's fallback reason: " + OrNone(fleet.FallbackText(r.FallbackReason))
		}
		if c, _ := f.tap.FinalCapacity(); c > 0 {
			r.CapacityBytes = max(r.CapacityBytes, c)
		}
		return
	}
	r.Source = record.SourceCDI
	r.Verdict = verdictOfCloneType(r.CDICloneType)
	switch r.Verdict {
	case record.VerdictUnknown:
		r.Message = "the volume was made while no sidecar watched and CDI left no cloneType annotation"
		if f.Disk.BareClaim {
			r.Message = "the volume was made while no sidecar watched; a bare claim is the external-provisioner's alone, and CDI records nothing of it"
		}
	case record.VerdictHostAssisted:
		r.Message = "CDI recorded a host-assisted copy (cloneType copy; volume made while no sidecar watched); CDI's fallback reason: " + OrNone(fleet.FallbackText(r.FallbackReason))
	default:
		r.Message = "from CDI's cloneType " + r.CDICloneType + " (volume made while no sidecar watched)"
	}
}

func verdictOfCloneType(t string) string {
	switch t {
	case fleet.CdiCloneTypeCSIClone:
		return record.VerdictCSIClone
	case fleet.CdiCloneTypeSnapshot:
		return record.VerdictSnapshotClone
	case fleet.CdiCloneTypeHostAssis:
		return record.VerdictHostAssisted
	}
	return record.VerdictUnknown
}

func snapshotSource(ev *fleet.VolumeEvidence, snapshotOf map[string]string) string {
	if ev.SnapshotOf != "" {
		return ev.SnapshotOf
	}
	return snapshotOf[ev.SourceSnapshot]
}

// cloneDuration is first CreateVolume to the disk being ready (CDI's Ready
// condition, or the final capacity if that came later), known only when the
// tap saw the CreateVolume.
func cloneDuration(r *record.Record, f DiskFacts) (time.Duration, bool) {
	if f.tap == nil || f.tap.FirstAttempt.IsZero() {
		return 0, false
	}
	// Until the disk is usable: a host-assisted copy's blank volume has its
	// final size at once, the copy by pods comes after it.
	_, end := f.tap.FinalCapacity()
	if f.Disk.ReadySince.After(end) {
		end = f.Disk.ReadySince
	}
	d := end.Sub(f.tap.FirstAttempt)
	if d < 0 {
		return 0, false
	}
	r.DurationSeconds = d.Seconds()
	return d, true
}

func OrNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// findings are the problems found on top of the verdict, each independent.
func findings(r *record.Record, f DiskFacts, snapshotOf map[string]string) []record.Finding {
	var out []record.Finding
	add := func(reason, msg string) {
		out = append(out, record.Finding{Reason: reason, Message: msg})
	}
	g := f.golden
	if g == nil {
		kind := "DataVolume"
		if f.Disk.FromSnapshot {
			kind = "VolumeSnapshot"
		}
		msg := fmt.Sprintf("golden %s is not in the catalog: no golden %s of that name exists", r.Golden, kind)
		if c := fleet.CdiWaitsForSource(f.Disk); c != nil {
			msg += "; CDI: " + c.Reason + ": " + c.Message
		}
		add(record.ReasonUnknownGolden, msg)
		return out
	}
	if !g.Trusted() {
		add(record.ReasonInvalidGolden, fmt.Sprintf("golden %s breaks the naming rules: %s", r.Golden, joinProblems(g.Problems)))
	}
	if g.Phase == "Failed" {
		add(record.ReasonFailedGolden, fmt.Sprintf("golden %s failed to import; this disk cannot be cloned from it", r.Golden))
	}
	if f.class.Resolved() && g.Class.Resolved() && f.class.Name != g.Class.Name {
		add(record.ReasonClassMismatch, fmt.Sprintf("disk StorageClass %q (%s) differs from golden %s's %q (%s)",
			f.class.Name, f.class.How, r.Golden, g.Class.Name, g.Class.How))
	}
	if msg := tooSmall(r, f); msg != "" {
		add(record.ReasonTooSmall, msg)
	}
	if msg := resizeMissing(r, f); msg != "" {
		add(record.ReasonResizeMissing, msg)
	}
	if x := failedExpansion(f.evidenceOf()); x != nil && (DefiniteCode(x.Code) || r.Verdict != record.VerdictPending) {
		// A code the resizer retries is a problem only once the disk is
		// stuck or done without it.
		add(record.ReasonResizeFailed, fmt.Sprintf("the driver answered ControllerExpandVolume of volume %s to %d bytes with %s",
			r.Volume, x.RequiredBytes, expansionText(x)))
	}
	if msg := cdiDisagrees(r, f); msg != "" {
		add(record.ReasonCDIDisagrees, msg)
	}
	if msg := wrongSource(r, f, snapshotOf); msg != "" {
		add(record.ReasonWrongSource, msg)
	}
	if msg := notReadWriteMany(f); msg != "" {
		add(record.ReasonNotReadWriteMany, msg)
	}
	if msg := predictionWrong(r); msg != "" {
		add(record.ReasonPredictionWrong, msg)
	}
	if msg := badPathPredicted(r, f, out); msg != "" {
		add(record.ReasonBadPathPredicted, msg)
	}
	return out
}

// notReadWriteMany: a worker disk (a clone of a Talos golden: the
// kubernetes-nodes worker VMs live-migrate, evictionStrategy External)
// whose claim has no ReadWriteMany, or before CDI makes the claim, whose
// prediction renders none. Claims without access modes say nothing.
func notReadWriteMany(f DiskFacts) string {
	if f.golden.IsImage() || f.Disk.Kind != fleet.DiskClone {
		return ""
	}
	if f.Pvc != nil && len(f.Pvc.Spec.AccessModes) > 0 {
		modes := fleet.ClaimAccessModes(f.Pvc)
		if !predict.LacksReadWriteMany(modes) {
			return ""
		}
		return fmt.Sprintf("the worker disk's claim is %s, not ReadWriteMany: KubeVirt cannot live-migrate the worker's VM, so a node drain stops it",
			strings.Join(modes, ","))
	}
	if p := f.predicted; p != nil && predict.LacksReadWriteMany(p.AccessModes) {
		return fmt.Sprintf("CDI will render the worker disk's claim %s from class %s's StorageProfile, not ReadWriteMany: KubeVirt cannot live-migrate the worker's VM, so a node drain stops it",
			strings.Join(p.AccessModes, ","), f.class.Name)
	}
	return ""
}

// tooSmall: the model of CDI's rules (package cdirules, through the disk's
// prediction) says CDI refuses the clone because the claim it renders for
// the disk is smaller than the golden's. That compares claims, overhead and
// minimum size included, never the DataVolumes' requests; without a
// prediction there is no finding (CDI's own refusal still fails the disk).
func tooSmall(r *record.Record, f DiskFacts) string {
	p := f.predicted
	if p == nil || p.Reason != predict.ReasonTargetTooSmall {
		return ""
	}
	if p.Message != "" {
		return p.Message
	}
	return fmt.Sprintf("disk size %d bytes: CDI's rules predicted its claim smaller than golden %s's (%s)", r.DiskBytes, r.Golden, p.Reason)
}

// resizeMissing: a finished clone whose volume is smaller than its claim
// asked (the golden-sized clone was never expanded). A host-assisted copy is
// created at the target size, so only clones are checked.
func resizeMissing(r *record.Record, f DiskFacts) string {
	if r.Verdict != record.VerdictCSIClone && r.Verdict != record.VerdictSnapshotClone {
		return ""
	}
	want := fleet.ClaimRequest(f.Pvc)
	if want == 0 || r.CapacityBytes >= want {
		return ""
	}
	msg := fmt.Sprintf("volume capacity %d bytes is below the %d bytes the claim asks", r.CapacityBytes, want)
	ev := f.tap
	if ev == nil {
		ev = f.partial
	}
	if ev != nil {
		if ok, failed := ev.ExpandedTo(want); !ok && failed != nil {
			return msg + fmt.Sprintf("; ControllerExpandVolume failed: %s %s", failed.Code, failed.Message)
		} else if !ok && len(ev.Expansions) == 0 {
			return msg + "; no ControllerExpandVolume reached the driver"
		}
	}
	return msg
}

// cdiDisagrees: CDI's cloneType annotation says one mechanism, the driver
// was asked for another. The storage layer wins; the verdict already follows it.
func cdiDisagrees(r *record.Record, f DiskFacts) string {
	if r.Source != record.SourceCSITap || r.CDICloneType == "" {
		return ""
	}
	cdi := verdictOfCloneType(r.CDICloneType)
	if cdi == record.VerdictUnknown || cdi == r.Verdict {
		return ""
	}
	return fmt.Sprintf("CDI annotated cloneType %q but the driver was asked for %s (content source %s); the storage layer's record wins, the verdict is %s",
		r.CDICloneType, r.Verdict, r.ContentSource, r.Verdict)
}

// wrongSource: the driver copied a volume or snapshot that is not the golden's.
func wrongSource(r *record.Record, f DiskFacts, snapshotOf map[string]string) string {
	if f.tap == nil {
		return ""
	}
	if f.golden.IsSnapshot() {
		if f.golden.SnapshotHandle == "" || f.tap.SourceSnapshot == "" || f.tap.SourceSnapshot == f.golden.SnapshotHandle {
			return ""
		}
		return fmt.Sprintf("the driver restored snapshot %s, not golden VolumeSnapshot %s's %s", f.tap.SourceSnapshot, r.Golden, f.golden.SnapshotHandle)
	}
	if f.golden.VolumeHandle == "" {
		return ""
	}
	src := f.tap.SourceVolume
	if src == "" && f.tap.SourceSnapshot != "" {
		src = snapshotSource(f.tap, snapshotOf)
	}
	if src == "" || src == f.golden.VolumeHandle {
		return ""
	}
	return fmt.Sprintf("the driver copied volume %s, not golden %s's volume %s", src, r.Golden, f.golden.VolumeHandle)
}

func joinProblems(p []string) string {
	s := ""
	for i, x := range p {
		if i > 0 {
			s += "; "
		}
		s += x
	}
	return s
}

// judgeHTTP decides an HTTP-import worker: it did fetch from the Factory.
func judgeHTTP(d *fleet.WorkerDisk, g *fleet.Golden) Assessment {
	r := &record.Record{Verdict: record.VerdictPending, Source: record.SourceDataVolume, Pool: d.Pool,
		SchematicID: d.Flavor.SchematicID, Version: d.Flavor.Version, DiskBytes: d.RequestedBytes}
	if g != nil {
		r.Golden = g.Ref().String()
	}
	switch {
	case d.Failed():
		r.Verdict, r.Message = record.VerdictFailed, "CDI marked the import Failed: "+OrNone(d.FailMessage)
	case d.Finished():
		r.Verdict, r.Message = record.VerdictHTTPImport, fmt.Sprintf("imported from the Image Factory over HTTP (%d fetches)", ImportFetches(d.Phase, d.RestartCount))
	default:
		r.Message = "import in progress (phase " + OrNone(d.Phase) + ")"
	}
	return Assessment{Disk: d, Golden: g, Record: r}
}

// quoteHeard ends a stuck verdict's message with what was heard of the
// disk (cdiwords.go): CDI's Warning events and the scheduler's words on a
// pod waiting for the disk. It asks for them to be heard when they were
// not yet, and again once stale: the scheduler speaks only after its
// VolumeBinding timeout (10 minutes by default).
func quoteHeard(r *record.Record, a *Assessment, f DiskFacts) {
	a.Hear = !f.heard.Known || f.heard.Stale
	if said := heardText(f.heard.Events); said != "" {
		r.Message += "; CDI's Warning events: " + said
	}
	if said := heardText(f.heard.Scheduler); said != "" {
		r.Message += "; the scheduler: " + said
	}
}
