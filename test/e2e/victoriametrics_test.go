package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// Cozystack evaluates the shipped rules with vmalert and answers the
// dashboard from VictoriaMetrics. TestDashboardPanelsHaveDataInPrometheus
// runs both beside Prometheus on the same stack: VictoriaMetrics
// single-node scrapes the sidecar with the very job Prometheus uses and
// answers the dashboard's queries through its Prometheus-compatible API;
// vmalert evaluates deploy/monitoring/rules.yaml against it. Both are the
// pinned releases `make tools` builds.

// victoriaMetrics is VictoriaMetrics single-node (its query API: the same
// calls as Prometheus's) and vmalert (its /api/v1/rules: the same shape as
// Prometheus's).
type victoriaMetrics struct {
	query  *prometheus
	alerts *prometheus
}

// startVictoriaMetrics runs VictoriaMetrics single-node and vmalert as
// components of the cluster, data under the state directory; vmalert
// evaluates the rule file rules.
func startVictoriaMetrics(t *testing.T, ctx context.Context, c *cluster.Cluster, rules string) *victoriaMetrics {
	t.Helper()
	vmBin, err := tools.Bin("victoria-metrics")
	if err != nil {
		t.Fatal(err)
	}
	alertBin, err := tools.Bin("vmalert")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.Dir, "victoriametrics")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	scrape := vmScrapeConfig(t, c, rules)
	cfg := filepath.Join(dir, "scrape.yml")
	if err := os.WriteFile(cfg, scrape, 0o644); err != nil {
		t.Fatal(err)
	}
	vmAddr := freeLoopbackAddr(t)
	vm := &prometheus{url: "http://" + vmAddr, hc: &http.Client{Timeout: 10 * time.Second}}
	err = c.StartComponent("victoria-metrics", vmBin,
		"-storageDataPath="+filepath.Join(dir, "data"), "-httpListenAddr="+vmAddr,
		"-promscrape.config="+cfg, "-loggerLevel=WARN",
		// Points are visible as soon as they are stored (default 30s
		// later), and no query is answered from a cache, as with Prometheus.
		"-search.latencyOffset=0s", "-search.disableCache")
	if err != nil {
		t.Fatal(err)
	}
	waitHTTPReady(t, ctx, c, "victoria-metrics", vm, "/health")
	alertAddr := freeLoopbackAddr(t)
	alerts := &prometheus{url: "http://" + alertAddr, hc: vm.hc}
	err = c.StartComponent("vmalert", alertBin,
		"-rule="+rules, "-datasource.url="+vm.url, "-httpListenAddr="+alertAddr,
		"-evaluationInterval="+promScrape.String(), "-loggerLevel=WARN",
		// Evaluate at "now" (default 30s earlier, to wait for late data),
		// as Prometheus does; no Alertmanager here.
		"-rule.evalDelay=0s", "-notifier.blackhole")
	if err != nil {
		t.Fatal(err)
	}
	waitHTTPReady(t, ctx, c, "vmalert", alerts, "/health")
	return &victoriaMetrics{query: vm, alerts: alerts}
}

// vmScrapeConfig is Prometheus's configuration less what only Prometheus
// reads (its rule files and evaluation interval, which vmalert takes as
// flags): VictoriaMetrics' scraper refuses unknown fields.
func vmScrapeConfig(t *testing.T, c *cluster.Cluster, rules string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(scrapeConfig(t, c, rules), &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "rule_files")
	if global, ok := cfg["global"].(map[string]any); ok {
		delete(global, "evaluation_interval")
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// freeLoopbackAddr is a 127.0.0.1 port free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	addr, err := cluster.FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// waitHTTPReady waits until a component answers 200 on path.
func waitHTTPReady(t *testing.T, ctx context.Context, c *cluster.Cluster, name string, p *prometheus, path string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Failed(); err != nil {
			return false, err
		}
		resp, err := p.hc.Get(p.url + path)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s not ready: %v (log in %s)", name, err, filepath.Join(c.Dir, "logs", name+".log"))
	}
}
