package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	cozystackDoc     = "../docs/cozystack.md"
	cozystackFixture = "testdata/cozystack-linstor"
	linstorPackage   = "packages/system/linstor"
)

var fenced = regexp.MustCompile("(?s)```(yaml|diff)\n(.*?)```")

// cozystackLinstor builds the stand-in of Cozystack's linstor package with
// the change docs/cozystack.md describes: its ```diff block applied with git
// apply, its "(append)" YAML blocks appended to the files they name, and
// this checkout's chart vendored into charts/. It returns the chart's path.
func cozystackLinstor(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	pkg := filepath.Join(root, linstorPackage)
	if err := os.CopyFS(pkg, os.DirFS(cozystackFixture)); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(cozystackDoc)
	if err != nil {
		t.Fatal(err)
	}
	var diffs, appends int
	for _, m := range fenced.FindAllStringSubmatch(string(doc), -1) {
		body := m[2]
		first, rest, _ := strings.Cut(body, "\n")
		switch target, ok := strings.CutSuffix(strings.TrimPrefix(first, "# "), " (append)"); {
		case m[1] == "diff":
			p := filepath.Join(root, "change.diff")
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := run(root, "git", "apply", "--verbose", p); err != nil {
				t.Fatalf("git apply of docs/cozystack.md's diff onto %s: %v\n%s", cozystackFixture, err, out)
			}
			diffs++
		case ok && strings.HasPrefix(target, linstorPackage+"/"):
			f, err := os.OpenFile(filepath.Join(root, target), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteString(rest)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			appends++
		}
	}
	if diffs != 1 || appends != 2 {
		t.Fatalf("docs/cozystack.md has %d diff and %d append blocks, want 1 and 2", diffs, appends)
	}
	if err := os.CopyFS(filepath.Join(pkg, "charts", "csi-clone-sidecar"), os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	return pkg
}

// linstorCluster renders a linstor chart and returns its LinstorCluster and
// every object it renders.
func renderLinstor(t *testing.T, chart string, set ...string) (map[string]any, []map[string]any) {
	t.Helper()
	out, err := helmTemplate(t, chart, "cozy-linstor", set...)
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
