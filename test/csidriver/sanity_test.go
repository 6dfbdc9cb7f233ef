package csidriver_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
	"github.com/cozystack/csi-clone-sidecar/test/sanityrun"
)

// mustRun are specs this driver must pass, not skip: the clone, snapshot,
// expansion and pagination paths the sidecar cares about.
var mustRun = []string{
	"Identity Service GetPluginCapabilities should return appropriate capabilities",
	"Identity Service Probe should return appropriate information",
	"Identity Service GetPluginInfo should return appropriate information",
	"Controller Service [Controller Server] CreateVolume should create volume from an existing source volume",
	"Controller Service [Controller Server] CreateVolume should create volume from an existing source snapshot",
	"Controller Service [Controller Server] CreateVolume should fail when requesting to create a volume with already existing name and different capacity",
	"ExpandVolume [Controller Server] should work",
	"ListSnapshots [Controller Server] should return next token when a limited number of entries are requested",
	"Controller Service [Controller Server] volume lifecycle should be idempotent",
	"GetSnapshot [Controller Server] should return snapshot that match the specified snapshot id",
}

// allowedSkips are the runtime skips this driver accepts: a piece of the
// spec text and why the spec cannot run.
var allowedSkips = [][2]string{
	{"ModifyVolume", "no MODIFY_VOLUME capability (no VolumeAttributesClass support)"},
	{"volume attribute class", "no MODIFY_VOLUME capability"},
	{"VolumeHealth", "no GET_VOLUME_HEALTH / LIST_VOLUME_HEALTH capability"},
	{"max attach limit", "TestNodeVolumeAttachLimit is off: the driver has no attach limit"},
	{"accessibility requirements", "no SNAPSHOT_ACCESSIBILITY_CONSTRAINTS (no topology)"},
}

// TestSanity runs csi-sanity's Identity and Controller suites against the
// driver in this process.
func TestSanity(t *testing.T) {
	dir := t.TempDir()
	d, err := csidriver.Start(csidriver.Config{
		Endpoint: "unix://" + filepath.Join(dir, "csi.sock"),
		StateDir: filepath.Join(dir, "state"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	report := filepath.Join(dir, "report.json")
	sanityrun.Run(t, sanityrun.Config(d.Endpoint(), ""), report)

	specs, err := sanityrun.ParseReport(report)
	if err != nil {
		t.Fatal(err)
	}
	checkSpecs(t, specs)
}

func checkSpecs(t *testing.T, specs []sanityrun.Spec) {
	t.Helper()
	counts := sanityrun.Count(specs)
	t.Logf("sanity: %s", counts)
	state := map[string]string{}
	for _, s := range specs {
		state[s.Text] = s.State
		if s.State == "skipped" && !s.Filtered() && allowedSkip(s.Text) == "" {
			t.Errorf("unexpected skip: %s: %s", s.Text, s.Message)
		}
		if s.Filtered() && !strings.HasPrefix(s.Text, "Node Service") && !strings.HasPrefix(s.Text, "GroupController Service") {
			t.Errorf("filtered out by the focus but neither Node nor GroupController: %s", s.Text)
		}
		if s.State == "skipped" && !s.Filtered() {
			t.Logf("skipped: %s (%s)", s.Text, allowedSkip(s.Text))
		}
	}
	for _, text := range mustRun {
		if state[text] != "passed" {
			t.Errorf("spec %q: state %q, want passed", text, state[text])
		}
	}
	if counts.Failed > 0 {
		t.Errorf("%d sanity specs failed", counts.Failed)
	}
}

func allowedSkip(text string) string {
	for _, a := range allowedSkips {
		if strings.Contains(text, a[0]) {
			return a[1]
		}
	}
	return ""
}
