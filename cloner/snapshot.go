package cloner

import (
	"cmp"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// Snapshot is the read-only view the metrics collector turns into series at
// scrape time. The verdict part (Leader true) exists only on the replica
// running RunVerdicts: the others report nothing, so a sum over replicas
// never counts a disk twice.
type Snapshot struct {
	Leader bool
	Taken  time.Time
	// Goldens is the catalog with each golden's consumers.
	Goldens []GoldenStatus
	// Disks counts worker disks per flavor and verdict.
	Disks []DiskCount
	// BadDisks counts bad worker disks per namespace, pool, flavor and reason.
	BadDisks []BadDiskCount
	// Flavors are the ledger's per-flavor counters.
	Flavors []FlavorCounters
	// Durations are the ledger's clone-duration histograms per verdict.
	Durations map[string]ledger.DurationTotals
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
	// PredictionChecks compares decided verdicts with their predictions.
	PredictionChecks verdict.PredictionCheck
	// ClassDisks counts clone worker disks per flavor and resolved class.
	ClassDisks []verdict.ClassDiskCount
	// AdmissionParams is the state of the admission guard's parameters
	// (--admission-params): "" when off, else AdmissionParamsSynced or
	// AdmissionParamsFailed.
	AdmissionParams string
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
	ledger.FlavorTotals
}

// Snapshot returns the latest view; never nil.
func (c *Controller) Snapshot() *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &Snapshot{}
	if c.snap != nil {
		cp := *c.snap
		s = &cp
	}
	s.EvidenceDropped, s.EvidenceExpired = c.dropped.Load(), c.expired.Load()
	return s
}

func (c *Controller) setSnapshot(s *Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s != nil {
		s.Malformed = c.malformed.Snapshot()
	}
	c.snap = s
}

// buildSnapshot summarises every disk as last judged, the catalog and the
// ledger as last read or written.
func (c *Controller) buildSnapshot(inv *fleet.Inventory, l *ledger.Ledger) *Snapshot {
	s := &Snapshot{Leader: true, Taken: c.cfg.Clock()}
	c.mu.Lock()
	c.tally.fill(s)
	cons := maps.Clone(c.tally.consumers)
	c.mu.Unlock()
	for _, g := range inv.Goldens {
		if !g.Trusted() {
			continue // not a flavor anywhere: its consumers carry invalid-golden
		}
		s.Goldens = append(s.Goldens, GoldenStatus{Namespace: g.Namespace, Name: g.Name, Flavor: g.Flavor,
			StorageClass: g.Class.Name, Phase: g.Phase, SizeBytes: g.SizeBytes(), Consumers: cons[g.Ref()],
			Trusted: g.Trusted(), Problems: g.Problems, ReadySince: g.ReadySince})
	}
	slices.SortFunc(s.ClassDisks, func(a, b verdict.ClassDiskCount) int {
		return cmp.Or(compareFlavor(a.Flavor, b.Flavor), cmp.Compare(a.Class, b.Class))
	})
	sortSnapshot(s)
	if l != nil {
		s.Flavors, s.Durations = ledgerCounters(l)
	}
	return s
}

func ledgerCounters(l *ledger.Ledger) ([]FlavorCounters, map[string]ledger.DurationTotals) {
	var fl []FlavorCounters
	for k, t := range l.Flavors {
		fl = append(fl, FlavorCounters{Flavor: ledger.SplitFlavorKey(k), FlavorTotals: *t})
	}
	sort.Slice(fl, func(i, j int) bool { return fl[i].Flavor.Key() < fl[j].Flavor.Key() })
	d := make(map[string]ledger.DurationTotals, len(l.Durations))
	for k, t := range l.Durations {
		d[k] = *t
	}
	return fl, d
}

func sortSnapshot(s *Snapshot) {
	// Field by field: a pass sorts every series, and keys built per
	// comparison were most of a small pass's allocations.
	slices.SortFunc(s.Disks, func(a, b DiskCount) int {
		return cmp.Or(compareFlavor(a.Flavor, b.Flavor), cmp.Compare(a.Verdict, b.Verdict))
	})
	slices.SortFunc(s.BadDisks, func(a, b BadDiskCount) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pool, b.Pool),
			compareFlavor(a.Flavor, b.Flavor), cmp.Compare(a.Reason, b.Reason))
	})
}

// compareFlavor orders flavors as their keys (schematic ID, then version) would.
func compareFlavor(a, b fleet.Flavor) int {
	return cmp.Or(cmp.Compare(a.SchematicID, b.SchematicID), cmp.Compare(a.Version, b.Version))
}

// addPredictions puts the pass's predictions into the snapshot the metrics
// read (the checks and disks per class come from every judged disk, in
// buildSnapshot).
func addPredictions(s *Snapshot, p *verdict.Predictor) {
	if p == nil {
		return
	}
	s.PredictionsReady = true
	s.Paths = p.Reports(p.Pairs)
}
