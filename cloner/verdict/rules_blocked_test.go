package verdict

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// blockedCase names which of judgeBlocked's blocks decided, "" none.
func blockedCase(decided bool, r *record.Record) string {
	switch {
	case !decided:
		return ""
	case r.Verdict == record.VerdictFailed && strings.HasPrefix(r.Message, "CDI refused the clone"):
		return "refused"
	case r.Verdict == record.VerdictFailed && strings.HasPrefix(r.Message, "CDI reports an error on the clone"):
		return "clone-error"
	case r.Verdict == record.VerdictStuck && strings.Contains(r.Message, "does not exist and no volume was cloned"):
		return "golden-gone"
	case r.Verdict == record.VerdictStuck && strings.HasPrefix(r.Message, "the driver refused to grow"):
		return "expand"
	case r.Verdict == record.VerdictStuck && strings.HasPrefix(r.Message, "the driver refused the clone's CreateVolume"):
		return "create"
	}
	return "unexpected " + r.Verdict + ": " + r.Message
}

// TestJudgeBlockedAppliesItsBlocksInOrder: every combination of the facts
// judgeBlocked reads, decided by the first block that holds, in its
// documented order: CDI's CloneValidationFailed; CDI's clone error
// (clonePhase Error, mirrored by the Running condition) lasting
// --evidence-grace once the golden is imported; the golden gone while
// nothing was cloned and CDI made the claim; the volume's last
// ControllerExpandVolume refused with a code the kubernetes-csi sidecars
// call final; the claim's CreateVolume refused with such a code. A code the
// sidecars retry (Unavailable) blocks nothing (domain.md §8).
func TestJudgeBlockedAppliesItsBlocksInOrder(t *testing.T) {
	cfg := rulesConfig()
	now := t0.Add(time.Hour)
	type drv struct{ method, code string }
	for _, refused := range []bool{false, true} {
		for _, cloneErr := range []bool{false, true} {
			for _, golden := range []string{"imported", "importing", "gone", "claim-left"} {
				for _, expandCode := range []string{"", codes.Unavailable.String(), codes.Internal.String()} {
					for _, de := range []drv{{}, {MethodCreateVolume, codes.Unavailable.String()},
						{MethodCreateVolume, codes.Internal.String()}, {MethodExpand, codes.Internal.String()}} {
						f := rulesFacts(cdiv1.CSICloneInProgress)
						if refused {
							f.Disk.Conditions = append(f.Disk.Conditions, fleet.CDICondition{Type: string(cdiv1.DataVolumeBound),
								Status: "False", Reason: fleet.CdiReasonValidationFailed, Message: "too small"})
						}
						if cloneErr {
							f.Pvc.Annotations = map[string]string{fleet.AnnCDIClonePhase: fleet.CdiClonePhaseError}
							f.Disk.Conditions = append(f.Disk.Conditions, fleet.CDICondition{Type: string(cdiv1.DataVolumeRunning),
								Status: "False", Reason: fleet.CdiReasonError, Message: "boom", Since: t0})
						}
						switch golden {
						case "importing":
							f.golden.Phase = string(cdiv1.ImportInProgress)
						case "gone":
							f.golden = nil
						case "claim-left":
							f.golden, f.goldenClaimExists = nil, true
						}
						if expandCode != "" {
							f.clonePV = rulesPV("pvc-tmp", t0, 6<<30)
							f.partial = &fleet.VolumeEvidence{Expansions: []fleet.Expansion{{At: t0, RequiredBytes: 20 << 30, Code: expandCode}}}
						}
						if de.method != "" {
							f.drvErr = &fleet.DriverError{Method: de.method, Code: de.code, Message: "no", Claim: "cozy-public/tmp-pvc-1"}
						}
						var want string
						switch {
						case refused:
							want = "refused"
						case cloneErr && golden == "imported":
							want = "clone-error"
						case golden == "gone" && expandCode == "":
							want = "golden-gone"
						case expandCode == codes.Internal.String():
							want = "expand"
						case de == drv{MethodCreateVolume, codes.Internal.String()}:
							want = "create"
						}
						r := &record.Record{Verdict: record.VerdictPending}
						describeVolume(r, f)
						var a Assessment
						got := blockedCase(judgeBlocked(r, f, &a, cfg, now), r)
						if got != want {
							t.Errorf("refused=%v cloneErr=%v golden=%s expand=%q drv=%v: %q, want %q", refused, cloneErr, golden, expandCode, de, got, want)
						}
					}
				}
			}
		}
	}
}

// TestJudgeBlockedCloneErrorGrace: CDI's clone error fails the disk only
// once it has lasted --evidence-grace (an update conflict passes through
// Error for a moment, fleet.CdiCloneError); before, the disk is judged
// again when the grace ends. While the golden imports, or while the
// DataVolume does not mirror the error, it is CDI waiting.
func TestJudgeBlockedCloneErrorGrace(t *testing.T) {
	cfg := rulesConfig()
	due := t0.Add(cfg.EvidenceGrace)
	for _, tc := range []struct {
		name      string
		now       time.Time
		importing bool
		mirrored  bool
		failed    bool
		recheck   time.Time
	}{
		{"before the grace ends", due.Add(-time.Nanosecond), false, true, false, due},
		{"as the grace ends", due, false, true, true, time.Time{}},
		{"after the grace", due.Add(time.Hour), false, true, true, time.Time{}},
		{"golden still importing", due.Add(time.Hour), true, true, false, time.Time{}},
		{"DataVolume does not show it", due.Add(time.Hour), false, false, false, time.Time{}},
	} {
		f := rulesFacts(cdiv1.CSICloneInProgress)
		f.Pvc.Annotations = map[string]string{fleet.AnnCDIClonePhase: fleet.CdiClonePhaseError, fleet.AnnCDICloneError: "size info missing"}
		if tc.mirrored {
			f.Disk.Conditions = []fleet.CDICondition{{Type: string(cdiv1.DataVolumeRunning), Status: "False", Reason: fleet.CdiReasonError, Since: t0}}
		}
		if tc.importing {
			f.golden.Phase = string(cdiv1.ImportInProgress)
		}
		r := &record.Record{Verdict: record.VerdictPending}
		var a Assessment
		decided := judgeBlocked(r, f, &a, cfg, tc.now)
		if decided != tc.failed || (tc.failed && (r.Verdict != record.VerdictFailed || !strings.HasSuffix(r.Message, ": size info missing"))) {
			t.Errorf("%s: decided=%v %s %q, want failed=%v with CDI's words", tc.name, decided, r.Verdict, r.Message, tc.failed)
		}
		if !a.RecheckAt.Equal(tc.recheck) {
			t.Errorf("%s: recheck at %v, want %v", tc.name, a.RecheckAt, tc.recheck)
		}
	}
}

// TestGoldenGoneOverEveryFact: every combination of the five facts
// goldenGone reads. The golden is gone when neither its DataVolume nor its
// claim exists and nothing was cloned (no volume of the disk's own nor on
// CDI's tmp claim), and CDI has looked for it: it made the disk's claim
// (which it does only once the source exists) or said CloneWithoutSource.
func TestGoldenGoneOverEveryFact(t *testing.T) {
	for bits := 0; bits < 1<<6; bits++ {
		has := func(i int) bool { return bits&(1<<i) != 0 }
		golden, claimLeft, ownPV, clonePV, claim, waits := has(0), has(1), has(2), has(3), has(4), has(5)
		f := rulesFacts(cdiv1.CSICloneInProgress)
		if !golden {
			f.golden = nil
		}
		f.goldenClaimExists = claimLeft
		if ownPV {
			f.pv = rulesPV("pvc-d", t0, 0)
		}
		if clonePV {
			f.clonePV = rulesPV("pvc-tmp", t0, 0)
		}
		if !claim {
			f.Pvc = nil
		}
		if waits {
			f.Disk.Conditions = []fleet.CDICondition{{Type: string(cdiv1.DataVolumeBound), Status: "False", Reason: fleet.CdiReasonWithoutSource}}
		}
		want := !golden && !claimLeft && !ownPV && !clonePV && (claim || waits)
		if got := goldenGone(f); got != want {
			t.Errorf("golden=%v claimLeft=%v ownPV=%v clonePV=%v claim=%v waits=%v: %v, want %v",
				golden, claimLeft, ownPV, clonePV, claim, waits, got, want)
		}
	}
}

// grpcCodes are every code grpc-go's codes package names: its String()
// names a code it knows and prints "Code(n)" for the first it does not.
func grpcCodes(t *testing.T) []codes.Code {
	var out []codes.Code
	for c := codes.OK; !strings.HasPrefix(c.String(), "Code("); c++ {
		out = append(out, c)
	}
	if len(out) < 17 {
		t.Fatalf("grpc-go names %d codes, fewer than the 17 of the gRPC spec", len(out))
	}
	return out
}

// TestDefiniteCodeOverEveryGRPCCode: a code is definite unless it is no
// error (OK, no code) or one the kubernetes-csi sidecars retry: Canceled,
// DeadlineExceeded, Unavailable, ResourceExhausted, Aborted (domain.md §8;
// external-resizer v2.3.0 pkg/util/util.go IsFinalError; the same set as
// testdata/kubernetes-csi-final-codes.txt, held against the real function).
// A code grpc-go does not name is final: the sidecars' default case.
func TestDefiniteCodeOverEveryGRPCCode(t *testing.T) {
	retried := map[codes.Code]bool{codes.Canceled: true, codes.DeadlineExceeded: true, codes.Unavailable: true,
		codes.ResourceExhausted: true, codes.Aborted: true}
	all := grpcCodes(t)
	for _, c := range all {
		want := c != codes.OK && !retried[c]
		if got := DefiniteCode(c.String()); got != want {
			t.Errorf("%s: definite=%v, want %v", c, got, want)
		}
	}
	unnamed := codes.Code(len(all)).String()
	for code, want := range map[string]bool{"": false, unnamed: true} {
		if got := DefiniteCode(code); got != want {
			t.Errorf("%q: definite=%v, want %v", code, got, want)
		}
	}
}

// TestFailedExpansionIsTheLastUnansweredCall: the last ControllerExpandVolume
// when it failed; nil with no evidence, no expansions, or a last call that
// succeeded, whatever came before.
func TestFailedExpansionIsTheLastUnansweredCall(t *testing.T) {
	ok := fleet.Expansion{RequiredBytes: 1, Code: codes.OK.String()}
	bad := func(code string) fleet.Expansion { return fleet.Expansion{RequiredBytes: 2, Code: code} }
	for _, tc := range []struct {
		name string
		ev   *fleet.VolumeEvidence
		want string // the failed call's code, "" none
	}{
		{"no evidence", nil, ""},
		{"no expansions", &fleet.VolumeEvidence{}, ""},
		{"one success", &fleet.VolumeEvidence{Expansions: []fleet.Expansion{ok}}, ""},
		{"one failure", &fleet.VolumeEvidence{Expansions: []fleet.Expansion{bad("Internal")}}, "Internal"},
		{"a retried code fails too", &fleet.VolumeEvidence{Expansions: []fleet.Expansion{bad("Unavailable")}}, "Unavailable"},
		{"failure then success", &fleet.VolumeEvidence{Expansions: []fleet.Expansion{bad("Internal"), ok}}, ""},
		{"success then failure", &fleet.VolumeEvidence{Expansions: []fleet.Expansion{ok, bad("OutOfRange")}}, "OutOfRange"},
		{"two failures: the last", &fleet.VolumeEvidence{Expansions: []fleet.Expansion{bad("Internal"), bad("OutOfRange")}}, "OutOfRange"},
	} {
		got := ""
		if x := failedExpansion(tc.ev); x != nil {
			got = x.Code
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestStaleDriverErrorBoundaries: a CreateVolume error is stale once the
// tap saw a CreateVolume succeed at or after the error's last attempt;
// never without both, never for another method.
func TestStaleDriverErrorBoundaries(t *testing.T) {
	createErr := func(method string) *fleet.DriverError {
		return &fleet.DriverError{Method: method, Code: "Internal", Last: t0}
	}
	created := func(at time.Time) *fleet.VolumeEvidence { return &fleet.VolumeEvidence{Created: at} }
	for _, tc := range []struct {
		name string
		de   *fleet.DriverError
		tap  *fleet.VolumeEvidence
		want bool
	}{
		{"no error", nil, created(t0), false},
		{"no tap", createErr(MethodCreateVolume), nil, false},
		{"created before the last error", createErr(MethodCreateVolume), created(t0.Add(-time.Nanosecond)), false},
		{"created at the last error", createErr(MethodCreateVolume), created(t0), true},
		{"created after the last error", createErr(MethodCreateVolume), created(t0.Add(time.Nanosecond)), true},
		{"another method", createErr(MethodExpand), created(t0.Add(time.Hour)), false},
	} {
		if got := staleDriverError(tc.de, tc.tap); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestVolumeAndEvidenceOfPreferTheDisksOwn: the disk's own PV before the one
// on CDI's tmp claim; the tap's CreateVolume record before expansions alone.
func TestVolumeAndEvidenceOfPreferTheDisksOwn(t *testing.T) {
	own, tmp := rulesPV("own", t0, 0), rulesPV("tmp", t0, 0)
	tap, partial := &fleet.VolumeEvidence{Name: "tap"}, &fleet.VolumeEvidence{Name: "partial"}
	for bits := 0; bits < 4; bits++ {
		f := DiskFacts{}
		var wantPV, wantEv string
		if bits&1 != 0 {
			f.clonePV, f.partial, wantPV, wantEv = tmp, partial, "tmp", "partial"
		}
		if bits&2 != 0 {
			f.pv, f.tap, wantPV, wantEv = own, tap, "own", "tap"
		}
		gotPV, gotEv := "", ""
		if pv := f.volumeOf(); pv != nil {
			gotPV = pv.Name
		}
		if ev := f.evidenceOf(); ev != nil {
			gotEv = ev.Name
		}
		if gotPV != wantPV || gotEv != wantEv {
			t.Errorf("own=%v tmp=%v: volume %q evidence %q, want %q %q", bits&2 != 0, bits&1 != 0, gotPV, gotEv, wantPV, wantEv)
		}
	}
}

// TestClaimTextNamesWhereTheDriverSpoke: CDI's tmp claim while the disk's
// own has no volume, else the disk's claim, else none.
func TestClaimTextNamesWhereTheDriverSpoke(t *testing.T) {
	tmp := rulesClaim("cozy-public", "tmp-pvc-1", 0, nil)
	for _, tc := range []struct {
		name              string
		ownPV, tmp, claim bool
		want              string
	}{
		{"nothing", false, false, false, "no claim"},
		{"own claim", false, false, true, "claim tenant-a/d"},
		{"tmp claim while unbound", false, true, true, "claim cozy-public/tmp-pvc-1"},
		{"own claim once bound", true, true, true, "claim tenant-a/d"},
		{"bound, no claim known", true, true, false, "no claim"},
	} {
		f := rulesFacts(cdiv1.CSICloneInProgress)
		if tc.ownPV {
			f.pv = rulesPV("pvc-d", t0, 0)
		}
		if tc.tmp {
			f.ClonePVC = tmp
		}
		if !tc.claim {
			f.Pvc = nil
		}
		if got := claimText(f); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestFollowClonePathFindsCDIsTmpClaim: while the disk's claim has no
// volume, CDI makes it on tmp-pvc-<target claim UID> in the golden's
// namespace (CDI v1.65 pkg/controller/clone/planner.go, prep-claim.go); its
// PV is the disk's volume until the rebind. A bound disk, an HTTP import
// and a claim without a UID are left alone.
func TestFollowClonePathFindsCDIsTmpClaim(t *testing.T) {
	tmp := rulesClaim("cozy-public", "tmp-pvc-u1", 0, nil)
	tmp.Spec.VolumeName = "pvc-tmp"
	unbound := rulesClaim("cozy-public", "tmp-pvc-u2", 0, nil)
	claims := map[types.NamespacedName]*corev1.PersistentVolumeClaim{
		{Namespace: "cozy-public", Name: "tmp-pvc-u1"}: tmp, {Namespace: "cozy-public", Name: "tmp-pvc-u2"}: unbound}
	inv := fleet.NewInventory(nil, nil, func(ref types.NamespacedName) *corev1.PersistentVolumeClaim { return claims[ref] },
		func(name string) *corev1.PersistentVolume {
			if name == "pvc-tmp" {
				return rulesPV("pvc-tmp", t0, 0)
			}
			return nil
		})
	ev := &Evaluation{Inv: inv}
	for _, tc := range []struct {
		name          string
		uid           types.UID
		ownPV, http   bool
		wantClaim, pv string
	}{
		{"bound tmp claim", "u1", false, false, "tmp-pvc-u1", "pvc-tmp"},
		{"unbound tmp claim", "u2", false, false, "tmp-pvc-u2", ""},
		{"no tmp claim yet", "u3", false, false, "", ""},
		{"claim without a UID", "", false, false, "", ""},
		{"the disk's own volume", "u1", true, false, "", ""},
		{"an HTTP import", "u1", false, true, "", ""},
	} {
		f := rulesFacts(cdiv1.CSICloneInProgress)
		f.Pvc.UID = tc.uid
		if tc.ownPV {
			f.pv = rulesPV("pvc-d", t0, 0)
		}
		if tc.http {
			f.Disk.Kind = fleet.DiskHTTPImport
		}
		ev.followClonePath(&f)
		gotClaim, gotPV := "", ""
		if f.ClonePVC != nil {
			gotClaim = f.ClonePVC.Name
		}
		if f.clonePV != nil {
			gotPV = f.clonePV.Name
		}
		if gotClaim != tc.wantClaim || gotPV != tc.pv {
			t.Errorf("%s: claim %q volume %q, want %q %q", tc.name, gotClaim, gotPV, tc.wantClaim, tc.pv)
		}
	}
}

// TestGoldenGoneMessageQuotesCDIsWait: a disk stuck on a golden that is gone
// names the golden, and adds CDI's CloneWithoutSource words when CDI said
// them (the claim exists in both rows, so the block applies either way).
func TestGoldenGoneMessageQuotesCDIsWait(t *testing.T) {
	for _, waits := range []bool{false, true} {
		f := rulesFacts(cdiv1.CSICloneInProgress)
		f.golden = nil
		if waits {
			f.Disk.Conditions = []fleet.CDICondition{{Type: string(cdiv1.DataVolumeBound), Status: "False",
				Reason: fleet.CdiReasonWithoutSource, Message: "source PVC cozy-public/g not found"}}
		}
		r := &record.Record{Verdict: record.VerdictPending, Golden: "cozy-public/g"}
		var a Assessment
		if !judgeBlocked(r, f, &a, rulesConfig(), t0) || r.Verdict != record.VerdictStuck {
			t.Fatalf("waits=%v: %s %q, want stuck", waits, r.Verdict, r.Message)
		}
		named := strings.HasPrefix(r.Message, "golden cozy-public/g does not exist")
		quoted := strings.HasSuffix(r.Message, "(CloneWithoutSource: source PVC cozy-public/g not found)")
		if !named || quoted != waits {
			t.Errorf("waits=%v: %q, want the golden named and CDI quoted=%v", waits, r.Message, waits)
		}
	}
}

// TestARefusedCloneQuotesWhatWasHeard: a clone the driver refuses is stuck
// at once, before its --stuck-after; it asks to hear the disk's events
// (the scheduler speaks on the VM's pod only after its VolumeBinding
// timeout), quotes CDI's and the scheduler's words once heard, and asks
// again once they are stale.
func TestARefusedCloneQuotesWhatWasHeard(t *testing.T) {
	heard := []HeardEvent{{Reason: "FailedScheduling", Message: "pod virt-launcher-d: binding volumes: context deadline exceeded"}}
	for _, tc := range []struct {
		name     string
		heard    Hearing
		wantHear bool
		suffix   string
	}{
		{"not heard yet", Hearing{}, true, "CDI retries (phase CSICloneInProgress)"},
		{"heard", Hearing{Known: true, Scheduler: heard}, false, "; the scheduler: FailedScheduling: " + heard[0].Message},
		{"heard, stale", Hearing{Known: true, Stale: true, Scheduler: heard}, true, "; the scheduler: FailedScheduling: " + heard[0].Message},
	} {
		f := rulesFacts(cdiv1.CSICloneInProgress)
		f.drvErr = &fleet.DriverError{Method: MethodCreateVolume, Code: codes.InvalidArgument.String(), Message: "no", Claim: "cozy-public/tmp-pvc-1"}
		f.heard = tc.heard
		a := Judge(f, rulesConfig(), t0.Add(time.Minute), nil)
		if a.Record.Verdict != record.VerdictStuck || a.Hear != tc.wantHear || !strings.HasSuffix(a.Record.Message, tc.suffix) {
			t.Errorf("%s: %s hear=%v %q, want stuck hear=%v ending %q", tc.name, a.Record.Verdict, a.Hear, a.Record.Message, tc.wantHear, tc.suffix)
		}
	}
}
