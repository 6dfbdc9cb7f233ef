package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"text/tabwriter"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/demo/pools"
)

// show prints what the cluster holds once the disks are judged: per pool
// what CDI recorded next to the sidecar's verdicts, the sidecar's Warning
// events, its `report` table and its key metric lines; with htmlPath set it
// writes the report as an HTML page there and prints the path.
func show(ctx context.Context, c *cluster.Cluster, sidecarBin, htmlPath string) error {
	ds, err := disks(ctx, c)
	if err != nil {
		return err
	}
	showPools(ds)
	if err := showEvents(ctx, c, ds); err != nil {
		return err
	}
	if err := showReport(ctx, c, sidecarBin, "table", os.Stdout); err != nil {
		return err
	}
	if htmlPath != "" {
		if err := writeHTMLReport(ctx, c, sidecarBin, htmlPath); err != nil {
			return err
		}
	}
	return showMetrics(c)
}

// showPools puts, per pool, the class asked for and bound, CDI's cloneType,
// what the driver was asked for (the tap's record), and the verdict.
func showPools(ds []disk) {
	header("per pool: what CDI recorded, what the driver was asked (the tap), the sidecar's verdict")
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  POOL\tDISKS\tCLASS ASKED -> BOUND\tCDI cloneType\tDRIVER ASKED FOR\tVERDICT (judged from)\tFINDINGS")
	var notes []string
	for _, p := range pools.All {
		var mine []disk
		for _, d := range ds {
			if d.pool.Name == p.Name {
				mine = append(mine, d)
			}
		}
		asked := p.Class
		if asked == "" {
			asked = `""`
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s -> %s\t%s\t%s\t%s\t%s\n", p.Name, len(mine), asked,
			tally(mine, boundClass), tally(mine, cdiCloneType), tally(mine, driverAsked),
			tally(mine, verdictAndSource), tally(mine, findings))
		if r := tally(mine, fallbackReason); r != "-" {
			notes = append(notes, fmt.Sprintf("  %s: CDI's fallback reason: %s", p.Name, r))
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Println(n)
	}
}

func boundClass(d disk) string {
	if d.pvc == nil || d.pvc.Spec.StorageClassName == nil {
		return ""
	}
	return *d.pvc.Spec.StorageClassName
}

func cdiCloneType(d disk) string {
	if d.pvc == nil {
		return ""
	}
	return d.pvc.Annotations[fleet.AnnCDICloneType]
}

func fallbackReason(d disk) string {
	if d.pvc == nil {
		return ""
	}
	return d.pvc.Annotations[fleet.AnnCDIFallbackReason]
}

// driverAsked names the content source of the disk's CreateVolume.
func driverAsked(d disk) string {
	r := d.record
	switch {
	case r == nil || r.ContentSource == "":
		return ""
	case r.GoldenVolume != "" && r.ContentSource == "volume:"+r.GoldenVolume:
		return "clone of golden's volume"
	case r.ContentSource == "none":
		return "blank volume"
	}
	return r.ContentSource
}

func verdictAndSource(d disk) string {
	if d.record == nil {
		return "unjudged"
	}
	return d.record.Verdict + " (" + d.record.Source + ")"
}

func findings(d disk) string {
	if d.record == nil {
		return ""
	}
	return strings.Join(d.record.BadReasons(), "+")
}

// tally counts the distinct values of f over ds: "8 csi-clone" or
// "1 copy, 1 csi-clone"; "-" when every value is empty.
func tally(ds []disk, f func(disk) string) string {
	n := map[string]int{}
	for _, d := range ds {
		if v := f(d); v != "" {
			n[v]++
		}
	}
	if len(n) == 0 {
		return "-"
	}
	var out []string
	for v, k := range n {
		out = append(out, fmt.Sprintf("%d %s", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// showEvents counts the sidecar's Warning events on the DataVolumes (and
// bare claims) by reason, with the pools they were about.
func showEvents(ctx context.Context, c *cluster.Cluster, ds []disk) error {
	header("Warning events csi-clone-sidecar emitted on worker DataVolumes and bare claims")
	poolOf := map[string]string{}
	for _, d := range ds {
		poolOf[d.pool.Namespace+"/"+d.name] = d.pool.Name
	}
	byReason := map[string]map[string]int{}
	for _, ns := range namespaces() {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Type != corev1.EventTypeWarning || e.Source.Component != "csi-clone-sidecar" {
				continue
			}
			if byReason[e.Reason] == nil {
				byReason[e.Reason] = map[string]int{}
			}
			byReason[e.Reason][poolOf[ns+"/"+e.InvolvedObject.Name]]++
		}
	}
	if len(byReason) == 0 {
		fmt.Println("  none")
	}
	var reasons []string
	for r := range byReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		var parts []string
		for p, n := range byReason[r] {
			parts = append(parts, fmt.Sprintf("%s %d", p, n))
		}
		sort.Strings(parts)
		fmt.Printf("  %-22s %s\n", r, strings.Join(parts, ", "))
	}
	return nil
}

func namespaces() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range pools.All {
		if !seen[p.Namespace] {
			seen[p.Namespace] = true
			out = append(out, p.Namespace)
		}
	}
	return out
}

// showReport runs the real `csi-clone-sidecar report -o format`, as an
// operator would, its output to out.
func showReport(ctx context.Context, c *cluster.Cluster, bin, format string, out io.Writer) error {
	args := []string{"report", "--kubeconfig", c.Kubeconfig, "-o", format}
	header("csi-clone-sidecar " + strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = out, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("csi-clone-sidecar report -o %s: %w", format, err)
	}
	return nil
}

// writeHTMLReport writes `report -o html` to path and says where it is.
func writeHTMLReport(ctx context.Context, c *cluster.Cluster, bin, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-html: %w", err)
	}
	err = showReport(ctx, c, bin, "html", f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("  the report as one HTML page (no script, nothing fetched; open it in a browser): %s\n", path)
	return nil
}

// showMetrics prints the csi_clone_* series (histograms as _sum and _count)
// and the per-method call counts, from a scrape of the sidecar.
func showMetrics(c *cluster.Cluster) error {
	url := "http://" + c.SidecarMetrics + "/metrics"
	header("metrics: csi_clone_* and csi_sidecar_operations_seconds_count from " + url)
	body, err := get(url)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		keep := strings.HasPrefix(l, "csi_sidecar_operations_seconds_count") ||
			strings.HasPrefix(l, "csi_clone_") && !strings.Contains(l, "_bucket{")
		if keep {
			fmt.Println("  " + l)
		}
	}
	fmt.Printf("  (the Factory itself served %d fetches of the flavor)\n", c.Factory.Fetches(pools.SchematicID, pools.TalosVersion))
	return sc.Err()
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metricsScrape is one parsed scrape of the sidecar.
type metricsScrape map[string]*dto.MetricFamily

func scrape(c *cluster.Cluster) (metricsScrape, error) {
	body, err := get("http://" + c.SidecarMetrics + "/metrics")
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	return metricsScrape(mfs), err
}

// sumBy sums a gauge family's series by the value of one label.
func (s metricsScrape) sumBy(name, label string) map[string]float64 {
	out := map[string]float64{}
	mf := s[name]
	if mf == nil {
		return out
	}
	for _, m := range mf.Metric {
		for _, l := range m.Label {
			// A zero series is a verdict no disk has (any more).
			if l.GetName() == label && m.Gauge != nil && m.Gauge.GetValue() != 0 {
				out[l.GetValue()] += m.Gauge.GetValue()
			}
		}
	}
	return out
}
