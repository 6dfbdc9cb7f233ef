package deploy_test

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite generated files (monitoring/prometheusrule.yaml) from their sources")

const (
	rulesFile          = "monitoring/rules.yaml"
	prometheusRuleFile = "monitoring/prometheusrule.yaml"
	unitTestGlob       = "monitoring/tests/*.yaml"
	runbookFile        = "../docs/runbook.md"
	promtoolInstall    = "Debian: apt-get install -y prometheus"
)

// alertRule is the part of a rule the checks below look at.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string      `json:"name"`
		Rules []alertRule `json:"rules"`
	} `json:"groups"`
}

func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var g ruleGroups
	if err := yaml.UnmarshalStrict(raw, &g); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []alertRule
	for _, grp := range g.Groups {
		out = append(out, grp.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return out
}

func TestPromtoolCheckRules(t *testing.T) {
	promtool := tool(t, "promtool", promtoolInstall)
	out, err := run(".", promtool, "check", "rules", rulesFile)
	t.Logf("promtool check rules:\n%s", out)
	if err != nil {
		t.Fatalf("promtool check rules %s: %v", rulesFile, err)
	}
}

func TestPromtoolUnitTests(t *testing.T) {
	promtool := tool(t, "promtool", promtoolInstall)
	files, _ := filepath.Glob(unitTestGlob)
	if len(files) == 0 {
		t.Fatalf("no unit tests match %s", unitTestGlob)
	}
	out, err := run(".", promtool, append([]string{"test", "rules"}, files...)...)
	t.Logf("promtool test rules:\n%s", out)
	if err != nil {
		t.Fatalf("promtool test rules: %v", err)
	}
}

// unitTests is the part of promtool's test file format the coverage check reads.
type unitTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// Every alert must be shown both firing and staying quiet by some unit test.
func TestEveryAlertTestedFiringAndQuiet(t *testing.T) {
	fires, quiet := map[string]bool{}, map[string]bool{}
	files, _ := filepath.Glob(unitTestGlob)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var u unitTests
		if err := yaml.Unmarshal(raw, &u); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range u.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	for _, a := range loadAlerts(t) {
		if !fires[a.Alert] {
			t.Errorf("%s: no unit test shows it firing", a.Alert)
		}
		if !quiet[a.Alert] {
			t.Errorf("%s: no unit test shows it not firing", a.Alert)
		}
	}
}

// Removing any one alert from the rules must make the unit tests fail: each
// alert is really exercised, not only named.
func TestEveryAlertIsNeededByTheUnitTests(t *testing.T) {
	promtool := tool(t, "promtool", promtoolInstall)
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	tests, _ := filepath.Glob(unitTestGlob)
	for _, victim := range loadAlerts(t) {
		var doc map[string]any
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		for _, g := range doc["groups"].([]any) {
			grp := g.(map[string]any)
			var kept []any
			for _, r := range grp["rules"].([]any) {
				if r.(map[string]any)["alert"] != victim.Alert {
					kept = append(kept, r)
				}
			}
			grp["rules"] = kept
		}
		dir := t.TempDir()
		mutated, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "tests"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), mutated, 0o644); err != nil {
			t.Fatal(err)
		}
		// The mutated file must still be valid, so that a failure below is
		// the unit tests missing the alert and not a broken rule file.
		if out, err := run(dir, promtool, "check", "rules", "rules.yaml"); err != nil {
			t.Fatalf("rules without %s do not check: %v\n%s", victim.Alert, err, out)
		}
		var args []string
		for _, f := range tests {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(dir, "tests", filepath.Base(f))
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, dst)
		}
		if out, err := run(dir, promtool, append([]string{"test", "rules"}, args...)...); err == nil {
			t.Errorf("without %s the unit tests still pass:\n%s", victim.Alert, out)
		}
	}
}

// githubAnchor is the fragment GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

func TestAlertsAnnotatedAndLinkedToRunbook(t *testing.T) {
	book, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(book), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[githubAnchor(h)] = true
		}
	}
	const base = "https://github.com/cozystack/csi-clone-sidecar/blob/main/docs/runbook.md#"
	seen := map[string]bool{}
	for _, a := range loadAlerts(t) {
		if seen[a.Alert] {
			t.Errorf("%s: defined twice", a.Alert)
		}
		seen[a.Alert] = true
		if s := a.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", a.Alert, s)
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(a.Annotations[k]) == "" {
				t.Errorf("%s: no %s annotation", a.Alert, k)
			}
		}
		anchor, ok := strings.CutPrefix(a.Annotations["runbook_url"], base)
		if !ok || !anchors[anchor] {
			t.Errorf("%s: runbook_url %q is not %s<a heading of docs/runbook.md>", a.Alert, a.Annotations["runbook_url"], base)
		}
		// Alerts about disks name the pool and the flavor they concern.
		if strings.Contains(a.Expr, "csi_clone_bad_disks") {
			for _, l := range []string{"$labels.namespace", "$labels.pool", "$labels.schematic_id", "$labels.version"} {
				if !strings.Contains(a.Annotations["description"], l) {
					t.Errorf("%s: description does not name %s", a.Alert, l)
				}
			}
		}
	}
}

var metricName = regexp.MustCompile(`\bcsi_[a-z0-9_]+`)

// usedMetrics returns the csi_* metric names in text, histogram series
// suffixes folded into their base name.
func usedMetrics(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range metricName.FindAllString(text, -1) {
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(m, suf); ok && knownMetrics[base] {
				m = base
			}
		}
		out[m] = true
	}
	return out
}

func TestRulesUseKnownMetrics(t *testing.T) {
	for _, a := range loadAlerts(t) {
		for m := range usedMetrics(a.Expr) {
			if !knownMetrics[m] {
				t.Errorf("%s uses unknown metric %s", a.Alert, m)
			}
		}
	}
}

// The PrometheusRule carries exactly the groups of the plain rule file. With
// -update it is regenerated: a fixed header, then rules.yaml from its
// `groups:` line on, indented under spec (comments kept).
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	if *update {
		writePrometheusRule(t)
	}
	rules := readYAML(t, rulesFile)
	pr := readYAML(t, prometheusRuleFile)
	if pr["apiVersion"] != "monitoring.coreos.com/v1" || pr["kind"] != "PrometheusRule" {
		t.Fatalf("%s is a %v %v, want monitoring.coreos.com/v1 PrometheusRule", prometheusRuleFile, pr["apiVersion"], pr["kind"])
	}
	got := canonical(t, get(pr, "spec", "groups"))
	want := canonical(t, rules["groups"])
	if got != want {
		t.Errorf("%s spec.groups differ from %s; run: go test ./deploy -run %s -update", prometheusRuleFile, rulesFile, t.Name())
	}
}

const prometheusRuleHeader = `# GENERATED from rules.yaml; edit that file, then regenerate with
#   go test ./deploy -run TestPrometheusRuleMatchesRulesFile -update
# (the same test fails while the two disagree).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: csi-clone-sidecar
  labels:
    app.kubernetes.io/name: csi-clone-sidecar
    app.kubernetes.io/part-of: csi-clone-sidecar
spec:
`

func writePrometheusRule(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "groups:") {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s has no top-level groups: line", rulesFile)
	}
	var b strings.Builder
	b.WriteString(prometheusRuleHeader)
	for _, l := range lines[start:] {
		if l != "" {
			b.WriteString("  " + l)
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(prometheusRuleFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The names the rules and the dashboard may use are the ones the sidecar
// defines: each appears as a string literal in metrics/ (the standard
// csi_sidecar_operations_seconds comes from csi-lib-utils' metrics package,
// whose registration metrics/ calls), so a rename there fails here.
func TestKnownMetricsAreExported(t *testing.T) {
	files, _ := filepath.Glob(repoFile("metrics", "*.go"))
	var src strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for m := range knownMetrics {
		if m == "csi_sidecar_operations_seconds" {
			// Defined as csi-lib-utils' subsystem and name; metrics'
			// TestOperationsMetricIsCSILibUtils holds its exposition to
			// csi-lib-utils' own manager's.
			if !strings.Contains(src.String(), `"csi_sidecar"`) || !strings.Contains(src.String(), `"operations_seconds"`) {
				t.Errorf("metrics/ does not define csi_sidecar_operations_seconds as csi-lib-utils' subsystem csi_sidecar and name operations_seconds")
			}
			continue
		}
		if !strings.Contains(src.String(), `"`+m+`"`) {
			t.Errorf("metric %s is not defined in metrics/", m)
		}
	}
}
