package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Teardown fails on a race report in any sidecar replica's log (the main
// one, a standby, across restarts), and only in a sidecar's.
func TestRaceReportsInSidecarLogsFailTeardown(t *testing.T) {
	dir := t.TempDir()
	report := "==================\n" + raceReport + "\nRead at 0x00c000 by goroutine 7:\n"
	logs := map[string]string{
		sidecarName:        "### start\nserving\n### restart\nserving\n",
		sidecarName + "-1": "### start\n" + report,
		"kube-apiserver":   report, // not race-built: never read
	}
	c := &Cluster{procs: map[string]*proc{}}
	var names []string
	for name, text := range logs {
		path := filepath.Join(dir, name+".log")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		c.procs[name] = &proc{name: name, log: path}
		names = append(names, name)
	}
	err := c.raceReports(names)
	if err == nil || !strings.Contains(err.Error(), sidecarName+"-1: 1") || strings.Contains(err.Error(), "kube-apiserver") ||
		strings.Contains(err.Error(), sidecarName+": ") {
		t.Fatalf("raceReports = %v, want the standby's one report only", err)
	}
	if err := c.raceReports([]string{sidecarName, "kube-apiserver"}); err != nil {
		t.Fatalf("no sidecar reported a race: %v", err)
	}
}
