package ledger

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// The ledger holds the counters that must never count twice: per flavor
// totals, and the UIDs of the live DataVolumes already counted. A UID's mark
// and the totals it raised live in the same ConfigMap, written in one update
// guarded by resourceVersion, so a restart, a second replica or two
// overlapping leaders can never count a disk twice. UIDs are never reused,
// so a UID is forgotten once its DataVolume is confirmed gone.
//
// The marks are spread over ledgerShards ConfigMaps by a hash of the UID
// (ledger_book.go), so no object grows with the whole fleet. Each ConfigMap
// is one Ledger; the counters are the sum over the root and the shards.
//
// Data keys (all JSON except format and shards):
//
//	format          "2" ("1": a ledger written before sharding, migrated on read)
//	flavors.json    {"<schematicID>/<version>": FlavorTotals}
//	counted.json    {"<DataVolume UID>": {"r":"ns/name","f":fetches,"a":avoided,"t":timed}}
//	durations.json  {"<verdict>": DurationTotals, "phase/<phase>/<verdict>/<class>": DurationTotals}
//	shards          the number of shards (root only)
const (
	LedgerFormat       = "2"
	LedgerFormatLegacy = "1"
	LedgerKeyFormat    = "format"
	LedgerKeyFlavors   = "flavors.json"
	LedgerKeyCounted   = "counted.json"
	ledgerKeyDurations = "durations.json"
	ledgerKeyShards    = "shards"
	ledgerWriteTries   = 5
	ledgerPrunePerPass = 20
)

// Kinds of Factory fetch.
const (
	FetchGoldenImport = "golden-import"
	FetchWorkerImport = "worker-import"
)

// DurationBuckets are the upper bounds (seconds) of csi_clone_duration_seconds.
var DurationBuckets = []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600}

// FlavorTotals are one flavor's counters.
type FlavorTotals struct {
	FetchesAvoided int64 `json:"fetchesAvoided"`
	GoldenImports  int64 `json:"goldenImports"`
	WorkerImports  int64 `json:"workerImports"`
	BytesAvoided   int64 `json:"bytesAvoided"`
}

// DurationTotals is one verdict's clone-duration histogram. Buckets maps an
// upper bound ("%g" seconds) to the observations in (previous bound, bound];
// observations above the last bound only count in Count and Sum.
type DurationTotals struct {
	Count   uint64            `json:"count"`
	Sum     float64           `json:"sum"`
	Buckets map[string]uint64 `json:"buckets,omitempty"`
}

// mark records what was counted for one DataVolume UID.
type Mark struct {
	Ref     string `json:"r"`
	Fetches int64  `json:"f,omitempty"`
	Avoided bool   `json:"a,omitempty"`
	Timed   bool   `json:"t,omitempty"`
}

// Ledger is the decoded ledger ConfigMap.
type Ledger struct {
	Flavors   map[string]*FlavorTotals
	Durations map[string]*DurationTotals
	Counted   map[string]*Mark
	rv        string
	exists    bool
	format    string // as read; "" for a new one
}

func NewLedger() *Ledger {
	return &Ledger{Flavors: map[string]*FlavorTotals{}, Durations: map[string]*DurationTotals{}, Counted: map[string]*Mark{}}
}

// decodeLedger reads a ledger ConfigMap; an unreadable one is an error, never
// silently reset (that would count everything again).
func decodeLedger(cm *corev1.ConfigMap) (*Ledger, error) {
	l := NewLedger()
	if cm == nil {
		return l, nil
	}
	l.rv, l.exists = cm.ResourceVersion, true
	switch l.format = cm.Data[LedgerKeyFormat]; l.format {
	case LedgerFormat, LedgerFormatLegacy, "":
	default:
		return nil, fmt.Errorf("ledger %s/%s has format %q, this sidecar reads %q", cm.Namespace, cm.Name, l.format, LedgerFormat)
	}
	for key, dst := range map[string]any{LedgerKeyFlavors: &l.Flavors, LedgerKeyCounted: &l.Counted, ledgerKeyDurations: &l.Durations} {
		if raw := cm.Data[key]; raw != "" {
			if err := json.Unmarshal([]byte(raw), dst); err != nil {
				return nil, fmt.Errorf("ledger %s/%s key %s is unreadable: %w", cm.Namespace, cm.Name, key, err)
			}
		}
	}
	if l.Flavors == nil {
		l.Flavors = map[string]*FlavorTotals{}
	}
	if l.Counted == nil {
		l.Counted = map[string]*Mark{}
	}
	if l.Durations == nil {
		l.Durations = map[string]*DurationTotals{}
	}
	return l, nil
}

func (l *Ledger) Encode() map[string]string {
	return map[string]string{
		LedgerKeyFormat:    LedgerFormat,
		LedgerKeyFlavors:   record.MustJSON(l.Flavors),
		LedgerKeyCounted:   record.MustJSON(l.Counted),
		ledgerKeyDurations: record.MustJSON(l.Durations),
	}
}

// ledgerFact is what one DataVolume has earned so far.
type LedgerFact struct {
	Uid      types.UID
	Ref      string
	Flavor   string
	kind     string // FetchGoldenImport, FetchWorkerImport, or "" for a clone
	fetches  int64
	Avoided  bool
	Bytes    int64
	Verdict  string
	Duration time.Duration
	Timed    bool
	// Class is the disk's resolved StorageClass, Steps its timeline's time
	// per phase: observed once, with Duration.
	Class string
	Steps []record.Step
}

func (l *Ledger) flavor(key string) *FlavorTotals {
	t := l.Flavors[key]
	if t == nil {
		t = &FlavorTotals{}
		l.Flavors[key] = t
	}
	return t
}

// apply counts what the facts add beyond what is already marked, and marks
// it, in memory; it reports whether anything changed.
// Adds reports whether Apply would change the ledger for f: a fact of a
// disk the ledger has counted as far as f goes adds nothing.
func (l *Ledger) Adds(f LedgerFact) bool {
	m := l.Counted[string(f.Uid)]
	if m == nil {
		return f.fetches > 0 || f.Avoided || f.Timed
	}
	return f.fetches > m.Fetches || (f.Avoided && !m.Avoided) || (f.Timed && !m.Timed)
}

func (l *Ledger) Apply(facts []LedgerFact) bool {
	changed := false
	for _, f := range facts {
		m := l.Counted[string(f.Uid)]
		if m == nil {
			if f.fetches == 0 && !f.Avoided && !f.Timed {
				continue
			}
			m = &Mark{Ref: f.Ref}
			l.Counted[string(f.Uid)] = m
		}
		if f.fetches > m.Fetches {
			d := f.fetches - m.Fetches
			if f.kind == FetchGoldenImport {
				l.flavor(f.Flavor).GoldenImports += d
			} else {
				l.flavor(f.Flavor).WorkerImports += d
			}
			m.Fetches, changed = f.fetches, true
		}
		if f.Avoided && !m.Avoided {
			t := l.flavor(f.Flavor)
			t.FetchesAvoided++
			t.BytesAvoided += f.Bytes
			m.Avoided, changed = true, true
		}
		if f.Timed && !m.Timed {
			l.observe(f.Verdict, f.Duration)
			for _, st := range f.Steps {
				l.observe(PhaseKey(st.Phase, f.Verdict, f.Class), st.Duration)
			}
			m.Timed, changed = true, true
		}
	}
	return changed
}

func (l *Ledger) observe(verdict string, d time.Duration) {
	t := l.Durations[verdict]
	if t == nil {
		t = &DurationTotals{Buckets: map[string]uint64{}}
		l.Durations[verdict] = t
	}
	if t.Buckets == nil {
		t.Buckets = map[string]uint64{}
	}
	s := d.Seconds()
	t.Count++
	t.Sum += s
	for _, b := range DurationBuckets {
		if s <= b {
			t.Buckets[strconv.FormatFloat(b, 'g', -1, 64)]++
			return
		}
	}
}

// phaseKeyPrefix marks the Durations entries of time per phase, beside the
// per-verdict ones: they share the book, its shards and its merge.
const phaseKeyPrefix = "phase/"

// PhaseKey is the Durations key of a phase's time for a verdict and class.
func PhaseKey(phase, verdict, class string) string {
	return phaseKeyPrefix + phase + "/" + verdict + "/" + class
}

// SplitPhaseKey undoes PhaseKey; ok is false for a per-verdict key.
func SplitPhaseKey(k string) (phase, verdict, class string, ok bool) {
	rest, ok := strings.CutPrefix(k, phaseKeyPrefix)
	if !ok {
		return "", "", "", false
	}
	phase, rest, _ = strings.Cut(rest, "/")
	verdict, class, _ = strings.Cut(rest, "/")
	return phase, verdict, class, true
}

// Cumulative returns the histogram as Prometheus wants it: upper bound ->
// observations <= bound.
func (t *DurationTotals) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(DurationBuckets))
	var run uint64
	for _, b := range DurationBuckets {
		run += t.Buckets[strconv.FormatFloat(b, 'g', -1, 64)]
		out[b] = run
	}
	return out
}

// prune forgets the UIDs whose DataVolume is confirmed gone. live answers
// from the informer; gone asks the API server, so a stale cache can never
// make the ledger forget, and later recount, a live disk. Each question to
// the API server spends one of *budget.
func (l *Ledger) prune(live func(types.UID) bool, gone func(ref string, uid types.UID) bool, budget *int) bool {
	var stale []string
	for uid := range l.Counted {
		if !live(types.UID(uid)) {
			stale = append(stale, uid)
		}
	}
	sort.Strings(stale)
	changed := false
	for _, uid := range stale {
		if *budget <= 0 {
			break
		}
		*budget--
		if gone(l.Counted[uid].Ref, types.UID(uid)) {
			delete(l.Counted, uid)
			changed = true
		}
	}
	return changed
}

// clone is a deep copy: a write that fails must leave the book as it was.
func (l *Ledger) clone() *Ledger {
	c := &Ledger{Flavors: make(map[string]*FlavorTotals, len(l.Flavors)), Durations: make(map[string]*DurationTotals, len(l.Durations)),
		Counted: make(map[string]*Mark, len(l.Counted)), rv: l.rv, exists: l.exists, format: l.format}
	for k, t := range l.Flavors {
		cp := *t
		c.Flavors[k] = &cp
	}
	for k, t := range l.Durations {
		cp := DurationTotals{Count: t.Count, Sum: t.Sum, Buckets: make(map[string]uint64, len(t.Buckets))}
		for b, n := range t.Buckets {
			cp.Buckets[b] = n
		}
		c.Durations[k] = &cp
	}
	for k, m := range l.Counted {
		cp := *m
		c.Counted[k] = &cp
	}
	return c
}

// add sums o's totals, and its marks if asked, into l (the merged view of
// the shards).
func (l *Ledger) add(o *Ledger, marks bool) {
	for k, t := range o.Flavors {
		s := l.flavor(k)
		s.FetchesAvoided += t.FetchesAvoided
		s.GoldenImports += t.GoldenImports
		s.WorkerImports += t.WorkerImports
		s.BytesAvoided += t.BytesAvoided
	}
	for k, t := range o.Durations {
		s := l.Durations[k]
		if s == nil {
			s = &DurationTotals{Buckets: map[string]uint64{}}
			l.Durations[k] = s
		}
		s.Count += t.Count
		s.Sum += t.Sum
		for b, n := range t.Buckets {
			s.Buckets[b] += n
		}
	}
	if marks {
		for k, m := range o.Counted {
			l.Counted[k] = m
		}
	}
}

// splitFlavorKey undoes Flavor.Key.
func SplitFlavorKey(k string) fleet.Flavor {
	sid, ver, _ := strings.Cut(k, "/")
	return fleet.Flavor{SchematicID: sid, Version: ver}
}

// ledgerFacts turns one evaluation into what each DataVolume has earned:
// imports fetched (goldens and HTTP workers, restarts included) and, for a
// finished disk cloned from a trusted golden, one fetch avoided and its
// time. Nothing is counted for an untrusted golden's flavor: its labels
// cannot be trusted; a non-Talos golden has no flavor (its disks are
// counted per golden in the snapshot's Images), so its disks add their
// time only.
func LedgerFacts(ev *verdict.Evaluation, cfg config.Config) []LedgerFact {
	var out []LedgerFact
	for _, g := range ev.Inv.Goldens {
		if !g.Trusted() {
			continue
		}
		if n := verdict.ImportFetches(g.Phase, g.RestartCount); n > 0 {
			out = append(out, LedgerFact{Uid: g.UID, Ref: g.Ref().String(), Flavor: g.Flavor.Key(), kind: FetchGoldenImport, fetches: n})
		}
	}
	for _, a := range ev.Assessments {
		d := a.Disk
		f := LedgerFact{Uid: d.UID, Ref: d.Ref().String()}
		switch {
		case d.Kind == fleet.DiskHTTPImport:
			f.Flavor, f.kind, f.fetches = d.Flavor.Key(), FetchWorkerImport, verdict.ImportFetches(d.Phase, d.RestartCount)
		case a.Golden != nil && a.Golden.Trusted() && d.Finished() && providedFromGolden(a.Record.Verdict):
			if !a.Golden.IsImage() { // an image golden's disks count per golden, in Images
				f.Flavor, f.Avoided, f.Bytes = a.Golden.Flavor.Key(), true, bytesPerFetch(a.Golden, cfg)
			}
			f.Verdict, f.Duration, f.Timed = a.Record.Verdict, a.Duration, a.Timed
			f.Class, f.Steps = a.Record.Class, a.Record.Timeline.Steps()
		default:
			continue
		}
		out = append(out, f)
	}
	return out
}

// providedFromGolden: the verdicts of a disk whose bytes came from the
// golden, whatever moved them; each such disk is one Factory fetch avoided.
func providedFromGolden(verdict string) bool {
	switch verdict {
	case record.VerdictCSIClone, record.VerdictSnapshotClone, record.VerdictHostAssisted, record.VerdictUnknown:
		return true
	}
	return false
}

// bytesPerFetch is --factory-image-bytes when set, else the golden volume's
// size: the image the golden imported is at most that large.
func bytesPerFetch(g *fleet.Golden, cfg config.Config) int64 {
	if cfg.FactoryImageBytes > 0 {
		return cfg.FactoryImageBytes
	}
	return g.SizeBytes()
}
