package deploy_test

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// Cozystack's linstor chart with deploy/cozystack/linstor.patch: on by
// default, the operator's pod is the one rendered from the unchanged chart
// plus the sidecar (image override, driver command and args and every other
// operator-rendered field unchanged; the three sidecars on the relay) and the
// release carries the sidecar's objects with VictoriaMetrics kinds; with the
// toggle turned off, the LinstorCluster is the unchanged chart's, byte for byte, and
// nothing else is rendered.
func TestCozystackLinstorChartChange(t *testing.T) {
	changed := cozystackLinstor(t)
	original, _ := renderLinstor(t, cozystackFixture)
	off, offObjs := renderLinstor(t, changed, "csiCloneSidecar.enabled=false")
	if canonical(t, off) != canonical(t, original) || len(offObjs) != 1 {
		t.Errorf("toggle off: the release renders %d objects, LinstorCluster\n%s\nwant only\n%s", len(offObjs), canonical(t, off), canonical(t, original))
	}
	on, onObjs := renderLinstor(t, changed) // the patch turns it on
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

// upstreamBlobs are the git blob ids, at Cozystack v1.6.2 (commit
// bfde94fd26d35c5f0281a1285f194e7ca3041b6a), of the files of
// packages/system/linstor that deploy/cozystack/linstor.patch changes.
var upstreamBlobs = map[string]string{
	"Chart.yaml":             "67e5fa7a5d2d597a19fcd84bd110114ba3f6d762",
	"values.yaml":            "ee9884e2b920d7aae2e0490cf2e580fa116096b4",
	"templates/cluster.yaml": "4e94c80f9116a8eb3a7eb7c85b7848192878b168",
}

// The files the patch is tested against are Cozystack v1.6.2's, byte for
// byte (so the patch applies to a fork of that release), and the patch names
// that release.
func TestCozystackPatchIsAgainstThePinnedRelease(t *testing.T) {
	for file, want := range upstreamBlobs {
		raw, err := os.ReadFile(filepath.Join(cozystackFixture, file))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(append([]byte(fmt.Sprintf("blob %d\x00", len(raw))), raw...))
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s/%s has git blob %s, want Cozystack v1.6.2's %s", cozystackFixture, file, got, want)
		}
	}
	patch, err := os.ReadFile(repoFile(cozychart.PatchFile))
	if err != nil {
		t.Fatal(err)
	}
	for file, blob := range upstreamBlobs {
		if !strings.Contains(string(patch), "\nindex "+blob[:7]+"..") || !strings.Contains(string(patch), "a/"+cozychart.Package+"/"+file) {
			t.Errorf("%s does not change %s from blob %s", cozychart.PatchFile, file, blob[:7])
		}
	}
	for _, want := range []string{"Cozystack v1.6.2", "  enabled: true\n", "repository: ghcr.io/cozystack/csi-clone-sidecar\n"} {
		if !strings.Contains(string(patch), want) {
			t.Errorf("%s lacks %q", cozychart.PatchFile, want)
		}
	}
}
