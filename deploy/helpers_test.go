package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Metric names the rules and the dashboard may use: the one place they are
// listed on this side. Histograms are listed by their base name.
var knownMetrics = map[string]bool{
	// Tap (sidecar/, metrics/operations.go).
	"csi_sidecar_operations_seconds":            true,
	"csi_clone_tap_connections_total":           true,
	"csi_clone_tap_connections_abandoned_total": true,
	"csi_clone_tap_observations_dropped_total":  true,
	// Verdicts (metrics/clones*.go, issue 4).
	"csi_clone_worker_disks":                  true,
	"csi_clone_factory_fetches_avoided_total": true,
	"csi_clone_factory_fetches_total":         true,
	"csi_clone_factory_bytes_avoided_total":   true,
	"csi_clone_golden_info":                   true,
	"csi_clone_golden_consumers":              true,
	"csi_clone_bad_disks":                     true,
	"csi_clone_duration_seconds":              true,
	"csi_clone_phase_duration_seconds":        true,
	"csi_clone_concurrent_clones_peak":        true,
	// Goldens that are not a Talos flavor's (issue 35).
	"csi_clone_image_golden_info": true,
	"csi_clone_image_disks":       true,
	// Clone-path prediction (metrics/predict.go, issue 12).
	"csi_clone_path_predicted":                 true,
	"csi_clone_image_path_predicted":           true,
	"csi_clone_prediction_checks":              true,
	"csi_clone_class_disks":                    true,
	"csi_clone_golden_ready_timestamp_seconds": true,
	"csi_clone_admission_params_synced":        true,
	// The driver's Probe (metrics/driver.go, issue 24).
	"csi_clone_driver_ready": true,
	// Clones in flight per golden and phase (issue 36).
	"csi_clone_in_flight":                true,
	"csi_clone_in_flight_oldest_seconds": true,
}

// tool returns the path of a command-line tool the tests drive. Without it
// the test fails with how to install it (`make tools` does): a skipped
// check would pass unnoticed.
func tool(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH (%s)", name, install)
	}
	return path
}

// run runs a command in dir and returns its combined output; a non-zero exit
// is reported through err with that output.
func run(dir, bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// readYAML decodes one YAML document of path into a JSON-shaped value.
func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// splitDocs decodes a multi-document YAML stream (kustomize's output).
func splitDocs(t *testing.T, stream string) []map[string]any {
	t.Helper()
	var docs []map[string]any
	for _, part := range strings.Split("\n"+stream, "\n---\n") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		var v map[string]any
		if err := yaml.Unmarshal([]byte(part), &v); err != nil {
			t.Fatalf("decoding kustomize output: %v\n%s", err, part)
		}
		docs = append(docs, v)
	}
	return docs
}

// get walks a JSON-shaped value along keys (strings for maps, ints for
// lists) and returns nil where the path does not exist.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// named returns the element of a list of objects whose "name" (or other
// key) equals want, or nil.
func named(list any, key, want string) map[string]any {
	l, _ := list.([]any)
	for _, e := range l {
		if m, ok := e.(map[string]any); ok && m[key] == want {
			return m
		}
	}
	return nil
}

// envValue is the value of a container's env entry, "" when absent.
func envValue(container map[string]any, name string) string {
	e := named(container["env"], "name", name)
	if e == nil {
		return ""
	}
	s, _ := e["value"].(string)
	return s
}

// canonical renders a JSON-shaped value so that equal values compare equal
// as strings (map keys sorted by encoding/json).
func canonical(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// repoFile is a path relative to the repository root (the tests run in deploy/).
func repoFile(parts ...string) string {
	return filepath.Join(append([]string{".."}, parts...)...)
}
