package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "monitoring/dashboard.json"

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource map[string]any           `json:"datasource"`
	GridPos    struct{ X, Y, W, H int } `json:"gridPos"`
	Targets    []struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Datasource map[string]any `json:"datasource"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: uid %q, title %q, %d panels", dashboardFile, d.UID, d.Title, len(d.Panels))
	}
	return d
}

// Grafana's built-in variables a query may use without defining them.
var builtinVars = map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}

var varRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)

func TestDashboardVariables(t *testing.T) {
	d := loadDashboard(t)
	defined := map[string]string{}
	for _, v := range d.Templating.List {
		defined[v.Name] = v.Type
	}
	want := map[string]string{
		"datasource":   "datasource", // chosen by the viewer, never hard-coded
		"schematic_id": "query",      // flavor, part 1
		"version":      "query",      // flavor, part 2
		"pool":         "query",
	}
	for name, typ := range want {
		if defined[name] != typ {
			t.Errorf("variable %s: type %q, want %q", name, defined[name], typ)
		}
	}
	// Variable queries may use only variables defined before them.
	seen := map[string]bool{}
	for _, v := range d.Templating.List {
		q, _ := json.Marshal(v.Query)
		for _, m := range varRef.FindAllStringSubmatch(string(q), -1) {
			if !seen[m[1]] {
				t.Errorf("variable %s refers to $%s, not defined before it", v.Name, m[1])
			}
		}
		seen[v.Name] = true
	}
}

func TestDashboardPanelsQueryThroughTheVariableDatasource(t *testing.T) {
	d := loadDashboard(t)
	defined := map[string]bool{}
	for _, v := range d.Templating.List {
		defined[v.Name] = true
	}
	ids, titles := map[int]bool{}, map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || titles[p.Title] {
			t.Errorf("panel %d %q: id or title used twice", p.ID, p.Title)
		}
		ids[p.ID], titles[p.Title] = true, true
		if p.Datasource["uid"] != "${datasource}" {
			t.Errorf("panel %q: datasource %v, want uid ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
				t.Errorf("panel %q: target %q has no expr", p.Title, tg.RefID)
			}
			if tg.Datasource["uid"] != "${datasource}" {
				t.Errorf("panel %q target %s: datasource %v, want uid ${datasource}", p.Title, tg.RefID, tg.Datasource)
			}
			for _, m := range varRef.FindAllStringSubmatch(tg.Expr, -1) {
				if !defined[m[1]] && !builtinVars[m[1]] {
					t.Errorf("panel %q uses undefined variable $%s", p.Title, m[1])
				}
			}
			for m := range usedMetrics(tg.Expr) {
				if !knownMetrics[m] {
					t.Errorf("panel %q uses unknown metric %s", p.Title, m)
				}
			}
		}
	}
}

// The panels the issue asks for, found by the metric each must query.
func TestDashboardShowsWhatOperatorsNeed(t *testing.T) {
	d := loadDashboard(t)
	queried := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for m := range usedMetrics(tg.Expr) {
				queried[m] = append(queried[m], p.Type)
			}
		}
	}
	need := map[string]string{
		"csi_clone_factory_fetches_avoided_total": "timeseries", // fetches avoided per flavor over time
		"csi_clone_factory_fetches_total":         "timeseries", // fetches made per flavor over time
		"csi_clone_factory_bytes_avoided_total":   "timeseries",
		"csi_clone_worker_disks":                  "timeseries", // disks by verdict
		"csi_clone_bad_disks":                     "table",      // bad disks table
		"csi_clone_duration_seconds":              "timeseries",
		"csi_sidecar_operations_seconds":          "timeseries", // CSI call rate and latency
		"csi_clone_in_flight":                     "timeseries", // clones in flight per golden, by phase
		"csi_clone_in_flight_oldest_seconds":      "timeseries", // slow clones now
		// Goldens that are not a Talos flavor's (vm-default-images, a claim,
		// a VolumeSnapshot: issue 35): their disks, goldens and predictions.
		"csi_clone_image_disks":          "timeseries",
		"csi_clone_image_golden_info":    "table",
		"csi_clone_image_path_predicted": "table",
	}
	for m, typ := range need {
		found := false
		for _, pt := range queried[m] {
			found = found || pt == typ
		}
		if !found {
			t.Errorf("no %s panel queries %s (panels querying it: %v)", typ, m, queried[m])
		}
	}
}

// Panels must not overlap on Grafana's 24-column grid.
func TestDashboardLayout(t *testing.T) {
	d := loadDashboard(t)
	for i, a := range d.Panels {
		g := a.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", a.Title, g)
		}
		for _, b := range d.Panels[i+1:] {
			h := b.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %q and %q overlap", a.Title, b.Title)
			}
		}
	}
}

// substituteVars gives each variable a value Grafana could give it, so that
// the expression is plain PromQL: intervals for the built-ins, ".*" (the
// "All" value) for ours, which are only used in =~ matchers.
func substituteVars(expr string) string {
	return varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		name := strings.TrimPrefix(strings.TrimPrefix(ref, "$"), "{")
		switch name {
		case "__rate_interval", "__interval":
			return "1m"
		case "__range":
			return "1h"
		}
		return ".*"
	})
}

var labelValues = regexp.MustCompile(`^label_values\((.*),\s*[a-z_]+\)$`)

// Every panel query and variable query parses as PromQL, checked by
// promtool (Prometheus' own parser) as recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	promtool := tool(t, "promtool", promtoolInstall)
	d := loadDashboard(t)
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, substituteVars(strings.ReplaceAll(tg.Expr, "${datasource}", "")))
		}
	}
	for _, v := range d.Templating.List {
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		if m := labelValues.FindStringSubmatch(s); m != nil {
			exprs = append(exprs, substituteVars(m[1]))
		} else if v.Type == "query" {
			t.Errorf("variable %s: query %q is not label_values(<selector>, <label>)", v.Name, s)
		}
	}
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(e) // a JSON string is a valid YAML scalar
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
	}
	path := t.TempDir() + "/dashboard-queries.yaml"
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(".", promtool, "check", "rules", path); err != nil {
		t.Fatalf("dashboard queries do not parse: %v\n%s\n%s", err, out, b.String())
	}
}

// The panel of the oldest clones in flight draws CSICloneSlow's threshold,
// the number rules.yaml compares with, as a line.
func TestDashboardShowsTheSlowCloneThreshold(t *testing.T) {
	var threshold float64
	for _, a := range loadAlerts(t) {
		if a.Alert == "CSICloneSlow" {
			m := regexp.MustCompile(`\)\s*>\s*([0-9]+)\s*$`).FindStringSubmatch(a.Expr)
			if m == nil {
				t.Fatalf("CSICloneSlow's expr does not end with > <seconds>:\n%s", a.Expr)
			}
			fmt.Sscan(m[1], &threshold)
		}
	}
	if threshold == 0 {
		t.Fatal("no alert CSICloneSlow")
	}
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
			FieldConfig struct {
				Defaults struct {
					Unit       string `json:"unit"`
					Thresholds struct {
						Steps []struct {
							Value *float64 `json:"value"`
						} `json:"steps"`
					} `json:"thresholds"`
					Custom struct {
						ThresholdsStyle struct {
							Mode string `json:"mode"`
						} `json:"thresholdsStyle"`
					} `json:"custom"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range d.Panels {
		if len(p.Targets) == 0 || !usedMetrics(p.Targets[0].Expr)["csi_clone_in_flight_oldest_seconds"] {
			continue
		}
		found = true
		def := p.FieldConfig.Defaults
		var steps []float64
		for _, s := range def.Thresholds.Steps {
			if s.Value != nil {
				steps = append(steps, *s.Value)
			}
		}
		mode := def.Custom.ThresholdsStyle.Mode
		if !slices.Contains(steps, threshold) || def.Unit != "s" || !strings.Contains(mode, "line") && !strings.Contains(mode, "dashed") {
			t.Errorf("panel %q: unit %q, thresholds %v drawn %q; want seconds and a line at %v s (CSICloneSlow's)", p.Title, def.Unit, steps, mode, threshold)
		}
	}
	if !found {
		t.Error("no panel queries csi_clone_in_flight_oldest_seconds")
	}
}
