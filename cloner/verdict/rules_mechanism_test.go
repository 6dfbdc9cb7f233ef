package verdict

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// TestDescribeGoldenCopiesOnlyATrustedGolden: the record carries a golden's
// flavor, volume, class and size only when the golden is known and
// trusted; its size is the DataVolume's request, else what a clone source
// shows (the bound capacity, else nothing known).
func TestDescribeGoldenCopiesOnlyATrustedGolden(t *testing.T) {
	trusted := func(requested, capacity int64) *fleet.Golden {
		g := rulesGolden()
		g.Flavor = fleet.Flavor{SchematicID: "abc", Version: "v1"}
		g.RequestedBytes, g.CapacityBytes = requested, capacity
		return g
	}
	untrusted := trusted(6<<30, 0)
	untrusted.Problems = []string{"name does not match the flavor"}
	for _, tc := range []struct {
		name      string
		g         *fleet.Golden
		copied    bool
		wantBytes int64
	}{
		{"no golden", nil, false, 0},
		{"untrusted golden", untrusted, false, 0},
		{"requested size", trusted(6<<30, 7<<30), true, 6 << 30},
		{"no request: bound capacity", trusted(0, 7<<30), true, 7 << 30},
		{"nothing known", trusted(0, 0), true, 0},
	} {
		r := &record.Record{}
		describeGolden(r, tc.g)
		got := r.SchematicID == "abc" && r.Version == "v1" && r.GoldenVolume == goldenHandle && r.GoldenClass == "replicated"
		none := r.SchematicID == "" && r.Version == "" && r.GoldenVolume == "" && r.GoldenClass == ""
		if got != tc.copied || (!tc.copied && !none) || r.GoldenBytes != tc.wantBytes {
			t.Errorf("%s: record %+v, want copied=%v bytes %d", tc.name, r, tc.copied, tc.wantBytes)
		}
	}
}

// TestDescribeVolumeDriverErrorText: the record's driver error is the
// claim's CreateVolume error, unless the volume's last expansion failed,
// which then speaks; a successful last expansion leaves it alone. The clone
// claim is named only while the disk's own claim has no volume.
func TestDescribeVolumeDriverErrorText(t *testing.T) {
	createErr := &fleet.DriverError{Method: MethodCreateVolume, Code: "Internal", Message: "no pool", Claim: "cozy-public/tmp-pvc-1"}
	failed := fleet.Expansion{RequiredBytes: 20 << 30, Code: "OutOfRange", Message: "too big"}
	ok := fleet.Expansion{RequiredBytes: 20 << 30, Code: "OK"}
	clonePVC := rulesClaim("cozy-public", "tmp-pvc-1", 0, nil)
	for _, tc := range []struct {
		name       string
		drvErr     *fleet.DriverError
		expansions []fleet.Expansion
		ownPV      bool
		want       string
		wantClaim  string
	}{
		{"nothing", nil, nil, false, "", "cozy-public/tmp-pvc-1"},
		{"create error", createErr, nil, false, "CreateVolume Internal: no pool", "cozy-public/tmp-pvc-1"},
		{"failed expansion alone", nil, []fleet.Expansion{failed}, false, "ControllerExpandVolume OutOfRange: too big", "cozy-public/tmp-pvc-1"},
		{"failed expansion wins over the create error", createErr, []fleet.Expansion{failed}, true, "ControllerExpandVolume OutOfRange: too big", ""},
		{"a later success clears the expansion", createErr, []fleet.Expansion{failed, ok}, true, "CreateVolume Internal: no pool", ""},
	} {
		f := rulesFacts(cdiv1.ExpansionInProgress)
		f.drvErr, f.ClonePVC = tc.drvErr, clonePVC
		f.clonePV = rulesPV("pvc-tmp", t0, 6<<30)
		if tc.ownPV {
			f.pv = rulesPV("pvc-d", t0, 6<<30)
		}
		if tc.expansions != nil {
			f.partial = &fleet.VolumeEvidence{Expansions: tc.expansions}
		}
		r := &record.Record{}
		describeVolume(r, f)
		if r.DriverError != tc.want || r.CloneClaim != tc.wantClaim {
			t.Errorf("%s: driver error %q clone claim %q, want %q %q", tc.name, r.DriverError, r.CloneClaim, tc.want, tc.wantClaim)
		}
	}
}

// TestJudgeMechanismFollowsTheTapElseCDI: with the tap's record the
// content source the driver was asked for decides (a volume before a
// snapshot, none: a blank volume, host-assisted); the capacity is the
// larger of the PV's and the driver's final answer. Without it CDI's
// cloneType decides, over every value CDI writes (CDICloneStrategy) and
// none.
func TestJudgeMechanismFollowsTheTapElseCDI(t *testing.T) {
	type want struct{ verdict, source, content, inMessage string }
	for _, tc := range []struct {
		name      string
		tap       *fleet.VolumeEvidence
		cloneType string
		want      want
	}{
		{"tap: source volume", &fleet.VolumeEvidence{SourceVolume: "v1"}, "",
			want{record.VerdictCSIClone, record.SourceCSITap, "volume:v1", "CSI clone of volume v1"}},
		{"tap: snapshot, its volume on the evidence", &fleet.VolumeEvidence{SourceSnapshot: "s1", SnapshotOf: "v2"}, "",
			want{record.VerdictSnapshotClone, record.SourceCSITap, "snapshot:s1", "snapshot s1 of volume v2"}},
		{"tap: snapshot, its volume from the snapshot contents", &fleet.VolumeEvidence{SourceSnapshot: "s2"}, "",
			want{record.VerdictSnapshotClone, record.SourceCSITap, "snapshot:s2", "snapshot s2 of volume v3"}},
		{"tap: snapshot of no known volume", &fleet.VolumeEvidence{SourceSnapshot: "s9"}, "",
			want{record.VerdictSnapshotClone, record.SourceCSITap, "snapshot:s9", "snapshot s9 of volume none"}},
		{"tap: volume before snapshot", &fleet.VolumeEvidence{SourceVolume: "v1", SourceSnapshot: "s1"}, "",
			want{record.VerdictCSIClone, record.SourceCSITap, "volume:v1", "CSI clone of volume v1"}},
		{"tap: blank volume", &fleet.VolumeEvidence{}, string(cdiv1.CloneStrategyCsiClone),
			want{record.VerdictHostAssisted, record.SourceCSITap, "none", "CDI's fallback reason: none"}},
		{"cdi: csi-clone", nil, string(cdiv1.CloneStrategyCsiClone),
			want{record.VerdictCSIClone, record.SourceCDI, "", "from CDI's cloneType csi-clone"}},
		{"cdi: snapshot", nil, string(cdiv1.CloneStrategySnapshot),
			want{record.VerdictSnapshotClone, record.SourceCDI, "", "from CDI's cloneType snapshot"}},
		{"cdi: copy", nil, string(cdiv1.CloneStrategyHostAssisted),
			want{record.VerdictHostAssisted, record.SourceCDI, "", "CDI recorded a host-assisted copy"}},
		{"cdi: none", nil, "",
			want{record.VerdictUnknown, record.SourceCDI, "", "CDI left no cloneType annotation"}},
	} {
		f := rulesFacts(cdiv1.Succeeded)
		f.tap = tc.tap
		r := &record.Record{CDICloneType: tc.cloneType}
		judgeMechanism(r, f, map[string]string{"s2": "v3"})
		got := want{r.Verdict, r.Source, r.ContentSource, tc.want.inMessage}
		if got != tc.want || !strings.Contains(r.Message, tc.want.inMessage) {
			t.Errorf("%s: %+v %q, want %+v", tc.name, got, r.Message, tc.want)
		}
	}
}

// TestJudgeMechanismCapacityIsTheLarger: the record's capacity is the
// larger of the PV's and the driver's final answer, on each side.
func TestJudgeMechanismCapacityIsTheLarger(t *testing.T) {
	for _, tc := range []struct{ pv, driver, want int64 }{
		{10, 0, 10}, {10, 9, 10}, {10, 10, 10}, {10, 11, 11},
	} {
		r := &record.Record{CapacityBytes: tc.pv}
		f := rulesFacts(cdiv1.Succeeded)
		f.tap = &fleet.VolumeEvidence{SourceVolume: "v", CapacityBytes: tc.driver}
		judgeMechanism(r, f, nil)
		if r.CapacityBytes != tc.want {
			t.Errorf("PV %d driver %d: %d, want %d", tc.pv, tc.driver, r.CapacityBytes, tc.want)
		}
	}
}

// TestCloneDurationBoundaries: first CreateVolume to the later of CDI's
// Ready and the driver's final capacity; unknown without the tap's first
// attempt, and never negative.
func TestCloneDurationBoundaries(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name                  string
		tap                   bool
		first, created, grown time.Duration // offsets from t0; grown 0: no expansion
		ready                 time.Duration // -1: not ready
		want                  time.Duration
		timed                 bool
	}{
		{"no tap", false, 0, 0, 0, 60 * s, 0, false},
		{"no first attempt", true, -1, 5 * s, 0, 60 * s, 0, false},
		{"ready after the volume", true, 0, 5 * s, 0, 60 * s, 60 * s, true},
		{"ready before the volume's growth", true, 0, 5 * s, 90 * s, 60 * s, 90 * s, true},
		{"ready with the growth", true, 0, 5 * s, 60 * s, 60 * s, 60 * s, true},
		{"ready after the growth", true, 0, 5 * s, 30 * s, 60 * s, 60 * s, true},
		{"not ready: the volume's creation", true, 0, 5 * s, 0, -1, 5 * s, true},
		{"zero", true, 10 * s, 10 * s, 0, -1, 0, true},
		{"negative", true, 10 * s, 9 * s, 0, -1, 0, false},
	} {
		f := rulesFacts(cdiv1.Succeeded)
		if tc.ready >= 0 {
			f.Disk.ReadySince = t0.Add(tc.ready)
		}
		if tc.tap {
			ev := &fleet.VolumeEvidence{Created: t0.Add(tc.created), CapacityBytes: 6 << 30}
			if tc.first >= 0 {
				ev.FirstAttempt = t0.Add(tc.first)
			}
			if tc.grown > 0 {
				ev.Expansions = []fleet.Expansion{{At: t0.Add(tc.grown), RequiredBytes: 20 << 30, Code: "OK"}}
			}
			f.tap = ev
		}
		r := &record.Record{}
		d, timed := cloneDuration(r, f)
		if d != tc.want || timed != tc.timed || r.DurationSeconds != tc.want.Seconds() {
			t.Errorf("%s: %v %v (record %vs), want %v %v", tc.name, d, timed, r.DurationSeconds, tc.want, tc.timed)
		}
	}
}

// cdiPhases are CDI's DataVolume phases, read from the API's own source
// (containerized-data-importer-api core/v1beta1/types.go, the constants of
// type DataVolumePhase) in the module the build uses.
func cdiPhases(t *testing.T) []string {
	t.Helper()
	api, err := tools.ModuleSource("kubevirt.io/containerized-data-importer-api")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(api, "pkg/apis/core/v1beta1/types.go")
	syntax, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	ast.Inspect(syntax, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || spec.Type == nil || len(spec.Values) != 1 {
			return true
		}
		if id, ok := spec.Type.(*ast.Ident); ok && id.Name == "DataVolumePhase" {
			v, err := strconv.Unquote(spec.Values[0].(*ast.BasicLit).Value)
			if err != nil {
				t.Fatal(err)
			}
			phases = append(phases, v)
		}
		return true
	})
	if len(phases) < 20 {
		t.Fatalf("read %d DataVolume phases from %s: the file changed shape", len(phases), file)
	}
	return phases
}

// importNotStarted are the phases in which CDI has not started the
// importer pod (datavolume/import-controller.go and the import populator
// set ImportScheduled, PVCBound, Pending, WaitForFirstConsumer,
// PendingPopulation before the pod runs; "" and Unknown: not reported).
var importNotStarted = map[string]bool{"": true, string(cdiv1.Pending): true, string(cdiv1.PVCBound): true,
	string(cdiv1.ImportScheduled): true, string(cdiv1.WaitForFirstConsumer): true, string(cdiv1.PendingPopulation): true,
	string(cdiv1.Unknown): true}

// TestImportFetchesOverCDIsPhases: every DataVolume phase CDI defines, with
// no restart, one and two: an import that has not started fetched nothing
// (unless a restart shows it ran), one that has fetched once per run.
func TestImportFetchesOverCDIsPhases(t *testing.T) {
	for _, phase := range cdiPhases(t) {
		for _, restarts := range []int32{0, 1, 2} {
			want := int64(1 + restarts)
			if importNotStarted[phase] && restarts == 0 {
				want = 0
			}
			if got := ImportFetches(phase, restarts); got != want {
				t.Errorf("phase %q restarts %d: %d fetches, want %d", phase, restarts, got, want)
			}
		}
	}
}

// TestJudgeHTTPCoversEveryPhaseKind: an HTTP import is failed when CDI
// failed it, http-import once it succeeded, pending otherwise; the golden
// is named when one exists for its flavor.
func TestJudgeHTTPCoversEveryPhaseKind(t *testing.T) {
	for _, phase := range cdiPhases(t) {
		for _, withGolden := range []bool{false, true} {
			d := rulesDisk(cdiv1.DataVolumePhase(phase))
			d.Kind = fleet.DiskHTTPImport
			var g *fleet.Golden
			wantGolden := ""
			if withGolden {
				g, wantGolden = rulesGolden(), "cozy-public/talos-worker-abc-v1"
			}
			want := map[string]string{string(cdiv1.Failed): record.VerdictFailed, string(cdiv1.Succeeded): record.VerdictHTTPImport}[phase]
			if want == "" {
				want = record.VerdictPending
			}
			r := judgeHTTP(d, g).Record
			if r.Verdict != want || r.Source != record.SourceDataVolume || r.Golden != wantGolden {
				t.Errorf("phase %q golden=%v: %s from %s golden %q, want %s %q", phase, withGolden, r.Verdict, r.Source, r.Golden, want, wantGolden)
			}
		}
	}
}
