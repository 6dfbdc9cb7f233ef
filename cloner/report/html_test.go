package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// hostile is a name an object could carry: markup, quotes, an entity, a URL.
const hostile = `<script>alert("x")</script><img src='https://evil.example/x.png'>&amp;" onload="x`

// hostileReport puts hostile into every string the page shows.
func hostileReport() *ReportData {
	h := func(s string) string { return s + hostile }
	return &ReportData{
		Ledger: h("ledger"),
		Flavors: []FlavorReport{{SchematicID: h("sid"), Version: h("v"), GoldenImports: 1, WorkerImports: 2, FetchesAvoided: 7, BytesAvoided: 3 << 30,
			Goldens: []GoldenReport{{Namespace: h("ns"), Name: h("golden"), StorageClass: h("class")}}}},
		Images: []ImageReport{{Namespace: h("ns"), Name: h("image"), Image: h("ubuntu"), Consumers: 2,
			Verdicts: map[string]int{"csi-clone": 2, h("verdict"): 1}}},
		Pools: []PoolReport{{Namespace: h("ns"), Pool: h("pool"), Disks: 3, Verdicts: map[string]int{h("verdict"): 3}}},
		BadDisks: []BadDiskReport{{Namespace: h("ns"), Name: h("disk"), Pool: h("pool"), Verdict: h("verdict"),
			Reasons: []ReasonReport{{Reason: h("reason"), Message: h("message"), Fix: h("fix")}}}},
		Untrusted: []UntrustedGoldenReport{{Namespace: h("ns"), Name: h("untrusted"), Problems: []string{h("problem")},
			Consumers: []string{h("consumer")}, Fix: h("fix")}},
		ClonePaths: []verdict.ClonePathReport{
			{Golden: h("ns") + "/" + h("golden"), StorageClass: h("class"), Prediction: predict.Prediction{Path: h("path"), Reason: h("reason")}, Fix: h("fix")},
			{Golden: h("ns") + "/" + h("golden"), StorageClass: predict.EmptyClass, ResolvedClass: h("resolved"), Prediction: predict.Prediction{Path: "csi-clone"}},
		},
		ClonePathsError: h("error"),
		SeenPaths:       []SeenPathReport{{Golden: h("ns") + "/" + h("golden"), StorageClass: h("class"), Disks: 1, Verdicts: map[string]int{h("verdict"): 1}}},
		Checks:          []CheckReport{{Check: h("check"), Status: CheckMissing, Message: h("message"), Fix: h("fix")}},
	}
}

// Every name from the cluster is text on the page, never markup, and the
// page fetches nothing: no script, no element or attribute that loads a
// resource, no CSS url() or @import.
func TestHTMLEscapesEveryNameAndFetchesNothing(t *testing.T) {
	var out bytes.Buffer
	if err := WriteHTML(&out, hostileReport(), time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	if strings.Contains(strings.ToLower(page), "<script") || strings.Contains(page, "<img") {
		t.Fatalf("a name became markup:\n%s", page)
	}
	for _, banned := range []string{"url(", "@import", "http://"} {
		if strings.Contains(page, banned) {
			t.Errorf("the page has %q", banned)
		}
	}
	// The one URL is the hostile name's, escaped text: its quote is &#39;.
	if all, escaped := strings.Count(page, "https://"), strings.Count(page, "&#39;https://evil.example"); all != escaped {
		t.Errorf("the page has https:// %d times, only %d of them in an escaped name", all, escaped)
	}
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	elements := map[string]int{}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			elements[n.Data]++
			for _, a := range n.Attr {
				switch strings.ToLower(a.Key) {
				case "src", "href", "xlink:href", "srcset", "action", "formaction", "poster", "data", "background":
					t.Errorf("<%s %s=%q>: the page must load nothing", n.Data, a.Key, a.Val)
				}
				if strings.HasPrefix(strings.ToLower(a.Key), "on") {
					t.Errorf("<%s %s=%q>: an event handler", n.Data, a.Key, a.Val)
				}
			}
		}
		if n.Type == html.TextNode {
			text.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	for _, tag := range []string{"script", "img", "link", "iframe", "object", "embed", "image", "use", "base"} {
		if elements[tag] > 0 {
			t.Errorf("the page has %d <%s>", elements[tag], tag)
		}
	}
	if elements["svg"] == 0 {
		t.Error("the page has no inline SVG: the fetch bars are missing")
	}
	// Every hostile string arrives as the text it was, once per place.
	for _, name := range []string{"ledger", "golden", "ubuntu", "pool", "disk", "reason", "message", "fix", "untrusted",
		"problem", "consumer", "class", "resolved", "error", "check", "verdict"} {
		if !strings.Contains(text.String(), name+hostile) {
			t.Errorf("the page does not show %q as text", name+hostile)
		}
	}
}

// The numbers a reader looks for are on the page as text: fetches avoided,
// made, bytes avoided, the image's storage-layer clones, the bad disk.
func TestHTMLShowsTheNumbers(t *testing.T) {
	var out bytes.Buffer
	d := hostileReport()
	if err := WriteHTML(&out, d, time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	p := buildPage(d, time.Time{})
	if p.Avoided != 9 || p.BytesAvoided != "3Gi" || p.Bad != 1 || p.Disks != 3 {
		t.Fatalf("totals: %d avoided, %s bytes, %d bad, %d disks; want 9 (7 Factory + 2 image), 3Gi, 1, 3", p.Avoided, p.BytesAvoided, p.Bad, p.Disks)
	}
	if len(p.Classes) != 2 || p.Classes[1] != predict.EmptyClass {
		t.Fatalf("classes %q: want the named class, then %q", p.Classes, predict.EmptyClass)
	}
	if f := p.Fetches[0]; f.AvoidedW+f.MadeW != barWidth || f.Made != "3" || f.MadeDetail != "golden 1, worker 2" {
		t.Fatalf("the largest bar %+v: want %d px and 3 made", f, barWidth)
	}
	for _, want := range []string{"2026-12-06 05:00:00 UTC", ">9<", ">7<", "3Gi", ">3<", "golden 1, worker 2", "resolves to resolved"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// A pool's time per phase is a bar of one segment per dated phase, in the
// phases' order, the longest pool's barWidth long, each labelled with its
// median as text; the disks in flight are shown by phase.
func TestHTMLShowsTimePerPhase(t *testing.T) {
	d := hostileReport()
	d.Pools = []PoolReport{
		{Namespace: "tenant-a", Pool: "slow", Disks: 2, Verdicts: map[string]int{"csi-clone": 2},
			PhaseSeconds: map[string]float64{record.PhaseFinishing: 30, record.PhasePlanning: 60, record.PhaseCreateVolume: 10},
			InFlight:     map[string]int{record.PhaseCreateVolume: 1}},
		{Namespace: "tenant-a", Pool: "fast", Disks: 1, Verdicts: map[string]int{"csi-clone": 1},
			PhaseSeconds: map[string]float64{record.PhaseCreateVolume: 5}},
	}
	p := buildPage(d, time.Time{})
	slow, fast := p.Pools[0].Phases, p.Pools[1].Phases
	if len(slow) != 3 || slow[0].Phase != record.PhasePlanning || slow[1].Phase != record.PhaseCreateVolume || slow[2].Phase != record.PhaseFinishing {
		t.Fatalf("slow pool's segments %+v: want planning, create-volume, finishing", slow)
	}
	if end := slow[2].X + slow[2].W; end != barWidth || slow[1].X != slow[0].W {
		t.Fatalf("slow pool's segments %+v: want them end to end over %d px", slow, barWidth)
	}
	if len(fast) != 1 || fast[0].W != barWidth/20 {
		t.Fatalf("fast pool's bar %+v: want %d px (5 s of the longest 100 s)", fast, barWidth/20)
	}
	var out bytes.Buffer
	if err := WriteHTML(&out, d, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"planning 1m0s", "create-volume 10s", "finishing 30s", "create-volume 5s", "create-volume 1<"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// The median over a pool's disks, per phase: the middle value, or the mean
// of the two middle ones.
func TestMedianSeconds(t *testing.T) {
	got := medianSeconds(map[string][]time.Duration{"a": {3 * time.Second, time.Second, 2 * time.Second}, "b": {4 * time.Second, time.Second}})
	if got["a"] != 2 || got["b"] != 2.5 || medianSeconds(nil) != nil {
		t.Fatalf("medians %v, want a 2, b 2.5 (and nil for nothing)", got)
	}
}
