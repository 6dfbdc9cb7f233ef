package ledger

import (
	"cmp"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// fleetTally is every judged disk summed the way the metrics show it:
// consumers per golden, disks per flavor and verdict, bad disks per pool
// and reason, clones per flavor and class, prediction checks. remember
// keeps it current by taking a re-judged disk's old contribution out and
// adding its new one, so a pass for one changed disk costs the same in a
// fleet of ten disks or of ten thousand, and a snapshot is as long as the
// metrics' series, never the fleet.
type FleetTally struct {
	Consumers            map[types.NamespacedName]int
	disks                map[DiskCount]int
	bad                  map[BadDiskCount]int
	perClass             map[verdict.ClassDiskCount]int
	images               map[ImageDiskCount]int
	predRight, predWrong int
	// inFlight are the clones in flight per golden and phase, each with
	// when it was requested: the oldest is a minimum, which a count alone
	// cannot keep as disks leave.
	inFlight map[InFlightKey]map[string]time.Time
	// spans are each clone disk's [requested, ready) per golden (ready
	// zero while in flight), for the peak of clones at once.
	spans map[types.NamespacedName]map[string]span
}

type span struct{ from, to time.Time }

func NewFleetTally() *FleetTally {
	return &FleetTally{Consumers: map[types.NamespacedName]int{}, disks: map[DiskCount]int{},
		bad: map[BadDiskCount]int{}, perClass: map[verdict.ClassDiskCount]int{}, images: map[ImageDiskCount]int{},
		inFlight: map[InFlightKey]map[string]time.Time{}, spans: map[types.NamespacedName]map[string]span{}}
}

// add counts a judged disk in (n = 1) or out (n = -1).
func (t *FleetTally) Add(d JudgedDisk, n int) {
	if d.Kind == fleet.DiskClone {
		bump(t.Consumers, d.GoldenRef, n)
	}
	bump(t.disks, DiskCount{Flavor: d.Flavor, Verdict: d.Verdict}, n)
	if d.Image {
		bump(t.images, ImageDiskCount{Golden: d.GoldenRef, Verdict: d.Verdict}, n)
	}
	if d.Class != "" && !d.Image { // per flavor and class, beside the flavor's predicted paths
		bump(t.perClass, verdict.ClassDiskCount{Flavor: d.Flavor, Class: d.Class}, n)
	}
	switch {
	case d.PredictionChecked && d.PredictionRight:
		t.predRight += n
	case d.PredictionChecked:
		t.predWrong += n
	}
	for i, r := range d.BadReasons {
		if !slices.Contains(d.BadReasons[:i], r) { // a disk counts once per reason
			bump(t.bad, BadDiskCount{Namespace: d.Namespace, Pool: d.Pool, Flavor: d.Flavor, Reason: r}, n)
		}
	}
	if d.Kind == fleet.DiskClone && d.Phase != "" {
		t.addInFlight(d, n)
	}
	if d.Kind == fleet.DiskClone && !d.Requested.IsZero() {
		t.addSpan(d, n)
	}
}

func (t *FleetTally) addSpan(d JudgedDisk, n int) {
	spans := t.spans[d.GoldenRef]
	if n > 0 {
		if spans == nil {
			spans = map[string]span{}
			t.spans[d.GoldenRef] = spans
		}
		spans[d.Key] = span{from: d.Requested, to: d.Ready}
		return
	}
	delete(spans, d.Key)
	if len(spans) == 0 {
		delete(t.spans, d.GoldenRef)
	}
}

// peakConcurrency is the most spans open at once: a span opens at from and
// closes at to (never, when to is zero); one closing as another opens at
// the same instant does not overlap it.
func peakConcurrency(spans map[string]span) int {
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.from, 1})
		if !s.to.IsZero() {
			edges = append(edges, edge{s.to, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta)) })
	open, peak := 0, 0
	for _, e := range edges {
		open += e.delta
		peak = max(peak, open)
	}
	return peak
}

func (t *FleetTally) addInFlight(d JudgedDisk, n int) {
	k := InFlightKey{Golden: d.GoldenRef, Phase: d.Phase}
	disks := t.inFlight[k]
	if n > 0 {
		if disks == nil {
			disks = map[string]time.Time{}
			t.inFlight[k] = disks
		}
		disks[d.Key] = d.Requested
		return
	}
	delete(disks, d.Key)
	if len(disks) == 0 {
		delete(t.inFlight, k)
	}
}

// bump adds n to a count and forgets a count that reached zero, so a pool
// or flavor that is gone leaves no series behind.
func bump[K comparable](m map[K]int, k K, n int) {
	if v := m[k] + n; v != 0 {
		m[k] = v
	} else {
		delete(m, k)
	}
}

// fill copies the tally into a snapshot.
func (t *FleetTally) Fill(s *Snapshot) {
	for k, n := range t.disks {
		k.Count = n
		s.Disks = append(s.Disks, k)
	}
	for k, n := range t.bad {
		k.Count = n
		s.BadDisks = append(s.BadDisks, k)
	}
	for k, n := range t.perClass {
		k.Count = n
		s.ClassDisks = append(s.ClassDisks, k)
	}
	for k, n := range t.images {
		k.Count = n
		s.ImageDisks = append(s.ImageDisks, k)
	}
	s.PredictionChecks.Right, s.PredictionChecks.Wrong = t.predRight, t.predWrong
	for k, disks := range t.inFlight {
		c := InFlightCount{InFlightKey: k, Count: len(disks)}
		for _, at := range disks {
			if c.Oldest.IsZero() || at.Before(c.Oldest) {
				c.Oldest = at
			}
		}
		s.InFlight = append(s.InFlight, c)
	}
	for golden, spans := range t.spans {
		s.PeakClones = append(s.PeakClones, GoldenPeak{Golden: golden, Peak: peakConcurrency(spans)})
	}
}

// GoldenPeak is the most clones of a golden in flight at once, over the
// disks that exist now (their timelines).
type GoldenPeak struct {
	Golden types.NamespacedName
	Peak   int
}

// InFlightKey is a golden and a phase of the clones in flight.
type InFlightKey struct {
	Golden types.NamespacedName
	Phase  string
}

// InFlightCount is how many clones of a golden are in a phase, and when
// the oldest of them was requested.
type InFlightCount struct {
	InFlightKey
	Count  int
	Oldest time.Time
}

// judgedDisk is what the metrics need of one judged worker disk.
type JudgedDisk struct {
	Namespace, Pool string
	Kind            string
	GoldenRef       types.NamespacedName
	Flavor          fleet.Flavor
	Verdict         string
	BadReasons      []string
	Class           string // a clone's resolved class, "" otherwise
	// Image: the disk clones a non-Talos golden (counted in ImageDisks).
	Image bool
	// Key is the disk's namespace/name; Phase where its clone is while in
	// flight ("" once CDI finished or failed it), Requested when it was
	// requested.
	Key       string
	Phase     string
	Requested time.Time
	// Ready is when CDI declared the disk ready (zero until then).
	Ready time.Time
	// predictionChecked: the verdict showed the path taken, and
	// predictionRight whether it was the one predicted.
	PredictionChecked, PredictionRight bool
}

// Snapshot is the read-only view the metrics collector turns into series at
// scrape time. The verdict part (Leader true) exists only on the replica
// running RunVerdicts: the others report nothing, so a sum over replicas
// never counts a disk twice.
type Snapshot struct {
	Leader bool
	Taken  time.Time
	// Goldens is the catalog with each golden's consumers.
	Goldens []GoldenStatus
	// Images are the non-Talos goldens that disks clone, ImageDisks their
	// disks per golden and verdict.
	Images     []ImageStatus
	ImageDisks []ImageDiskCount
	// Disks counts worker disks per flavor and verdict.
	Disks []DiskCount
	// BadDisks counts bad worker disks per namespace, pool, flavor and reason.
	BadDisks []BadDiskCount
	// Flavors are the ledger's per-flavor counters.
	Flavors []FlavorCounters
	// Durations are the ledger's clone-duration histograms per verdict.
	Durations map[string]DurationTotals
	// Malformed counts unreadable objects seen by this process, per kind.
	Malformed map[string]int64
	// EvidenceDropped counts observations dropped because the queue was
	// full; EvidenceExpired evidence that waited too long for its object.
	// These two are this replica's own and are set on every replica.
	EvidenceDropped, EvidenceExpired int64
	// PredictionsReady is set once the prediction's informers have synced;
	// Paths is then the predicted clone path of every (golden, class) pair.
	PredictionsReady bool
	Paths            []verdict.ClonePathReport
	// ImagePaths are the image goldens' (golden, class) pairs.
	ImagePaths []verdict.ClonePathReport
	// PredictionChecks compares decided verdicts with their predictions.
	PredictionChecks verdict.PredictionCheck
	// ClassDisks counts clone worker disks per flavor and resolved class.
	ClassDisks []verdict.ClassDiskCount
	// AdmissionParams is the state of the admission guard's parameters
	// (--admission-params): "" when off, else AdmissionParamsSynced or
	// AdmissionParamsFailed.
	AdmissionParams string
	// InFlight are the clones in flight per golden and phase; PeakClones
	// the most clones of each golden ever in flight at once.
	InFlight   []InFlightCount
	PeakClones []GoldenPeak
	// Passes counts the verdict passes this process finished as leader: a
	// count that advances says the engine looked again (tests wait on it,
	// not on quiet).
	Passes int64
}

// GoldenStatus is one golden as metrics and the report show it.
type GoldenStatus struct {
	Namespace, Name string
	Flavor          fleet.Flavor
	StorageClass    string
	Phase           string
	SizeBytes       int64
	Consumers       int
	Trusted         bool
	Problems        []string
	// ReadySince is when its import finished (zero while it has not).
	ReadySince time.Time
}

// ImageStatus is one non-Talos golden as metrics and the report show it:
// Image is its vm-default-images name, else its object name.
type ImageStatus struct {
	Namespace, Name, Image string
	StorageClass, Phase    string
	SizeBytes              int64
	Consumers              int
}

// ImageDiskCount is the number of disks of a non-Talos golden with a verdict.
type ImageDiskCount struct {
	Golden  types.NamespacedName
	Verdict string
	Count   int
}

// DiskCount is the number of worker disks of a flavor with a verdict.
type DiskCount struct {
	Flavor  fleet.Flavor
	Verdict string
	Count   int
}

// BadDiskCount is the number of disks of a pool with a bad reason.
type BadDiskCount struct {
	Namespace, Pool string
	Flavor          fleet.Flavor
	Reason          string
	Count           int
}

// FlavorCounters are one flavor's ledger totals.
type FlavorCounters struct {
	Flavor fleet.Flavor
	FlavorTotals
}

func LedgerCounters(l *Ledger) ([]FlavorCounters, map[string]DurationTotals) {
	var fl []FlavorCounters
	for k, t := range l.Flavors {
		fl = append(fl, FlavorCounters{Flavor: SplitFlavorKey(k), FlavorTotals: *t})
	}
	sort.Slice(fl, func(i, j int) bool { return fl[i].Flavor.Key() < fl[j].Flavor.Key() })
	d := make(map[string]DurationTotals, len(l.Durations))
	for k, t := range l.Durations {
		d[k] = *t
	}
	return fl, d
}

func SortSnapshot(s *Snapshot) {
	// Field by field: a pass sorts every series, and keys built per
	// comparison were most of a small pass's allocations.
	slices.SortFunc(s.Disks, func(a, b DiskCount) int {
		return cmp.Or(CompareFlavor(a.Flavor, b.Flavor), cmp.Compare(a.Verdict, b.Verdict))
	})
	slices.SortFunc(s.BadDisks, func(a, b BadDiskCount) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pool, b.Pool),
			CompareFlavor(a.Flavor, b.Flavor), cmp.Compare(a.Reason, b.Reason))
	})
	slices.SortFunc(s.ImageDisks, func(a, b ImageDiskCount) int {
		return cmp.Or(cmp.Compare(a.Golden.String(), b.Golden.String()), cmp.Compare(a.Verdict, b.Verdict))
	})
}

// compareFlavor orders flavors as their keys (schematic ID, then version) would.
func CompareFlavor(a, b fleet.Flavor) int {
	return cmp.Or(cmp.Compare(a.SchematicID, b.SchematicID), cmp.Compare(a.Version, b.Version))
}

// addPredictions puts the pass's predictions into the snapshot the metrics
// read (the checks and disks per class come from every judged disk, in
// buildSnapshot).
func AddPredictions(s *Snapshot, p *verdict.Predictor) {
	if p == nil {
		return
	}
	s.PredictionsReady = true
	s.Paths = p.Reports(p.Pairs)
	s.ImagePaths = p.Reports(p.ImagePairs)
}
