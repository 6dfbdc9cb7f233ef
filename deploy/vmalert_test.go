package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// series is one time series of a data set: its labels in Prometheus' text
// form and whether it has a sample at minute m of the data set.
type series struct {
	name string
	at   func(m int) bool
}

func always(int) bool { return true }

// dataSet is what one vmselect holds: minutes of samples, one a minute.
type dataSet struct {
	minutes int
	series  []series
}

// A Cozystack tenant's own metrics: its vmagent, kube-state-metrics and
// kubelets of its Kubernetes (no LINSTOR, no sidecar), the data set every
// tenant's vmalert evaluates every VMRule of the cluster on.
var tenantMetrics = dataSet{minutes: 120, series: []series{
	{`up{job="vmagent",instance="10.244.3.7:8429",namespace="tenant-foo"}`, always},
	{`up{job="kube-state-metrics",instance="10.244.3.9:8080",namespace="tenant-foo"}`, always},
	{`up{job="kubelet",instance="10.244.3.10:10250",node="tenant-foo-md0-x7k2p"}`, always},
	{`kube_pod_status_ready{namespace="tenant-foo",pod="vm-instance-a-0",condition="true"}`, always},
}}

// The platform's metrics (tenant-root's vmselect): LINSTOR's controller
// scraped by Cozystack's VMPodScrape (job relabelled linstor-controller),
// the sidecar present for sidecarUntil minutes.
func platformMetrics(sidecarUntil int) dataSet {
	return dataSet{minutes: 120, series: []series{
		{`up{job="linstor-controller",instance="10.244.0.11:3370",tier="cluster",controller_node="node1"}`, always},
		{`up{job="csi-clone-sidecar",instance="10.244.0.23:9809",namespace="cozy-linstor",pod="linstor-csi-controller-7c9f8d6b5-2xkqp",service="csi-clone-sidecar"}`,
			func(m int) bool { return m < sidecarUntil }},
		{`csi_clone_tap_connections_total{namespace="cozy-linstor",pod="linstor-csi-controller-7c9f8d6b5-2xkqp"}`,
			func(m int) bool { return m < sidecarUntil }},
	}}
}

// The shipped rules as Cozystack's vmalert evaluates them (the pinned
// vmalert, in replay mode over two hours of data in the pinned
// VictoriaMetrics): on a tenant's metrics no rule of the chart fires or is
// even pending; on the platform's, the absence alert fires once the sidecar
// has been gone for its `for` (15 minutes), and not while it is there.
func TestVMAlertRulesQuietInTenants(t *testing.T) {
	t.Run("tenant", func(t *testing.T) {
		if alerts := replayRules(t, tenantMetrics); len(alerts) > 0 {
			t.Errorf("on a tenant's metrics the rules raise %v", alerts)
		}
	})
	t.Run("platform, sidecar there", func(t *testing.T) {
		if alerts := replayRules(t, platformMetrics(1000)); len(alerts) > 0 {
			t.Errorf("with the sidecar scraped the rules raise %v", alerts)
		}
	})
	t.Run("platform, sidecar gone", func(t *testing.T) {
		const gone = 60
		alerts := replayRules(t, platformMetrics(gone))
		first, ok := alerts["CSICloneSidecarAbsent/firing"]
		if !ok {
			t.Fatalf("the sidecar gone at minute %d: no CSICloneSidecarAbsent firing; got %v", gone, alerts)
		}
		// Absent once its last sample is out of the 5-minute lookback, then
		// pending for 15 minutes.
		if first < gone+15 {
			t.Errorf("CSICloneSidecarAbsent fires at minute %d, before the sidecar was gone for 15 minutes (minute %d)", first, gone)
		}
		for k := range alerts {
			if !strings.HasPrefix(k, "CSICloneSidecarAbsent/") {
				t.Errorf("also raised: %s", k)
			}
		}
	})
}

// replayRules loads data into a fresh VictoriaMetrics, has vmalert replay
// deploy/monitoring/rules.yaml over it, and returns for each
// "alertname/alertstate" the first minute of the data set it was written.
func replayRules(t *testing.T, data dataSet) map[string]int {
	t.Helper()
	vm := startVM(t)
	start := time.Now().Add(-time.Duration(data.minutes+10) * time.Minute).Truncate(time.Minute)
	var b strings.Builder
	for _, s := range data.series {
		for m := 0; m < data.minutes; m++ {
			if s.at(m) {
				fmt.Fprintf(&b, "%s 1 %d\n", s.name, start.Add(time.Duration(m)*time.Minute).UnixMilli())
			}
		}
	}
	vm.post(t, "/api/v1/import/prometheus", b.String())
	vm.get(t, "/internal/force_flush")
	bin, err := tools.Bin("vmalert")
	if err != nil {
		t.Fatal(err)
	}
	end := start.Add(time.Duration(data.minutes) * time.Minute)
	out, err := exec.Command(bin, "-rule="+rulesFile, "-datasource.url="+vm.url, "-remoteWrite.url="+vm.url,
		"-evaluationInterval=1m", "-replay.timeFrom="+start.Format(time.RFC3339), "-replay.timeTo="+end.Format(time.RFC3339),
		"-replay.rulesDelay=0s", "-loggerLevel=WARN").CombinedOutput()
	if err != nil {
		t.Fatalf("vmalert replay: %v\n%s", err, out)
	}
	vm.get(t, "/internal/force_flush")
	export := vm.get(t, "/api/v1/export?match[]=ALERTS")
	got := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(export))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Metric     map[string]string `json:"metric"`
			Timestamps []int64           `json:"timestamps"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		k := line.Metric["alertname"] + "/" + line.Metric["alertstate"]
		for _, ts := range line.Timestamps {
			m := int(time.UnixMilli(ts).Sub(start) / time.Minute)
			if first, ok := got[k]; !ok || m < first {
				got[k] = m
			}
		}
	}
	return got
}

// victoriaMetricsServer is the pinned VictoriaMetrics single-node on a
// loopback port, data in a temporary directory.
type victoriaMetricsServer struct{ url string }

func startVM(t *testing.T) victoriaMetricsServer {
	t.Helper()
	bin, err := tools.Bin("victoria-metrics")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "-storageDataPath="+filepath.Join(dir, "data"), "-httpListenAddr="+addr,
		"-loggerLevel=WARN", "-search.latencyOffset=0s", "-search.disableCache", "-retentionPeriod=1y")
	logf, err := os.Create(filepath.Join(dir, "victoria-metrics.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	})
	vm := victoriaMetricsServer{url: "http://" + addr}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(vm.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return vm
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("victoria-metrics not ready: %v (log %s)", err, logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (vm victoriaMetricsServer) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get(vm.url + path)
	return vm.body(t, path, resp, err)
}

func (vm victoriaMetricsServer) post(t *testing.T, path, body string) {
	t.Helper()
	resp, err := http.Post(vm.url+path, "text/plain", strings.NewReader(body))
	vm.body(t, path, resp, err)
}

func (vm victoriaMetricsServer) body(t *testing.T, path string, resp *http.Response, err error) string {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s: %s\n%s", path, resp.Status, b.String())
	}
	return b.String()
}
