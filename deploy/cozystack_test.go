package deploy_test

import (
	"testing"

	"github.com/cozystack/csi-clone-sidecar/test/cozychart"
)

const cozystackFixture = "testdata/cozystack-linstor"

// cozystackLinstor builds the stand-in of Cozystack's linstor package with
// the change of docs/cozystack.md (test/cozychart) and returns its path.
func cozystackLinstor(t *testing.T) string {
	t.Helper()
	chart, err := cozychart.Build(repoFile(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return chart
}

// linstorCluster renders a linstor chart and returns its LinstorCluster and
// every object it renders.
func renderLinstor(t *testing.T, chart string, set ...string) (map[string]any, []map[string]any) {
	t.Helper()
	return renderLinstorWith(t, chart, cozychart.APIVersionFlags(), set...)
}

// renderLinstorWith is renderLinstor with other helm flags than those of a
// cluster serving every operator kind.
func renderLinstorWith(t *testing.T, chart string, flags []string, set ...string) (map[string]any, []map[string]any) {
	t.Helper()
	out, err := helmTemplateWith(t, chart, "cozy-linstor", flags, set...)
	if err != nil {
		t.Fatalf("helm template %s %v: %v\n%s", chart, set, err, out)
	}
	objs := splitDocs(t, out)
	return object(t, objs, "LinstorCluster", "linstorcluster"), objs
}

// Cozystack's linstor chart with the change of docs/cozystack.md: with the
// toggle on, the operator's pod is the one rendered from the unchanged chart
// plus the sidecar (image override, driver command and args and every other
// operator-rendered field unchanged; the three sidecars on the relay) and the
// release carries the sidecar's objects with VictoriaMetrics kinds; with the
// toggle off, the LinstorCluster is the unchanged chart's, byte for byte, and
// nothing else is rendered.
func TestCozystackLinstorChartChange(t *testing.T) {
	changed := cozystackLinstor(t)
	original, _ := renderLinstor(t, cozystackFixture)
	off, offObjs := renderLinstor(t, changed)
	if canonical(t, off) != canonical(t, original) || len(offObjs) != 1 {
		t.Errorf("toggle off: the release renders %d objects, LinstorCluster\n%s\nwant only\n%s", len(offObjs), canonical(t, off), canonical(t, original))
	}
	on, onObjs := renderLinstor(t, changed, "csiCloneSidecar.enabled=true")
	pods := operatorPods(t, original, on)
	checkPods(t, pods[0], pods[1])
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "VMServiceScrape", "VMRule", "ConfigMap", "GrafanaDashboard"} {
		object(t, onObjs, kind, "")
	}
	// The containers it adds are deploy/linstor/podtemplate.yaml's, the
	// file the non-Helm path adds.
	want := get(readYAML(t, linstorPodTemplateFile), "spec", "containers").([]any)
	got := get(on, "spec", "csiController", "podTemplate", "spec", "containers").([]any)
	if canonical(t, got[len(got)-len(want):]) != canonical(t, want) {
		t.Errorf("the chart change adds other containers than %s", linstorPodTemplateFile)
	}
}
