package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/cozychart"
	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// migrationBlock is a ```sh block of docs/cozystack.md whose first line is
// "# migrate: <name>".
var migrationBlock = regexp.MustCompile("(?s)```sh\n# migrate: ([^\n]*)\n(.*?)```")

// TestMigrateBetweenLinstorPatchAndChart moves a Cozystack-like cluster from
// the linstor-patch install (kubectl apply -k of deploy/rbac and
// deploy/monitoring, the JSON patch on the LinstorCluster the linstor
// release owns) to the chart vendored into the linstor package, and back,
// with the pinned Helm against a real API server serving every kind the
// chart renders and running docs/cozystack.md's two blocks as written.
// Turning the toggle on without the first block fails on Helm's ownership
// check; after it, the upgrade succeeds and the release owns every object
// of the chart; the way back leaves the kustomize objects, unowned by Helm,
// and the sidecar in the LinstorCluster once; and the way to the chart
// works again.
func TestMigrateBetweenLinstorPatchAndChart(t *testing.T) {
	c := cluster.Start(t, cluster.Options{ControlPlaneOnly: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kc := mustKubectl(t, c, t.TempDir())
	for _, crd := range append(deployCRDs(t), filepath.Join("testdata", "victoriametrics-standin-crds.yaml")) {
		kc("apply", "--server-side", "-f", crd)
	}
	kc("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	blocks := migrationBlocks(t)
	shell := migrationShell(t, c)
	chart, err := cozychart.Build(filepath.Join("..", ".."), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	helm := func(enabled string) (string, error) {
		bin, err := tools.Bin("helm")
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "--kubeconfig", c.Kubeconfig, "upgrade", "--install", "linstor", chart,
			"--namespace", cluster.NamespaceCSI, "--set", "csiCloneSidecar.enabled="+enabled, "--wait=false").CombinedOutput()
		return string(out), err
	}

	// The linstor release as the platform installs it, then the
	// linstor-patch install beside it.
	if out, err := helm("false"); err != nil {
		t.Fatalf("helm install of the linstor package: %v\n%s", err, out)
	}
	shell("back to linstor-patch", blocks["back to linstor-patch"])
	sidecarOnce(t, ctx, c)

	if out, err := helm("true"); err == nil || !strings.Contains(out, "invalid ownership metadata") {
		t.Fatalf("the toggle on over the linstor-patch install: %v, want Helm's ownership refusal\n%s", err, out)
	}
	for round := 1; round <= 2; round++ {
		shell("to the chart", blocks["to the chart"])
		if out, err := helm("true"); err != nil {
			t.Fatalf("round %d: the toggle on after the doc's block: %v\n%s", round, err, out)
		}
		chartObjects := releaseObjects(t, chart)
		for _, o := range chartObjects {
			args := []string{"get", strings.ToLower(o.GetKind()), o.GetName(), "-o", "jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-name}"}
			if o.GetNamespace() != "" {
				args = append(args, "-n", o.GetNamespace())
			}
			if got := kc(args...); got != "linstor" {
				t.Errorf("round %d: %s %s belongs to release %q, want linstor", round, o.GetKind(), o.GetName(), got)
			}
		}
		sidecarOnce(t, ctx, c)

		if out, err := helm("false"); err != nil {
			t.Fatalf("round %d: the toggle off: %v\n%s", round, err, out)
		}
		shell("back to linstor-patch", blocks["back to linstor-patch"])
		sidecarOnce(t, ctx, c)
		for _, o := range []string{"clusterrole/csi-clone-sidecar", "-n=" + cluster.NamespaceCSI + " servicemonitor/csi-clone-sidecar"} {
			args := append(strings.Fields(o), "-o", "jsonpath={.metadata.labels.app\\.kubernetes\\.io/managed-by}")
			if got := kc(append([]string{"get"}, args...)...); got == "Helm" {
				t.Errorf("round %d: after the way back %s is still Helm's", round, o)
			}
		}
	}
}

func migrationBlocks(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cozystack.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	for _, m := range migrationBlock.FindAllStringSubmatch(string(doc), -1) {
		blocks[m[1]] = m[2]
	}
	for _, name := range []string{"to the chart", "back to linstor-patch"} {
		if blocks[name] == "" {
			t.Fatalf("docs/cozystack.md has no ```sh block \"# migrate: %s\"", name)
		}
	}
	return blocks
}

// migrationShell returns a function that runs a block of the doc with bash,
// the pinned kubectl and a build of the sidecar on PATH, and the cluster's
// kubeconfig.
func migrationShell(t *testing.T, c *cluster.Cluster) func(name, script string) {
	bin := t.TempDir()
	kubectlBin, err := tools.Bin("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kubectlBin, filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "csi-clone-sidecar"), "../../cmd/csi-clone-sidecar").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The blocks name deploy/ relative to a checkout and write add.json
	// where they run: a scratch directory with deploy/ linked in.
	work := t.TempDir()
	deploy, err := filepath.Abs(deployDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(deploy, filepath.Join(work, "deploy")); err != nil {
		t.Fatal(err)
	}
	return func(name, script string) {
		t.Helper()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig,
			"KUBECACHEDIR="+filepath.Join(work, "kube-cache"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("docs/cozystack.md, %q: %v\n%s", name, err, out)
		}
	}
}

// releaseObjects are the objects the linstor package renders with the
// sidecar on, less the LinstorCluster.
func releaseObjects(t *testing.T, chart string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := cluster.RenderChartAt(chart, cluster.NamespaceCSI, "--set", "csiCloneSidecar.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "LinstorCluster" {
			out = append(out, o)
		}
	}
	return out
}

// sidecarOnce fails unless the LinstorCluster's podTemplate holds the
// sidecar container exactly once and still the linstor-csi override.
func sidecarOnce(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	lc, err := c.Dynamic.Resource(linstorClusterGVR).Get(ctx, "linstorcluster", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(lc.Object, "spec", "csiController", "podTemplate", "spec", "containers")
	counts := map[string]int{}
	for _, ct := range containers {
		if m, ok := ct.(map[string]any); ok {
			counts[m["name"].(string)]++
		}
	}
	if counts["csi-clone-sidecar"] != 1 || counts["linstor-csi"] != 1 {
		t.Errorf("the LinstorCluster's podTemplate containers: %v, want csi-clone-sidecar and linstor-csi once each", counts)
	}
}
