package verdict

// One table test per rule Judge applies, in the order it applies them
// (verdict.go top-down, then blocked.go, path.go, predictions.go,
// assess.go, cdiwords.go). Each table's rows are the rule's whole closed
// input set, or, where the input is open, the cases on either side of each
// threshold and each optional fact nil and present. Expected values are the
// rules' documented meaning (their doc comments, domain.md §7/§8, CDI's and
// the kubernetes-csi sidecars' source as cited), never the function's own
// output. The package is internal (package verdict) because DiskFacts'
// fields are unexported; clonertest imports this package, so the tables
// build their facts here (rulesFacts).
//
//	rule (file)                             test (file; rules_ omitted)
//	Judge: which case decides (verdict.go)  TestJudgeAppliesItsCasesInOrder (_test.go)
//	evidenceDue                             TestJudgeAppliesItsCasesInOrder (grace rows)
//	stuck: hear again when stale            TestStuckHearsAgainOnlyWhenTheWordsAreStale
//	cloneRequestedAt                        TestCloneRequestedAtIsTheLaterOfDiskAndGoldenReady
//	verdictOfCloneType                      TestVerdictOfCloneTypeCoversCDIsCloneTypes
//	describeGolden                          TestDescribeGoldenCopiesOnlyATrustedGolden (mechanism_test.go)
//	describeVolume (driver error, claim)    TestDescribeVolumeDriverErrorText
//	judgeMechanism, snapshotSource          TestJudgeMechanismFollowsTheTapElseCDI
//	judgeMechanism: capacity                TestJudgeMechanismCapacityIsTheLarger
//	cloneDuration                           TestCloneDurationBoundaries
//	inFlightPhase (timeline.go)             TestInFlightPhaseOverEveryFact (timeline_test.go)
//	timelineOf, Timeline.Steps              TestTimelineIsTheObjectsTimes (timeline_test.go)
//	judgeHTTP                               TestJudgeHTTPCoversEveryPhaseKind
//	ImportFetches (assess.go)               TestImportFetchesOverCDIsPhases
//	judgeBlocked: which block (blocked.go)  TestJudgeBlockedAppliesItsBlocksInOrder (blocked_test.go)
//	judgeBlocked: clone-error grace         TestJudgeBlockedCloneErrorGrace
//	goldenGone                              TestGoldenGoneOverEveryFact
//	goldenGone's message (CDI's wait)       TestGoldenGoneMessageQuotesCDIsWait
//	claimText                               TestClaimTextNamesWhereTheDriverSpoke
//	DefiniteCode (path.go)                  TestDefiniteCodeOverEveryGRPCCode, and against the
//	                                        sidecars' own answers TestDefiniteCodeIsTheSidecarsFinalError (path_test.go)
//	failedExpansion                         TestFailedExpansionIsTheLastUnansweredCall
//	staleDriverError                        TestStaleDriverErrorBoundaries
//	volumeOf, evidenceOf                    TestVolumeAndEvidenceOfPreferTheDisksOwn
//	followClonePath                         TestFollowClonePathFindsCDIsTmpClaim
//	findings: golden facts, unknown alone   TestFindingsOverTheGoldensFacts (findings_test.go)
//	findings: their order in the record     TestFindingsAllAtOnceInTheRecordsOrder
//	findings: class-mismatch                TestClassMismatchNeedsTwoResolvedDifferentClasses
//	findings: resize-failed                 TestResizeFailedOverCodeAndVerdict
//	tooSmall                                TestTooSmallOnlyFromTheTargetTooSmallPrediction
//	resizeMissing                           TestResizeMissingBoundaries
//	cdiDisagrees                            TestCDIDisagreesOverCloneTypeAndVerdict
//	wrongSource                             TestWrongSourceOverTheTapsSources
//	pathOfVerdict (predictions.go)          TestPathOfVerdictCoversEveryVerdict (_test.go)
//	CheckPrediction, predictionWrong        TestCheckPredictionOverEveryVerdictAndPath (findings_test.go)
//	GuardRefuses                            TestGuardRefusesOverEveryPath
//	badPathPredicted: which finding wins    TestBadPathPredictedOverVerdictPathAndFindings
//	badPathPredicted: its message           TestBadPathPredictedQuotesThePrediction
//	recordedPrediction                      TestRecordedPredictionIsThePersistedOne (predictions_test.go)
//	forDisk: which disks are predicted      TestForDiskPredictsOnlyPVCClonesOfAKnownGolden
//	pinnedTo                                TestPinnedToListsTheRequiredInTerms
//	withoutCopyPrefix (cdiwords.go)         TestWithoutCopyPrefixOnlyCDIsCopyPrefix (words_test.go)
//	lastSeen                                TestLastSeenTakesTheFieldItsReporterFilled
//	LatestDistinct                          TestLatestDistinctNewestDistinctAtMostThree
//	heardText                               TestHeardTextJoinsReasonAndMessage
//	OwnEvent                                TestOwnEventBySourceOrReportingController
//
// Not here: the fleet rules Judge calls are fleet's (fleet.CdiRefusal and
// CdiWaitsForSource are exercised by the order tables above, CdiCloneError
// and CdiExplanation have tables in cdi_rules_test.go); too-small's and bad-path-predicted's interplay with the real
// prediction is toosmall_test.go's; the scenarios (verdict_test.go,
// blocked_test.go, path_test.go) prove the rules together on a World.

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// t0 is when every table's disk was created.
var t0 = time.Date(2026, 11, 8, 12, 0, 0, 0, time.UTC)

const goldenHandle = "vol-golden"

// rulesConfig is the default configuration: --stuck-after 10m,
// --evidence-grace 30s.
func rulesConfig() config.Config { return config.DefaultConfig() }

func rulesGolden() *fleet.Golden {
	return &fleet.Golden{Namespace: "cozy-public", Name: "talos-worker-abc-v1", Phase: string(cdiv1.Succeeded),
		ReadySince: t0.Add(-time.Hour), VolumeHandle: goldenHandle, RequestedBytes: 6 << 30,
		Class: fleet.ClassResolution{Name: "replicated", How: fleet.ClassRequested}}
}

func rulesDisk(phase cdiv1.DataVolumePhase) *fleet.WorkerDisk {
	return &fleet.WorkerDisk{Namespace: "tenant-a", Name: "d", Kind: fleet.DiskClone, Phase: string(phase),
		Created: t0, RequestedBytes: 20 << 30, ClaimName: "d",
		GoldenRef: rulesGolden().Ref()}
}

func rulesPV(name string, created time.Time, capacity int64) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: "linstor.csi.linbit.com", VolumeHandle: name}}}}
	if capacity > 0 {
		pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: *resourceBytes(capacity)}
	}
	return pv
}

func rulesClaim(ns, name string, request int64, ann map[string]string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann}}
	if request > 0 {
		pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: *resourceBytes(request)}
	}
	return pvc
}

// rulesFacts is a clone disk in phase with its golden (imported an hour
// before t0), its claim, and what is known of everything.
func rulesFacts(phase cdiv1.DataVolumePhase) DiskFacts {
	return DiskFacts{Disk: rulesDisk(phase), golden: rulesGolden(), Pvc: rulesClaim("tenant-a", "d", 20<<30, nil),
		class: fleet.ClassResolution{Name: "replicated", How: fleet.ClassFromClaim}, heard: Hearing{Known: true}}
}

// TestVerdictOfCloneTypeCoversCDIsCloneTypes: the mechanism CDI's
// cloneType annotation names, over the whole set CDI writes (the
// CDICloneStrategy constants, containerized-data-importer-api v1.65.0
// core/v1beta1/types.go, written by populators/clone-populator.go
// setSavedCloneStrategy) and what it does not write.
func TestVerdictOfCloneTypeCoversCDIsCloneTypes(t *testing.T) {
	for cloneType, want := range map[string]string{
		string(cdiv1.CloneStrategyCsiClone):     record.VerdictCSIClone,
		string(cdiv1.CloneStrategySnapshot):     record.VerdictSnapshotClone,
		string(cdiv1.CloneStrategyHostAssisted): record.VerdictHostAssisted,
		"":                                      record.VerdictUnknown,
		"csi-clone ":                            record.VerdictUnknown,
		"network":                               record.VerdictUnknown,
		strings.ToUpper(fleet.CdiCloneTypeSnapshot): record.VerdictUnknown,
	} {
		if got := verdictOfCloneType(cloneType); got != want {
			t.Errorf("cloneType %q: verdict %q, want %q", cloneType, got, want)
		}
	}
}

// TestPathOfVerdictCoversEveryVerdict: the clone path each verdict word
// shows, over every verdict; pending, unknown and http-import show none.
func TestPathOfVerdictCoversEveryVerdict(t *testing.T) {
	type shown struct {
		path    string
		decided bool
	}
	for verdict, want := range map[string]shown{
		record.VerdictPending:       {"", false},
		record.VerdictCSIClone:      {predict.PathCSIClone, true},
		record.VerdictSnapshotClone: {predict.PathSnapshotClone, true},
		record.VerdictHostAssisted:  {predict.PathHostAssisted, true},
		record.VerdictHTTPImport:    {"", false},
		record.VerdictStuck:         {predict.PathBlocked, true},
		record.VerdictFailed:        {predict.PathBlocked, true},
		record.VerdictUnknown:       {"", false},
	} {
		if path, decided := pathOfVerdict(verdict); path != want.path || decided != want.decided {
			t.Errorf("verdict %q: path %q decided %v, want %q %v", verdict, path, decided, want.path, want.decided)
		}
	}
}

// judgeCase names which of Judge's cases decided an assessment.
func judgeCase(a Assessment) string {
	r := a.Record
	switch {
	case r.Verdict == record.VerdictFailed && strings.HasPrefix(r.Message, "CDI marked the DataVolume Failed"):
		return "failed"
	case r.Verdict == record.VerdictFailed && strings.HasPrefix(r.Message, "CDI refused the clone"):
		return "blocked"
	case r.Source == record.SourceCSITap:
		return "tap"
	case r.Source == record.SourceCDI:
		return "cdi-annotations"
	case r.Verdict == record.VerdictStuck:
		return "stuck"
	case r.Verdict != record.VerdictPending:
		return "unexpected " + r.Verdict
	case strings.Contains(r.Message, "waiting for the tap's evidence"):
		return "evidence-wait"
	case r.Message == "waiting for the golden's import":
		return "golden-import"
	case a.Hear:
		return "hear"
	case strings.HasPrefix(r.Message, "clone in progress"):
		return "in-progress"
	}
	return "unexpected " + r.Message
}

// TestJudgeAppliesItsCasesInOrder: every combination of the facts Judge's
// switch reads, each on both sides of its threshold, decided by the first
// case that holds in Judge's documented order: a failed DataVolume is
// failed; a finished one with a volume is judged by the tap's record, or,
// once --evidence-grace after the PV appeared passed without one, by CDI's
// annotations; an unfinished one a definite error blocks is decided by
// judgeBlocked (here CDI's CloneValidationFailed); while the golden imports
// it waits; once --stuck-after has passed since the clone was requested it
// is first heard (CDI's events read), then stuck; before, in progress.
func TestJudgeAppliesItsCasesInOrder(t *testing.T) {
	cfg := rulesConfig()
	type moment struct {
		name string
		at   time.Time
	}
	moments := []moment{
		{"before-evidence-grace", t0.Add(cfg.EvidenceGrace - time.Nanosecond)},
		{"at-evidence-grace", t0.Add(cfg.EvidenceGrace)},
		{"before-stuck-after", t0.Add(cfg.StuckAfter - time.Nanosecond)},
		{"at-stuck-after", t0.Add(cfg.StuckAfter)},
	}
	phases := []cdiv1.DataVolumePhase{cdiv1.Failed, cdiv1.Succeeded, cdiv1.CSICloneInProgress}
	for _, phase := range phases {
		for _, hasPV := range []bool{false, true} {
			for _, hasTap := range []bool{false, true} {
				for _, now := range moments {
					for _, refused := range []bool{false, true} {
						for _, importing := range []bool{false, true} {
							for _, heard := range []bool{false, true} {
								f := rulesFacts(phase)
								if hasPV {
									f.pv = rulesPV("pvc-d", t0, 20<<30)
								}
								if hasTap {
									f.tap = &fleet.VolumeEvidence{Created: t0, FirstAttempt: t0, SourceVolume: goldenHandle}
								}
								if refused {
									f.Disk.Conditions = []fleet.CDICondition{{Type: string(cdiv1.DataVolumeBound), Status: "False",
										Reason: fleet.CdiReasonValidationFailed, Message: "target too small"}}
								}
								if importing {
									f.golden.Phase, f.golden.ReadySince = string(cdiv1.ImportInProgress), time.Time{}
								}
								f.heard.Known = heard
								aged := !now.at.Before(t0.Add(cfg.StuckAfter))
								var want string
								switch {
								case phase == cdiv1.Failed:
									want = "failed"
								case phase == cdiv1.Succeeded && hasPV && hasTap:
									want = "tap"
								case phase == cdiv1.Succeeded && hasPV && now.at.Before(t0.Add(cfg.EvidenceGrace)):
									want = "evidence-wait"
								case phase == cdiv1.Succeeded && hasPV:
									want = "cdi-annotations"
								case refused:
									want = "blocked"
								case importing:
									want = "golden-import"
								case aged && !heard:
									want = "hear"
								case aged:
									want = "stuck"
								default:
									want = "in-progress"
								}
								a := Judge(f, cfg, now.at, nil)
								if got := judgeCase(a); got != want {
									t.Errorf("%s pv=%v tap=%v %s refused=%v importing=%v heard=%v: case %s, want %s (%s %q)",
										phase, hasPV, hasTap, now.name, refused, importing, heard, got, want, a.Record.Verdict, a.Record.Message)
								}
								checkRecheck(t, a, want, cfg)
							}
						}
					}
				}
			}
		}
	}
}

// checkRecheck: the evidence wait rechecks when the grace ends, a clone in
// progress when it would turn stuck; no other case asks for a recheck here.
func checkRecheck(t *testing.T, a Assessment, c string, cfg config.Config) {
	t.Helper()
	var want time.Time
	switch c {
	case "evidence-wait":
		want = t0.Add(cfg.EvidenceGrace)
	case "in-progress":
		want = t0.Add(cfg.StuckAfter)
	}
	if !a.RecheckAt.Equal(want) {
		t.Errorf("case %s: recheck at %v, want %v", c, a.RecheckAt, want)
	}
}

// TestStuckHearsAgainOnlyWhenTheWordsAreStale: a stuck disk asks for CDI's
// events to be read again exactly when what was heard is stale, and quotes
// what was heard.
func TestStuckHearsAgainOnlyWhenTheWordsAreStale(t *testing.T) {
	cfg := rulesConfig()
	for _, stale := range []bool{false, true} {
		f := rulesFacts(cdiv1.CSICloneInProgress)
		f.heard = Hearing{Known: true, Stale: stale, Events: []HeardEvent{{Reason: "CloneSourceInUse", Message: "pod x using golden"}}}
		a := Judge(f, cfg, t0.Add(cfg.StuckAfter), nil)
		if a.Record.Verdict != record.VerdictStuck || a.Hear != stale {
			t.Errorf("stale=%v: %s hear=%v", stale, a.Record.Verdict, a.Hear)
		}
		if m := a.Record.Message; !strings.HasPrefix(m, "clone requested at 2026-11-08T12:00:00Z and not finished after 10m0s") ||
			!strings.HasSuffix(m, "; CDI's Warning events: CloneSourceInUse: pod x using golden") {
			t.Errorf("stale=%v: message %q does not say when and quote the event", stale, m)
		}
	}
}

// TestCloneRequestedAtIsTheLaterOfDiskAndGoldenReady: the stuck clock
// starts at the later of the disk's creation and the golden's import
// finishing; without a golden, at the disk's creation.
func TestCloneRequestedAtIsTheLaterOfDiskAndGoldenReady(t *testing.T) {
	d := rulesDisk(cdiv1.CSICloneInProgress)
	for _, tc := range []struct {
		name  string
		ready *time.Time // nil: no golden
		want  time.Time
	}{
		{"no golden", nil, t0},
		{"golden never ready", &time.Time{}, t0},
		{"golden ready before the disk", ptr(t0.Add(-time.Nanosecond)), t0},
		{"golden ready with the disk", ptr(t0), t0},
		{"golden ready after the disk", ptr(t0.Add(time.Nanosecond)), t0.Add(time.Nanosecond)},
	} {
		var g *fleet.Golden
		if tc.ready != nil {
			g = rulesGolden()
			g.ReadySince = *tc.ready
		}
		if got := cloneRequestedAt(d, g); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func resourceBytes(b int64) *resource.Quantity { return resource.NewQuantity(b, resource.BinarySI) }

func ptr[T any](v T) *T { return &v }
