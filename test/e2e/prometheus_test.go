package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// A real Prometheus (Debian's package) scrapes the sidecar the way the
// shipped ServiceMonitor makes prometheus-operator scrape it, loads the
// shipped alert rules, and answers every query of the shipped dashboard;
// VictoriaMetrics and vmalert do the same beside it (victoriametrics_test.go).

const (
	promScrape   = time.Second     // scrape and rule evaluation interval
	promStep     = 2 * time.Second // range query step, Grafana's $__interval
	promTenant   = "tenant-prom"
	dashboardRel = "../../deploy/monitoring/dashboard.json"
)

var promFlavor = strings.Repeat("7f", 32)

// promImage is the vm-default-images golden whose disk feeds the image panels.
const promImage = "ubuntu"

// TestDashboardPanelsHaveDataInPrometheus builds a stack with one CSI
// clone, one host-assisted copy and one HTTP import, lets Prometheus scrape
// the sidecar throughout, then evaluates every panel query of
// deploy/monitoring/dashboard.json through Prometheus's HTTP API, with the
// dashboard's variables resolved from their own queries: every query must
// return data. The shipped alert rules, evaluated on the same scrapes, must
// fire exactly the alerts the stack deserves. VictoriaMetrics single-node
// and vmalert, scraping and evaluating the same in the same run, must give
// the same verdict: every panel has data, the same alerts fire.
func TestDashboardPanelsHaveDataInPrometheus(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{SidecarArgs: []string{"--resync-period=2s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	rules := chartRuleFile(t)
	prom := startPrometheus(t, ctx, c, rules)
	vm := startVictoriaMetrics(t, ctx, c, rules)
	backends := []struct {
		name          string
		query, alerts *prometheus
	}{{"Prometheus", prom, prom}, {"VictoriaMetrics", vm.query, vm.alerts}}
	// The dashboard's time range starts once both scrape the sidecar (the
	// first scrape comes a few seconds after start): everything the stack
	// does from here on is in the series.
	for _, b := range backends {
		b.query.waitFor(t, ctx, `up{job="csi-clone-sidecar"}`, 1)
	}
	start := time.Now()
	// A client that does not speak HTTP/2: the relay forwards it, the tap
	// gives up on it, and the dashboard and alerts must show that.
	sendNonHTTP2(t, c.SidecarSocket)

	disks := oneDiskOfEachKind(t, ctx, c)
	// Each has the final state once it has scraped every verdict; a rate
	// window later, the last changes are inside every window.
	settled := time.Now().Add(rateInterval())
	for _, b := range backends {
		b.query.waitFor(t, ctx, `count(count by (verdict) (csi_clone_worker_disks{job="csi-clone-sidecar"}))`, float64(disks))
		b.query.waitFor(t, ctx, `max(csi_clone_image_disks{job="csi-clone-sidecar",verdict="csi-clone"})`, 1)
		b.query.waitFor(t, ctx, fmt.Sprintf(`timestamp(up{job="csi-clone-sidecar"}) > bool %s`, unix(settled)), 1)
	}

	d := loadDashboard(t)
	end := time.Now()
	want := []string{"CSICloneClassMismatch", "CSICloneHostAssisted", "CSICloneTapAbandonedConnections"}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, choice := range []string{"All", "first"} {
				d.checkPanels(t, b.query, choice, start, end)
			}
			d.checkAbandonedShown(t, b.query, start, end)
			b.alerts.checkAlerts(t, ctx, want)
		})
	}
}

// sendNonHTTP2 connects to the relay like a CSI client would, but speaks
// HTTP/1.1.
func sendNonHTTP2(t *testing.T, socket string) {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: csi\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	_, _ = conn.Read(buf) // whatever the driver answers, or its hang-up
}

// oneDiskOfEachKind imports a golden and makes a CSI clone of it, a
// host-assisted copy and an HTTP import, and a vm-disk CSI-cloned from a
// vm-default-images golden, and waits for their verdicts; it returns how
// many verdicts the worker disks have.
func oneDiskOfEachKind(t *testing.T, ctx context.Context, c *cluster.Cluster) int {
	t.Helper()
	golden := cluster.GoldenName(promFlavor, talosVersion)
	if _, err := c.CreateGolden(ctx, cluster.Golden{SchematicID: promFlavor, Version: talosVersion, StorageClass: "replicated"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, golden, cdiv1.Succeeded, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespace(ctx, promTenant); err != nil {
		t.Fatal(err)
	}
	disks := map[string]string{"clone": record.VerdictCSIClone, "copy": record.VerdictHostAssisted, "http": record.VerdictHTTPImport}
	for _, w := range []cluster.Worker{
		{Namespace: promTenant, Name: "clone", Golden: golden, Pool: "kubernetes-md0", StorageClass: "replicated", Size: "20Gi"},
		// A larger target on a class without expansion: CDI copies host-assisted.
		{Namespace: promTenant, Name: "copy", Golden: golden, Pool: "kubernetes-md1", StorageClass: "replicated-fixed", Size: "20Gi"},
	} {
		if _, err := c.CreateWorkerDisk(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	createFactoryImport(t, ctx, c, "http", "kubernetes-md2", c.Factory.URL(promFlavor, talosVersion))
	// A vm-disk of a vm-default-images golden: the image panels' disk.
	if _, err := c.CreateVMImage(ctx, cluster.VMImage{Image: promImage, StorageClass: "replicated", Size: "5Gi"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, cluster.VMImageGoldenName(promImage), cdiv1.Succeeded, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateVMDisk(ctx, cluster.VMDisk{Namespace: promTenant, Name: "vm-disk", Image: promImage, StorageClass: "replicated", Size: "10Gi"}); err != nil {
		t.Fatal(err)
	}
	waitPVCVerdict(t, ctx, c, promTenant, "vm-disk", record.VerdictCSIClone)
	for name, verdict := range disks {
		waitPVCVerdict(t, ctx, c, promTenant, name, verdict)
	}
	return len(disks)
}

// checkPanels evaluates every panel query with the variables chosen as
// choice ("All" or "first"): each must return data.
func (d grafanaDashboard) checkPanels(t *testing.T, prom *prometheus, choice string, start, end time.Time) {
	t.Helper()
	vals := d.resolveVariables(t, prom, choice, start, end)
	t.Logf("variables (%s): %v", choice, vals)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := substitute(tg.Expr, vals, end.Sub(start))
			if err := prom.hasData(tg.instant(), expr, start, end); err != nil {
				t.Errorf("panel %q query %s (variables %s): %v\n  %s", p.Title, tg.RefID, choice, err, expr)
			}
		}
	}
}

// checkAbandonedShown: the one abandoned connection is on the panel that
// queries the counter, as a count above zero, although its series appeared
// already counting it.
func (d grafanaDashboard) checkAbandonedShown(t *testing.T, prom *prometheus, start, end time.Time) {
	t.Helper()
	vals := d.resolveVariables(t, prom, "All", start, end)
	shown := false
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, "csi_clone_tap_connections_abandoned_total") {
				continue
			}
			shown = true
			expr := fmt.Sprintf("max(%s) > 0", substitute(tg.Expr, vals, end.Sub(start)))
			if err := prom.hasData(tg.instant(), expr, start, end); err != nil {
				t.Errorf("panel %q query %s never shows the abandoned connection: %v\n  %s", p.Title, tg.RefID, err, expr)
			}
		}
	}
	if !shown {
		t.Error("no panel queries csi_clone_tap_connections_abandoned_total")
	}
}

// createFactoryImport creates a worker disk of a pool that does not use the
// golden: it imports its image from the Factory over HTTP.
func createFactoryImport(t *testing.T, ctx context.Context, c *cluster.Cluster, name, pool, url string) {
	t.Helper()
	block := corev1.PersistentVolumeBlock
	class := "replicated"
	dv := &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: promTenant, Name: name, Annotations: map[string]string{cluster.AnnPool: pool}},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: url}},
			Storage: &cdiv1.StorageSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &block,
				StorageClassName: &class,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}}},
		},
	}
	if _, err := c.CreateDataVolume(ctx, dv); err != nil {
		t.Fatal(err)
	}
}

// waitPVCVerdict waits for the verdict annotation on a worker disk's PVC.
func waitPVCVerdict(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name, want string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Failed(); err != nil {
			return false, err
		}
		if rec := pvcRecord(ctx, c, ns, name); rec != nil {
			last = rec.Verdict
		}
		return last == want, nil
	})
	if err != nil {
		t.Fatalf("%s/%s: verdict %q, want %q: %v", ns, name, last, want, err)
	}
}

// prometheus is a Prometheus server the test started, and its HTTP API.
type prometheus struct {
	url string
	hc  *http.Client
}

// startPrometheus runs /usr/bin/prometheus as a component of the cluster
// (in the test's network namespace, data under the state directory, killed
// at teardown) with a scrape job shaped like the one prometheus-operator
// derives from deploy/monitoring's ServiceMonitor, and the rule file rules
// (chartRuleFile: the shipped rules).
func startPrometheus(t *testing.T, ctx context.Context, c *cluster.Cluster, rules string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus (Debian: apt-get install -y prometheus; make tools installs it): %v", err)
	}
	dir := filepath.Join(c.Dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, scrapeConfig(t, c, rules), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	err = c.StartComponent("prometheus", bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	if err != nil {
		t.Fatal(err)
	}
	p := &prometheus{url: "http://" + addr, hc: &http.Client{Timeout: 10 * time.Second}}
	waitHTTPReady(t, ctx, c, "prometheus", p, "/-/ready")
	return p
}

// scrapeConfig is the scrape job prometheus-operator would generate from
// the shipped Service and ServiceMonitor (job = the Service's name, the
// endpoint's path and honorLabels, the target labels it adds), pointed at
// the sidecar's --http-endpoint, plus the rule file rules.
func scrapeConfig(t *testing.T, c *cluster.Cluster, rules string) []byte {
	t.Helper()
	var svc struct {
		Metadata struct{ Name string }
		Spec     struct{ Ports []struct{ Name string } }
	}
	var sm struct {
		Spec struct {
			Endpoints []struct {
				Port, Path  string
				HonorLabels bool `json:"honorLabels"`
			}
		}
	}
	chartObject(t, "Service", &svc)
	chartObject(t, "ServiceMonitor", &sm)
	if len(sm.Spec.Endpoints) != 1 || len(svc.Spec.Ports) != 1 {
		t.Fatalf("want one ServiceMonitor endpoint and one Service port, got %d and %d", len(sm.Spec.Endpoints), len(svc.Spec.Ports))
	}
	ep := sm.Spec.Endpoints[0]
	cfg := map[string]any{
		"global":     map[string]any{"scrape_interval": promScrape.String(), "evaluation_interval": promScrape.String()},
		"rule_files": []string{rules},
		"scrape_configs": []any{map[string]any{
			"job_name":     svc.Metadata.Name,
			"metrics_path": ep.Path,
			"honor_labels": ep.HonorLabels,
			"static_configs": []any{map[string]any{
				"targets": []string{c.SidecarMetrics},
				"labels": map[string]string{
					"namespace": cluster.NamespaceCSI, "service": svc.Metadata.Name, "endpoint": ep.Port,
					"pod": "linstor-csi-controller-0", "container": "csi-clone-sidecar",
				},
			}},
		}},
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// promResponse is the envelope of Prometheus's HTTP API.
type promResponse struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

func (p *prometheus) get(path string, q url.Values) (json.RawMessage, error) {
	resp, err := p.hc.Get(p.url + path + "?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r promResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", path, r.Error)
	}
	return r.Data, nil
}

// series are the values of every series a query returned.
func (p *prometheus) series(instant bool, expr string, start, end time.Time) ([][]float64, error) {
	q := url.Values{"query": {expr}}
	path := "/api/v1/query"
	if instant {
		q.Set("time", unix(end))
	} else {
		path = "/api/v1/query_range"
		q.Set("start", unix(start))
		q.Set("end", unix(end))
		q.Set("step", promStep.String())
	}
	raw, err := p.get(path, q)
	if err != nil {
		return nil, err
	}
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Value  [2]any   `json:"value"`
			Values [][2]any `json:"values"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, err
	}
	var out [][]float64
	for _, r := range data.Result {
		var vals []float64
		for _, v := range append(r.Values, r.Value) {
			if s, ok := v[1].(string); ok {
				f, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return nil, err
				}
				vals = append(vals, f)
			}
		}
		out = append(out, vals)
	}
	return out, nil
}

// hasData fails unless the query returns at least one sample that is a
// number: Grafana draws nothing for NaN.
func (p *prometheus) hasData(instant bool, expr string, start, end time.Time) error {
	series, err := p.series(instant, expr, start, end)
	if err != nil {
		return err
	}
	for _, vals := range series {
		if slices.ContainsFunc(vals, func(f float64) bool { return !math.IsNaN(f) }) {
			return nil
		}
	}
	if len(series) > 0 {
		return fmt.Errorf("no data: %d series, every sample NaN", len(series))
	}
	return fmt.Errorf("no data: no series")
}

// waitFor waits until an instant query's first sample equals want.
func (p *prometheus) waitFor(t *testing.T, ctx context.Context, expr string, want float64) {
	t.Helper()
	var last [][]float64
	err := wait.PollUntilContextTimeout(ctx, promScrape, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		last, err = p.series(true, expr, time.Now(), time.Now())
		return err == nil && len(last) == 1 && len(last[0]) == 1 && last[0][0] == want, nil
	})
	if err != nil {
		t.Fatalf("Prometheus: %s never %v (last %v): %v", expr, want, last, err)
	}
}

// labelValues answers a Grafana label_values() variable query.
func (p *prometheus) labelValues(label, selector string, start, end time.Time) ([]string, error) {
	q := url.Values{"start": {unix(start)}, "end": {unix(end)}}
	if selector != "" {
		q.Set("match[]", selector)
	}
	raw, err := p.get("/api/v1/label/"+label+"/values", q)
	if err != nil {
		return nil, err
	}
	var vals []string
	return vals, json.Unmarshal(raw, &vals)
}

// checkAlerts: the shipped rules are healthy on real scrapes, and the
// alerts firing are exactly want. The rules are evaluated every scrape
// interval, on data that reaches the evaluator a moment after the test's
// own queries see it: the firing set may take a few evaluations to settle.
func (p *prometheus) checkAlerts(t *testing.T, ctx context.Context, want []string) {
	t.Helper()
	var firing, unhealthy []string
	err := wait.PollUntilContextTimeout(ctx, promScrape, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		firing, unhealthy, err = p.alertsFiring()
		return err == nil && len(unhealthy) == 0 && slices.Equal(firing, want), err
	})
	for _, u := range unhealthy {
		t.Error(u)
	}
	if !slices.Equal(firing, want) {
		t.Errorf("alerts firing: %v, want %v (%v)", firing, want, err)
	} else if err != nil {
		t.Error(err)
	}
}

// ruleGroup is a rule group as /api/v1/rules shows it, with each rule's
// health and state (inactive, pending, firing).
type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Name, Health, State, LastError string
		Alerts                         []struct{ State string } `json:"alerts"`
	} `json:"rules"`
}

// ruleGroups reads /api/v1/rules; no group at all is an error.
func (p *prometheus) ruleGroups() ([]ruleGroup, error) {
	raw, err := p.get("/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	var data struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, err
	}
	if len(data.Groups) == 0 {
		return nil, fmt.Errorf("%s loaded no rule group from deploy/monitoring/rules.yaml", p.url)
	}
	return data.Groups, nil
}

// alertsFiring reads the rules' state from /api/v1/rules: the alerts
// firing, sorted, and a line per unhealthy rule.
func (p *prometheus) alertsFiring() (firing, unhealthy []string, err error) {
	groups, err := p.ruleGroups()
	if err != nil {
		return nil, nil, err
	}
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Health != "ok" {
				unhealthy = append(unhealthy, fmt.Sprintf("rule %s/%s: health %q: %s", g.Name, r.Name, r.Health, r.LastError))
			}
			if r.State == "firing" {
				firing = append(firing, r.Name)
			}
		}
	}
	sort.Strings(firing)
	return firing, unhealthy, nil
}

// rateInterval is Grafana's $__rate_interval for this Prometheus and step.
func rateInterval() time.Duration { return max(promStep+promScrape, 4*promScrape) }

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

// grafanaDashboard is what the test reads of deploy/monitoring/dashboard.json.
type grafanaDashboard struct {
	Templating struct {
		List []grafanaVariable `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []grafanaTarget
	} `json:"panels"`
}

type grafanaVariable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Query      any    `json:"query"` // a string, or {"query": "..."}
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
}

type grafanaTarget struct {
	RefID   string `json:"refId"`
	Expr    string `json:"expr"`
	Instant bool   `json:"instant"`
	Format  string `json:"format"`
}

// instant: a table or instant target is one query at "now", the others a
// range over the dashboard's time range.
func (g grafanaTarget) instant() bool { return g.Instant || g.Format == "table" }

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardRel)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardRel, err)
	}
	if len(d.Panels) == 0 {
		t.Fatalf("%s has no panels", dashboardRel)
	}
	return d
}

var labelValuesRE = regexp.MustCompile(`^label_values\((?:(.*),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// resolveVariables answers each query variable's own query, in order, and
// picks its value as a viewer would: "All" where the variable offers it,
// else (and for choice "first") the first value offered. A variable whose
// query offers nothing fails the test: the dashboard would be empty.
func (d grafanaDashboard) resolveVariables(t *testing.T, p *prometheus, choice string, start, end time.Time) map[string]string {
	t.Helper()
	vals := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		m := labelValuesRE.FindStringSubmatch(strings.TrimSpace(q))
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(...)", v.Name, q)
		}
		offered, err := p.labelValues(m[2], substitute(m[1], vals, end.Sub(start)), start, end)
		if err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		if len(offered) == 0 {
			t.Errorf("variable %s: %s offers no value", v.Name, q)
			vals[v.Name] = "^$"
			continue
		}
		sort.Strings(offered)
		vals[v.Name] = regexEscape(offered[0])
		if v.IncludeAll && choice == "All" {
			vals[v.Name] = cmpOr(v.AllValue, "("+strings.Join(quoteAll(offered), "|")+")")
		}
	}
	return vals
}

func quoteAll(vals []string) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = regexEscape(v)
	}
	return out
}

// regexEscape escapes a value for a =~ matcher inside a PromQL string, as
// Grafana does: regex metacharacters get a backslash, written doubled.
func regexEscape(v string) string {
	return strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// substitute replaces dashboard and Grafana built-in variables as Grafana
// would for a range of span shown with step promStep: $__rate_interval is
// max($__interval + scrape interval, 4 x scrape interval).
func substitute(expr string, vals map[string]string, span time.Duration) string {
	rate := rateInterval()
	pairs := []string{
		"$__rate_interval", rate.String(), "${__rate_interval}", rate.String(),
		"$__interval", promStep.String(), "${__interval}", promStep.String(),
		"$__range", fmt.Sprintf("%ds", int(span.Seconds())), "${__range}", fmt.Sprintf("%ds", int(span.Seconds())),
	}
	names := make([]string, 0, len(vals))
	for n := range vals {
		names = append(names, n)
	}
	// Longest first: $version must not eat the start of $version_x.
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, n := range names {
		pairs = append(pairs, "${"+n+"}", vals[n], "$"+n, vals[n])
	}
	return strings.NewReplacer(pairs...).Replace(expr)
}
