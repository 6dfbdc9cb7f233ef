package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

const (
	guardOpenAlert = "CSICloneAdmissionGuardOpen"
	// guardOpenFor replaces the alert's `for: 5m` in the rule file this test
	// loads, and nothing else of it: the expression is the shipped one. The
	// 5 minutes themselves are checked by promtool's unit tests
	// (deploy/monitoring/tests/predict.yaml).
	guardOpenFor = 10 * time.Second
)

// TestAdmissionGuardOpenAlertFires walks the guard's fail-open path end to
// end: the chart's admission guard (admissionGuard.enabled, Deny) on the
// loopback API server, the sidecar keeping its parameters current, and
// Prometheus and VictoriaMetrics + vmalert scraping the sidecar with the
// shipped alert rules. While the parameters are kept current, a mismatched
// DataVolume is refused and CSICloneAdmissionGuardOpen is inactive; with the
// sidecar stopped and the parameters deleted, the same DataVolume is
// admitted and the alert fires, on both evaluators, and nothing else does.
func TestAdmissionGuardOpenAlertFires(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{
			{Name: "replicated", DefaultVirt: true},
			{Name: "replicated-b", Pool: "b"},
		},
		SidecarArgs: []string{"--resync-period=2s", "--admission-params=true"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rules := ruleFileWithFor(t, chartRuleFile(t), guardOpenAlert, guardOpenFor)
	prom := startPrometheus(t, ctx, c, rules)
	vm := startVictoriaMetrics(t, ctx, c, rules)
	evaluators := map[string]*prometheus{"Prometheus": prom, "vmalert": vm.alerts}

	golden := admissionGolden(t, ctx, c, admissionFlavor)
	waitAdmissionParams(t, ctx, c, golden+".class", "replicated")
	applyChartAdmission(t, ctx, c, "admissionGuard.validationActions={Deny}")
	a := newAdmissionClient(t, c)
	mismatched := func() ([]string, error) {
		return a.create(ctx, "mismatched", golden, "no-such-class", "20Gi", false, nil)
	}
	waitGuard(t, ctx, c, func() (bool, string) {
		_, err := mismatched()
		return apierrors.IsInvalid(err), fmt.Sprintf("error %v", err)
	})
	_, err := mismatched()
	checkMessages(t, "parameters kept current", []string{fmt.Sprint(err)}, []string{"would be on StorageClass no-such-class, which does not exist"})

	// Kept current: both see the parameters synced, and the alert has been
	// evaluated on that for longer than its `for` without even pending.
	for _, q := range []*prometheus{prom, vm.query} {
		q.waitFor(t, ctx, `max(csi_clone_admission_params_synced{job="csi-clone-sidecar"})`, 1)
	}
	holdRuleState(t, ctx, evaluators, guardOpenAlert, "inactive", guardOpenFor+3*promScrape)

	// A broken sidecar: stopped, its parameters gone.
	if err := c.StopSidecar(); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().ConfigMaps(cluster.NamespaceCSI).Delete(ctx, publish.AdmissionParamsName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGuard(t, ctx, c, func() (bool, string) {
		w, err := mismatched()
		return err == nil && len(w) == 0, fmt.Sprintf("warnings %q, error %v", w, err)
	})
	for name, e := range evaluators {
		t.Run(name, func(t *testing.T) {
			waitRuleState(t, ctx, e, guardOpenAlert, "firing")
			e.checkAlerts(t, ctx, []string{guardOpenAlert})
		})
	}
}

// ruleFileWithFor copies a rule file with alert's `for` set to d, and
// returns the copy's path. The alert must be there with a `for`.
func ruleFileWithFor(t *testing.T, path, alert string, d time.Duration) string {
	t.Helper()
	var file struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	readYAML(t, path, &file)
	found := false
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r["alert"] == alert && r["for"] != nil {
				r["for"] = d.String()
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("%s has no alert %s with a `for`", path, alert)
	}
	raw, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	return writeTemp(t, string(raw))
}

// applyChartAdmission creates the admission guard's objects as the chart
// renders them with admissionGuard.enabled and set, in the sidecar's
// namespace.
func applyChartAdmission(t *testing.T, ctx context.Context, c *cluster.Cluster, set ...string) {
	t.Helper()
	args := []string{"--set", "admissionGuard.enabled=true"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	objs, err := cluster.RenderChart(cluster.NamespaceCSI, args...)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy":
			var p admissionv1.ValidatingAdmissionPolicy
			if err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &p); err == nil {
				_, err = c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &p, metav1.CreateOptions{})
			}
		case "ValidatingAdmissionPolicyBinding":
			var b admissionv1.ValidatingAdmissionPolicyBinding
			if err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err == nil {
				_, err = c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &b, metav1.CreateOptions{})
			}
		default:
			continue
		}
		if err != nil {
			t.Fatalf("chart's %s: %v", o.GetKind(), err)
		}
		kinds = append(kinds, o.GetKind())
	}
	if len(kinds) != 4 {
		t.Fatalf("the chart with the guard on renders %v, want the guard's policy and binding and the access-mode warning's", kinds)
	}
}

// ruleState is the state (inactive, pending, firing) of a rule on an
// evaluator, "" when it is not loaded.
func ruleState(t *testing.T, p *prometheus, rule string) string {
	t.Helper()
	groups, err := p.ruleGroups()
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Name == rule {
				states = append(states, r.State)
			}
		}
	}
	if len(states) != 1 {
		t.Fatalf("%s: rule %s loaded %d times", p.url, rule, len(states))
	}
	return states[0]
}

// waitRuleState waits until a rule is in state want; it fails with the
// states seen on the way.
func waitRuleState(t *testing.T, ctx context.Context, p *prometheus, rule, want string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, promScrape, 2*time.Minute, true, func(context.Context) (bool, error) {
		s := ruleState(t, p, rule)
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		return s == want, nil
	})
	if err != nil {
		t.Fatalf("%s never %s (states seen: %v): %v", rule, want, seen, err)
	}
	t.Logf("%s: %v", rule, seen)
}

// holdRuleState fails unless a rule stays in state want on every evaluator
// for d (looked at every evaluation interval).
func holdRuleState(t *testing.T, ctx context.Context, evaluators map[string]*prometheus, rule, want string, d time.Duration) {
	t.Helper()
	until := time.Now().Add(d)
	for time.Now().Before(until) {
		for name, p := range evaluators {
			if s := ruleState(t, p, rule); s != want {
				t.Fatalf("%s: %s is %q, want %q", name, rule, s, want)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(promScrape):
		}
	}
}
