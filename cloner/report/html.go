package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// FormatHTML is the -o value of the report as one self-contained HTML page:
// inline CSS and SVG, no script, nothing fetched (no font, image or style
// from anywhere), so that it opens from a file on a machine with no access
// to the cluster or the internet.
//
// Not yet on the page: the time-per-phase bars per pool (issue 36, item 5).
// They need the per-disk timeline (issue 36, item 1), which ReportData does
// not carry yet.
const FormatHTML = "html"

//go:embed html.tmpl
var htmlSource string

var htmlPageTemplate = template.Must(template.New("report").Parse(htmlSource))

// WriteHTML writes d as the HTML page, generated at now. Every name comes
// from the cluster and is escaped by html/template.
func WriteHTML(w io.Writer, d *ReportData, now time.Time) error {
	return htmlPageTemplate.Execute(w, buildPage(d, now))
}

// htmlPage is what the template shows.
type htmlPage struct {
	Generated string
	Ledger    string
	// BarWidth is the width of the fetch bars in pixels.
	BarWidth int
	Disks    int
	Bad      int
	Avoided  int64
	// BytesAvoided are the flavors' (the other goldens' are not counted).
	BytesAvoided string
	Classes      []string
	Goldens      []goldenRow
	PathsError   string
	Fetches      []fetchRow
	Pools        []poolRow
	PhaseLegend  []phaseBar
	BadDisks     []badRow
	Untrusted    []UntrustedGoldenReport
	// Checks are the checks that did not pass.
	Checks []CheckReport
}

// goldenRow is one golden across every class.
type goldenRow struct {
	Golden, Label string
	Cells         []pathCell
}

// pathCell is one golden on one class: the predicted path and what the
// disks on that class took.
type pathCell struct {
	Predicted, Tone, Reason, Fix string
	// Resolved is the class "(default)" resolves to.
	Resolved  string
	Uncertain bool
	Seen      []seenCount
}

type seenCount struct {
	Verdict, Tone string
	N             int
}

// fetchRow is one flavor's (or other golden's) fetches, with the widths of
// its bar in pixels.
type fetchRow struct {
	Label, Goldens    string
	Made, MadeDetail  string
	Avoided           int64
	BytesAvoided      string
	MadeW, AvoidedW   int
	BarTitle, Counted string
}

type poolRow struct {
	Pool     string
	Disks    int
	Verdicts []seenCount
	// Phases are the bar's segments, median time per phase; InFlight the
	// disks in flight now by phase.
	Phases   []phaseBar
	InFlight []seenCount
}

// phaseBar is one phase's segment of a pool's time bar.
type phaseBar struct {
	Phase, Text string
	X, W        int
	Color       string
}

// phaseColors tells the phases apart in the bars and their legend.
var phaseColors = map[string]string{
	record.PhasePlanning: "#8250df", record.PhaseProvisioning: "#bf8700", record.PhaseCreateVolume: "#0969da",
	record.PhaseExpand: "#1a7f37", record.PhaseBind: "#57606a", record.PhaseFinishing: "#cf222e",
}

type badRow struct {
	Disk, Pool, Verdict, Reason, Message, Fix string
}

// barWidth is the width in pixels of the longest fetch bar.
const barWidth = 200

func buildPage(d *ReportData, now time.Time) htmlPage {
	p := htmlPage{Generated: now.UTC().Format("2006-01-02 15:04:05 UTC"), Ledger: d.Ledger, BarWidth: barWidth,
		PathsError: d.ClonePathsError, Untrusted: d.Untrusted}
	var bytesAvoided int64
	for _, f := range d.Flavors {
		p.Avoided += f.FetchesAvoided
		bytesAvoided += f.BytesAvoided
	}
	p.BytesAvoided = bytesText(bytesAvoided)
	p.Fetches = fetchRows(d)
	p.Avoided += imagesAvoided(d)
	longest := 0.0
	for _, pool := range d.Pools {
		total := 0.0
		for _, v := range pool.PhaseSeconds {
			total += v
		}
		longest = max(longest, total)
	}
	for _, pool := range d.Pools {
		p.Disks += pool.Disks
		p.Pools = append(p.Pools, poolRow{Pool: pool.Namespace + "/" + pool.Pool, Disks: pool.Disks, Verdicts: counts(pool.Verdicts),
			Phases: phaseBars(pool.PhaseSeconds, longest), InFlight: counts(pool.InFlight)})
	}
	p.PhaseLegend = phaseLegend()
	p.Bad = len(d.BadDisks)
	for _, b := range d.BadDisks {
		for _, r := range b.Reasons {
			p.BadDisks = append(p.BadDisks, badRow{Disk: b.Namespace + "/" + b.Name, Pool: b.Pool, Verdict: b.Verdict,
				Reason: r.Reason, Message: r.Message, Fix: r.Fix})
		}
	}
	for _, c := range d.Checks {
		if c.Status != CheckOK {
			p.Checks = append(p.Checks, c)
		}
	}
	p.Classes, p.Goldens = pathMatrix(d)
	return p
}

// phaseBars lays a pool's median time per phase out as segments of one bar,
// barWidth long for the pool whose phases add up to longest seconds.
func phaseBars(seconds map[string]float64, longest float64) []phaseBar {
	var out []phaseBar
	x := 0
	for _, ph := range record.Phases {
		v, ok := seconds[ph]
		if !ok {
			continue
		}
		w := 0
		if longest > 0 {
			w = max(int(v/longest*barWidth+0.5), 1)
		}
		out = append(out, phaseBar{Phase: ph, Text: secondsText(v), X: x, W: w, Color: phaseColors[ph]})
		x += w
	}
	return out
}

// phaseLegend is every phase a bar may show, with its color.
func phaseLegend() []phaseBar {
	var out []phaseBar
	for _, ph := range record.Phases[1:] {
		out = append(out, phaseBar{Phase: ph, Color: phaseColors[ph]})
	}
	return out
}

// pathMatrix lays the predicted and the seen paths out as goldens × classes;
// "(default)" is the last class.
func pathMatrix(d *ReportData) ([]string, []goldenRow) {
	classSet, goldenSet := map[string]bool{}, map[string]bool{}
	for _, c := range d.ClonePaths {
		classSet[c.StorageClass], goldenSet[c.Golden] = true, true
	}
	for _, s := range d.SeenPaths {
		classSet[s.StorageClass], goldenSet[s.Golden] = true, true
	}
	classes := slices.Sorted(maps.Keys(classSet))
	slices.SortStableFunc(classes, func(a, b string) int {
		switch {
		case a == predict.EmptyClass && b != predict.EmptyClass:
			return 1
		case b == predict.EmptyClass && a != predict.EmptyClass:
			return -1
		}
		return 0
	})
	labels := goldenLabels(d)
	var rows []goldenRow
	for _, g := range slices.Sorted(maps.Keys(goldenSet)) {
		row := goldenRow{Golden: g, Label: labels[g]}
		for _, class := range classes {
			row.Cells = append(row.Cells, pathCellOf(d, g, class))
		}
		rows = append(rows, row)
	}
	return classes, rows
}

func pathCellOf(d *ReportData, golden, class string) pathCell {
	var c pathCell
	for _, p := range d.ClonePaths {
		if p.Golden == golden && p.StorageClass == class {
			c.Predicted, c.Tone, c.Reason, c.Fix = p.Path, tone(p.Path), p.Reason, p.Fix
			c.Uncertain = len(p.Uncertain) > 0
			if class == predict.EmptyClass {
				c.Resolved = p.ResolvedClass
			}
		}
	}
	for _, s := range d.SeenPaths {
		if s.Golden == golden && s.StorageClass == class {
			c.Seen = counts(s.Verdicts)
		}
	}
	return c
}

// goldenLabels names each golden's flavor or image.
func goldenLabels(d *ReportData) map[string]string {
	out := map[string]string{}
	for _, f := range d.Flavors {
		for _, g := range f.Goldens {
			out[g.Namespace+"/"+g.Name] = shortFlavor(f.SchematicID, f.Version)
		}
	}
	for _, g := range d.Images {
		out[g.Namespace+"/"+g.Name] = g.Image
	}
	return out
}

// fetchRows are the flavors' Factory fetches, then the other goldens' image
// fetches avoided (their storage-layer clones; the ledger does not count
// their fetches).
func fetchRows(d *ReportData) []fetchRow {
	var rows []fetchRow
	var made, avoided []int64
	for _, f := range d.Flavors {
		var goldens []string
		for _, g := range f.Goldens {
			goldens = append(goldens, g.Namespace+"/"+g.Name)
		}
		m := f.GoldenImports + f.WorkerImports
		rows = append(rows, fetchRow{Label: shortFlavor(f.SchematicID, f.Version), Goldens: strings.Join(goldens, " "),
			Made: fmt.Sprint(m), MadeDetail: fmt.Sprintf("golden %d, worker %d", f.GoldenImports, f.WorkerImports),
			Avoided: f.FetchesAvoided, BytesAvoided: bytesText(f.BytesAvoided), Counted: "Image Factory fetches"})
		made, avoided = append(made, m), append(avoided, f.FetchesAvoided)
	}
	for _, g := range d.Images {
		a := int64(g.Verdicts[record.VerdictCSIClone] + g.Verdicts[record.VerdictSnapshotClone])
		rows = append(rows, fetchRow{Label: g.Image, Goldens: g.Namespace + "/" + g.Name, Made: "not counted",
			Avoided: a, BytesAvoided: "not counted", Counted: "image fetches (storage-layer clones)"})
		made, avoided = append(made, 0), append(avoided, a)
	}
	var most int64 = 1
	for i := range rows {
		most = max(most, made[i]+avoided[i])
	}
	for i := range rows {
		rows[i].AvoidedW = int(avoided[i] * barWidth / most)
		rows[i].MadeW = int(made[i] * barWidth / most)
		rows[i].BarTitle = fmt.Sprintf("%d avoided, %d made", avoided[i], made[i])
	}
	return rows
}

func imagesAvoided(d *ReportData) int64 {
	var n int64
	for _, g := range d.Images {
		n += int64(g.Verdicts[record.VerdictCSIClone] + g.Verdicts[record.VerdictSnapshotClone])
	}
	return n
}

// counts orders a verdict count by verdict.
func counts(v map[string]int) []seenCount {
	out := []seenCount{}
	for _, k := range slices.Sorted(maps.Keys(v)) {
		out = append(out, seenCount{Verdict: k, Tone: tone(k), N: v[k]})
	}
	return out
}

// tone is the colour of a path or verdict: good (the storage cloned it),
// bad (copied over the network, blocked, stuck, failed), neutral (not a
// clone) or wait.
func tone(pathOrVerdict string) string {
	switch pathOrVerdict {
	case predict.PathCSIClone, predict.PathSnapshotClone:
		return "good"
	case predict.PathHostAssisted, predict.PathBlocked, record.VerdictStuck, record.VerdictFailed:
		return "bad"
	case record.VerdictHTTPImport:
		return "neutral"
	}
	return "wait"
}
