package cloner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/test/headless"
)

func reportWorld() (*clonertest.World, string) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	w.Golden("0ld", "v1.12.0") // nothing clones it any more
	ok := w.Worker("tenant-a", "md0-0", "kubernetes-md0", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	w.Cloned(ok, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 20*clonertest.Gi))
	copied := w.Worker("tenant-a", "md1-0", "kubernetes-md1", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	pvc, _ := w.Cloned(copied, clonertest.TestClass, "copy", 20*clonertest.Gi, clonertest.TapClone("", 20*clonertest.Gi, 20*clonertest.Gi))
	pvc.Annotations[fleet.AnnCDIFallbackReason] = "different volume modes"
	web := w.DataVolume("tenant-b", "http-0", 20*clonertest.Gi, nil)
	web.Annotations[fleet.AnnPool] = "kubernetes-http"
	secretURL := "https://user:hunter2@factory.example/image/" + clonertest.TestSID + "/" + clonertest.TestVer + "/openstack-amd64.raw.xz"
	web.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: secretURL, SecretRef: "factory-creds"}}
	clonertest.Succeed(web, clonertest.T0)
	w.Claim(web, clonertest.TestClass, 20*clonertest.Gi, 20*clonertest.Gi, "vol-http-0")
	return &w, "hunter2"
}

// reportOf runs one verdict pass over reportWorld (after setup, if any, on
// its cluster), then `report` with cfg in format; it returns the output, the
// credential the world hides and the cluster.
func reportOf(t *testing.T, cfg config.Config, format string, setup ...func(*fakeCluster)) (string, string, *fakeCluster) {
	t.Helper()
	w, secret := reportWorld()
	fc := newFakeCluster(t, w)
	for _, s := range setup {
		s(fc)
	}
	ctx := t.Context()
	if err := fc.controller(t, ctx, clonertest.ConfigAt(clonertest.T0.Add(time.Hour))).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := report.Report(ctx, fc.clients(), cfg, &out, format); err != nil {
		t.Fatal(err)
	}
	return out.String(), secret, fc
}

func TestReportJSONMatchesTheCluster(t *testing.T) {
	// No ledger namespace: the report finds the ledger by its label.
	out, secret, _ := reportOf(t, config.DefaultConfig(), "json")
	if strings.Contains(out, secret) {
		t.Fatal("the report printed a credential from a DataVolume URL")
	}
	var d report.ReportData
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.Ledger != "cozy-linstor/"+config.DefaultLedgerName || len(d.Flavors) != 2 {
		t.Fatalf("ledger %q, %d flavors", d.Ledger, len(d.Flavors))
	}
	old, cur := d.Flavors[0], d.Flavors[1] // sorted by key: "0ld/..." first
	if !old.Goldens[0].SafeToDelete || old.Consumers != 0 || old.GoldenImports != 1 {
		t.Fatalf("unused flavor %+v", old)
	}
	if cur.Goldens[0].SafeToDelete || cur.Consumers != 2 || cur.FetchesAvoided != 2 || cur.WorkerImports != 1 ||
		cur.BytesAvoided != 12*clonertest.Gi || cur.Goldens[0].StorageClass != clonertest.TestClass || cur.Goldens[0].Phase != "Succeeded" {
		t.Fatalf("flavor %+v", cur)
	}
	pools := map[string]map[string]int{}
	for _, p := range d.Pools {
		pools[p.Pool] = p.Verdicts
	}
	if pools["kubernetes-md0"][record.VerdictCSIClone] != 1 || pools["kubernetes-md1"][record.VerdictHostAssisted] != 1 || pools["kubernetes-http"][record.VerdictHTTPImport] != 1 {
		t.Fatalf("pools %v", pools)
	}
	if len(d.BadDisks) != 1 || d.BadDisks[0].Name != "md1-0" || d.BadDisks[0].Reasons[0].Reason != record.ReasonHostAssisted ||
		!strings.Contains(d.BadDisks[0].Reasons[0].Message, "different volume modes") || d.BadDisks[0].Reasons[0].Fix == "" {
		t.Fatalf("bad disks %+v", d.BadDisks)
	}
}

func TestReportTableNamesBadDisksFixesAndSafeDeletes(t *testing.T) {
	cfg := clonertest.TestConfig()
	out, _, fc := reportOf(t, cfg, "table")
	for _, want := range []string{"safe to delete", "tenant-a/md1-0", "host-assisted", record.Fix(record.ReasonHostAssisted),
		"csi-clone=1", "http-import=1", "12Gi"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if err := report.Report(t.Context(), fc.clients(), cfg, io.Discard, "yaml"); err == nil {
		t.Fatal("an unknown format must be refused")
	}
}

func TestReportBeforeAnyVerdictShowsUnjudged(t *testing.T) {
	w, _ := reportWorld()
	fc := newFakeCluster(t, w)
	var out bytes.Buffer
	if err := report.Report(context.Background(), fc.clients(), config.DefaultConfig(), &out, "json"); err != nil {
		t.Fatal(err)
	}
	var d report.ReportData
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Ledger != "" || d.Pools[0].Verdicts[report.VerdictUnjudged] != 1 {
		t.Fatalf("%+v", d)
	}
}

// The report's dashboard check over every case: a missing GrafanaDashboard
// is reported only where the dashboard's ConfigMap is installed and the
// cluster serves grafana.integreatly.org/v1beta1, as after a cold install
// that put the sidecar in before grafana-operator.
func TestReportChecksTheGrafanaDashboard(t *testing.T) {
	for name, tc := range map[string]struct {
		served, configMap, dashboard bool
		want                         string
	}{
		"kind not served":            {want: report.CheckOK},
		"served, no dashboard":       {served: true, want: report.CheckOK},
		"served, dashboard left out": {served: true, configMap: true, want: report.CheckMissing},
		"served, dashboard there":    {served: true, configMap: true, dashboard: true, want: report.CheckOK},
		"not served, ConfigMap only": {configMap: true, want: report.CheckOK},
	} {
		w, _ := reportWorld()
		fc := newFakeCluster(t, w)
		ctx := t.Context()
		labels := map[string]string{"app.kubernetes.io/name": "csi-clone-sidecar"}
		if tc.served {
			fc.kube.Resources = append(fc.kube.Resources, &metav1.APIResourceList{GroupVersion: "grafana.integreatly.org/v1beta1",
				APIResources: []metav1.APIResource{{Name: "grafanadashboards", Namespaced: true, Kind: "GrafanaDashboard"}}})
		}
		if tc.configMap {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "csi-clone-sidecar-dashboard", Namespace: "cozy-linstor", Labels: labels}}
			if _, err := fc.kube.CoreV1().ConfigMaps("cozy-linstor").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if tc.dashboard {
			gd := &unstructured.Unstructured{}
			gd.SetAPIVersion("grafana.integreatly.org/v1beta1")
			gd.SetKind("GrafanaDashboard")
			gd.SetName("csi-clone-sidecar-62b72ee9")
			gd.SetLabels(labels)
			if _, err := fc.dyn.Resource(report.GrafanaDashboardGVR).Namespace("cozy-linstor").Create(ctx, gd, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var out bytes.Buffer
		if err := report.Report(ctx, fc.clients(), config.DefaultConfig(), &out, "json"); err != nil {
			t.Fatal(err)
		}
		var d report.ReportData
		if err := json.Unmarshal(out.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		if len(d.Checks) != 1 || d.Checks[0].Status != tc.want {
			t.Errorf("%s: checks %+v, want the dashboard %s", name, d.Checks, tc.want)
			continue
		}
		if tc.want == report.CheckMissing && (!strings.Contains(d.Checks[0].Message, "GrafanaDashboard csi-clone-sidecar missing in cozy-linstor while the cluster serves grafana.integreatly.org/v1beta1") ||
			!strings.Contains(d.Checks[0].Fix, "flux reconcile hr linstor -n cozy-linstor --force")) {
			t.Errorf("%s: %+v; want the dashboard named and the remedy", name, d.Checks[0])
		}
		out.Reset()
		if err := report.Report(ctx, fc.clients(), config.DefaultConfig(), &out, "table"); err != nil || !strings.Contains(out.String(), "\nCHECK ") ||
			!strings.Contains(out.String(), "dashboard  "+tc.want) {
			t.Errorf("%s: table %v\n%s; want the check in a CHECK section", name, err, out.String())
		}
	}
}

// `report -o html` of reportWorld, rendered by headless Chromium at
// 1280×800: it loads with no console error or exception, asks for nothing
// but itself, and the browser lays out the numbers a reader looks for.
// The page and its screenshot land in the test's artifact directory (go
// test -artifacts -outputdir DIR keeps them).
func TestReportHTMLRendersInChromium(t *testing.T) {
	headless.RequireChromium(t)
	cfg := clonertest.TestConfig()
	// With CDI's resource and the driver's CSIDriver (servePredictionInputs)
	// the page predicts a path on the world's class too.
	page, _, fc := reportOf(t, cfg, "html", func(fc *fakeCluster) { servePredictionInputs(t, fc) })
	var js bytes.Buffer
	if err := report.Report(t.Context(), fc.clients(), cfg, &js, "json"); err != nil {
		t.Fatal(err)
	}
	var d report.ReportData
	if err := json.Unmarshal(js.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	dir := t.ArtifactDir()
	file := filepath.Join(dir, "report.html")
	if err := os.WriteFile(file, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := headless.Render(ctx, "file://"+file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.png"), r.PNG, 0o644); err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) > 0 || len(r.Requests) > 0 {
		t.Errorf("console errors or exceptions %q, requests %q; want none", r.Problems, r.Requests)
	}
	var avoided int64
	for _, f := range d.Flavors {
		avoided += f.FetchesAvoided
	}
	want := []string{fmt.Sprintf("%d\nfetches avoided", avoided), "12Gi", "csi-clone 1", "host-assisted 1", "http-import 1"}
	for _, b := range d.BadDisks {
		want = append(want, b.Namespace+"/"+b.Name, b.Reasons[0].Fix)
	}
	for _, p := range d.ClonePaths {
		want = append(want, p.Golden, "predicted "+p.Path)
	}
	if avoided != 2 || len(d.BadDisks) != 1 || len(d.ClonePaths) < 4 || len(d.SeenPaths) != 1 {
		t.Fatalf("the world changed: %d fetches avoided, %d bad disks, %d predicted paths, seen %+v; want 2, 1, 4 (2 goldens on 2 classes), one golden on one class", avoided, len(d.BadDisks), len(d.ClonePaths), d.SeenPaths)
	}
	for _, w := range want {
		if !strings.Contains(r.Text, w) {
			t.Errorf("the rendered page does not show %q", w)
		}
	}
	if t.Failed() {
		t.Logf("rendered text:\n%s", r.Text)
	}
}
