package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// Where the manifests and the upstream CRDs they target live, relative to
// this package's directory (go test runs in it).
const (
	deployDir = "../../deploy"
	// The LinstorCluster and GrafanaDashboard CRDs as published upstream,
	// kept as test data (see its README).
	sharedCRDs = "testdata/crds"
)

// deployCRDs are the CRDs of the operators deploy/ targets.
func deployCRDs(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, f := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		p, err := tools.CRDFile("prometheus", f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	for _, f := range []string{"piraeus.io_linstorclusters.yaml", "grafana.integreatly.org_grafanadashboards.yaml"} {
		p := filepath.Join(sharedCRDs, f)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("upstream CRD %s: %v", f, err)
		}
		files = append(files, p)
	}
	return files
}

// kubectl runs kubectl against the cluster with a private discovery cache
// (CRDs installed a moment ago must be seen) and returns its output.
func kubectl(t *testing.T, c *cluster.Cluster, cache string, args ...string) (string, error) {
	t.Helper()
	bin, err := tools.Bin("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", c.Kubeconfig, "--cache-dir", cache}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// mustKubectl returns kubectl against the cluster that fails the test on a
// non-zero exit and otherwise returns the output.
func mustKubectl(t *testing.T, c *cluster.Cluster, cache string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		out, err := kubectl(t, c, cache, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
}

// TestDeployManifestsServerSideDryRun applies every manifest of deploy/ with
// a server-side dry run and strict field validation, the way docs/install.md
// applies them, against a real kube-apiserver with the operators' CRDs
// installed: schema errors, unknown fields, invalid names and CEL rule
// violations all fail here.
func TestDeployManifestsServerSideDryRun(t *testing.T) {
	c := cluster.Start(t, cluster.Options{ControlPlaneOnly: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cache := t.TempDir()
	run := mustKubectl(t, c, cache)

	for _, crd := range deployCRDs(t) {
		run("apply", "--server-side", "-f", crd)
	}
	run("wait", "--for=condition=Established", "--timeout=60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com",
		"crd/linstorclusters.piraeus.io", "crd/grafanadashboards.grafana.integreatly.org")
	// The namespaces the manifests name (the CSI controller's, for
	// LINSTOR and for the generic example), for real: a dry run into a
	// missing namespace is refused. The harness makes cozy-linstor itself.
	for _, ns := range []string{cluster.NamespaceCSI, "csi-system"} {
		if err := c.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}

	dryRun := []string{"--dry-run=server", "--validate=strict"}
	for _, dir := range kustomizations(t) {
		out := run(append([]string{"apply", "--server-side", "-k", dir}, dryRun...)...)
		t.Logf("%s:\n%s", dir, out)
	}
	// The chart, for each values of the matrix (deploy/chart_test.go renders
	// the same); the custom namespace is made for real too.
	if err := c.CreateNamespace(ctx, "piraeus-datastore"); err != nil {
		t.Fatal(err)
	}
	for name, m := range chartMatrix {
		file, skipped := renderedChart(t, m.namespace, m.set...)
		out := run(append([]string{"apply", "--server-side", "-f", file}, dryRun...)...)
		t.Logf("chart, %s:\n%s", name, out)
		if len(skipped) > 0 {
			t.Logf("chart, %s: not dry-run (no CRD here; deploy/chart_test.go checks their spec equals the prometheus-operator kinds'): %v", name, skipped)
		}
	}

	// Dry runs persist nothing: no role.
	if out, err := kubectl(t, c, cache, "get", "clusterrole", "csi-clone-sidecar"); err == nil {
		t.Errorf("a dry run created the ClusterRole:\n%s", out)
	}

	// The check can fail: a misspelt field in a ServiceMonitor is refused.
	bad := writeTemp(t, "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: typo\n  namespace: cozy-linstor\n"+
		"spec:\n  selector: {}\n  endpoints:\n    - port: clone-metrics\n      honourLabels: true\n")
	if out, err := kubectl(t, c, cache, append([]string{"apply", "--server-side", "-f", bad}, dryRun...)...); err == nil {
		t.Errorf("a ServiceMonitor with an unknown field passed the dry run:\n%s", out)
	}
}

// applied are deploy/'s kustomizations the dry run applies; params is a
// resource of generic and generic/monitoring, sidecar a component.
var applied = []string{"rbac", "monitoring", "generic", "generic/monitoring", "admission/warn", "admission/deny"}

// kustomizations returns the applied directories, failing if deploy/ holds
// a kustomization this test does not know about: a new manifest must not
// escape the dry run.
func kustomizations(t *testing.T) []string {
	t.Helper()
	known := append([]string{"generic/params", "generic/sidecar"}, applied...)
	err := filepath.WalkDir(deployDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "kustomization.yaml" {
			return err
		}
		rel, _ := filepath.Rel(deployDir, filepath.Dir(path))
		if !slices.Contains(known, rel) {
			t.Errorf("deploy/%s is a kustomization this dry run does not apply; add it to applied", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, d := range applied {
		dirs = append(dirs, filepath.Join(deployDir, d))
	}
	return dirs
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// chartMatrix are the values deploy/chart/csi-clone-sidecar is dry-run with.
var chartMatrix = map[string]struct {
	namespace string
	set       []string
}{
	"defaults":         {cluster.NamespaceCSI, nil},
	"victoria-metrics": {cluster.NamespaceCSI, []string{"monitoring.kind=victoria-metrics"}},
	"no monitoring":    {cluster.NamespaceCSI, []string{"monitoring.kind=none", "dashboard.enabled=false"}},
	"custom namespace": {"piraeus-datastore", []string{"csiController.serviceAccount=my-csi-controller"}},
	"admission guard":  {cluster.NamespaceCSI, []string{"admissionGuard.enabled=true"}},
	"admission guard, deny, custom namespace": {"piraeus-datastore",
		[]string{"admissionGuard.enabled=true", "admissionGuard.validationActions={Deny}", "monitoring.kind=none", "dashboard.enabled=false"}},
}

// renderedChart renders the chart into a file for kubectl, leaving out the
// VictoriaMetrics kinds, whose CRDs are not available here; it returns the
// file and the kinds left out.
func renderedChart(t *testing.T, namespace string, set ...string) (string, []string) {
	t.Helper()
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	objs, err := cluster.RenderChart(namespace, args...)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var skipped []string
	for _, o := range objs {
		if o.GetAPIVersion() == "operator.victoriametrics.com/v1beta1" {
			skipped = append(skipped, o.GetKind())
			continue
		}
		raw, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(raw)
		b.WriteString("\n")
	}
	return writeTemp(t, b.String()), skipped
}
