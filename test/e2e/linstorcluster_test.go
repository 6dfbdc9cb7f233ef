package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/deploy/linstorpatch"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/cozychart"
	"github.com/cozystack/csi-clone-sidecar/test/linstorpod"
)

var linstorClusterGVR = schema.GroupVersionResource{Group: "piraeus.io", Version: "v1", Resource: "linstorclusters"}

// TestLinstorClusterGainsTheSidecarBothWays adds the sidecar to a
// LinstorCluster that already has a podTemplate with a linstor-csi image
// override, on a real API server with piraeus-operator's CRD, both
// documented ways: the JSON patch of `csi-clone-sidecar linstor-patch`
// (a LinstorCluster no Helm release owns), and the Cozystack linstor chart
// with deploy/cozystack/linstor.patch, applied as its release would be. For
// each, the operator's pod rendered from what the API server stored (the
// operator's strategic merge) is the pod before plus the sidecar, and doing
// it again changes nothing.
func TestLinstorClusterGainsTheSidecarBothWays(t *testing.T) {
	c := cluster.Start(t, cluster.Options{ControlPlaneOnly: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cache := t.TempDir()
	if out, err := kubectl(t, c, cache, "apply", "--server-side", "-f", filepath.Join(sharedCRDs, "piraeus.io_linstorclusters.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := kubectl(t, c, cache, "wait", "--for=condition=Established", "--timeout=60s", "crd/linstorclusters.piraeus.io"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lc := c.Dynamic.Resource(linstorClusterGVR)
	operator, err := linstorpod.OperatorTemplate(filepath.Join(deployDir, "testdata", "piraeus-csi-controller-template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pod := func(o *unstructured.Unstructured) corev1.PodTemplateSpec {
		t.Helper()
		pt, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "csiController", "podTemplate")
		p, err := linstorpod.Merge(operator, pt)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(way string, before, after *unstructured.Unstructured) {
		t.Helper()
		b := pod(before)
		if d, err := linstorpod.Find(b.Spec, linstorpod.Driver); err != nil || d.Image != linstorpod.CozystackImage {
			t.Fatalf("%s: the pod before has linstor-csi %q (%v), not the override", way, d.Image, err)
		}
		for _, err := range linstorpod.Check(b, pod(after)) {
			t.Errorf("%s: %v", way, err)
		}
	}

	t.Run("json patch", func(t *testing.T) {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(linstorpod.CozystackCluster), &obj.Object); err != nil {
			t.Fatal(err)
		}
		// Created by another owner, with linstor-csi's image overridden.
		before, err := lc.Apply(ctx, "linstorcluster", &obj, metav1.ApplyOptions{FieldManager: "owner"})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(deployDir, "linstor", "podtemplate.yaml"))
		var addition map[string]any
		if err == nil {
			err = yaml.Unmarshal(raw, &addition)
		}
		if err != nil {
			t.Fatal(err)
		}
		ops, err := linstorpatch.Add(before.Object, addition)
		if err != nil {
			t.Fatal(err)
		}
		patch, _ := json.Marshal(ops)
		after, err := lc.Patch(ctx, "linstorcluster", types.JSONPatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("the JSON patch was refused: %v", err)
		}
		check("json patch", before, after)
		// Again: linstor-patch refuses, and the same patch is refused by its guard.
		if _, err := linstorpatch.Add(after.Object, addition); !errors.Is(err, linstorpatch.ErrAlreadyThere) {
			t.Errorf("linstor-patch on the patched LinstorCluster: %v, want a refusal", err)
		}
		if _, err := lc.Patch(ctx, "linstorcluster", types.JSONPatchType, patch, metav1.PatchOptions{}); err == nil {
			t.Error("the same JSON patch was accepted a second time")
		}
		assertUnchanged(t, ctx, c, after)
		if err := lc.Delete(ctx, "linstorcluster", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("cozystack chart", func(t *testing.T) {
		chart, err := cozychart.Build(filepath.Join("..", ".."), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		apply := func(set ...string) *unstructured.Unstructured {
			t.Helper()
			var args []string
			for _, s := range set {
				args = append(args, "--set", s)
			}
			objs, err := cluster.RenderChartAt(chart, cluster.NamespaceCSI, args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if o.GetKind() == "LinstorCluster" {
					got, err := lc.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "helm", Force: true})
					if err != nil {
						t.Fatal(err)
					}
					return got
				}
			}
			t.Fatal("the linstor chart renders no LinstorCluster")
			return nil
		}
		before := apply("csiCloneSidecar.enabled=false")
		after := apply("csiCloneSidecar.enabled=true")
		check("cozystack chart", before, after)
		if again := apply("csiCloneSidecar.enabled=true"); again.GetResourceVersion() != after.GetResourceVersion() {
			t.Errorf("applying the release again changed the LinstorCluster (resourceVersion %s -> %s)", after.GetResourceVersion(), again.GetResourceVersion())
		}
	})
}

// assertUnchanged fails unless the object still has the resourceVersion it had.
func assertUnchanged(t *testing.T, ctx context.Context, c *cluster.Cluster, want *unstructured.Unstructured) {
	t.Helper()
	got, err := c.Dynamic.Resource(linstorClusterGVR).Get(ctx, want.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetResourceVersion() != want.GetResourceVersion() {
		t.Errorf("the LinstorCluster changed: resourceVersion %s -> %s", want.GetResourceVersion(), got.GetResourceVersion())
	}
}

// chartObject decodes the one object of kind the chart renders with its
// defaults, or with the --set values given (the monitoring the e2e tests
// deploy comes from the chart).
func chartObject(t *testing.T, kind string, into any, set ...string) {
	t.Helper()
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	objs, err := cluster.RenderChart(cluster.NamespaceCSI, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == kind {
			raw, err := o.MarshalJSON()
			if err == nil {
				err = json.Unmarshal(raw, into)
			}
			if err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("the chart renders no %s", kind)
}

// chartRuleFile writes the groups of the chart's PrometheusRule (rendered
// with the --set values given) as a Prometheus rule file and returns its
// path.
func chartRuleFile(t *testing.T, set ...string) string {
	t.Helper()
	var pr struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	chartObject(t, "PrometheusRule", &pr, set...)
	raw, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
