// Package sanityrun runs csi-sanity's Identity and Controller suites (the Go
// package github.com/kubernetes-csi/csi-test/v5/pkg/sanity) against a CSI
// endpoint inside `go test`, and reads the per-spec outcomes back from the
// ginkgo JSON report. Ginkgo runs one suite per process, so a test that needs
// two runs (say, directly against a driver and through a relay) runs each in
// a child process of its own test binary with RunSubprocess; that binary's
// TestMain must be
//
//	func TestMain(m *testing.M) { sanityrun.Main(m) }
package sanityrun

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
)

// Environment of a child run (see RunSubprocess).
const (
	EnvEndpoint = "CSI_SANITY_ENDPOINT"
	EnvReport   = "CSI_SANITY_REPORT"
	EnvPool     = "CSI_SANITY_POOL"
	// EnvSecrets names a sanity secrets YAML file (sanity's SecretsFile),
	// so the requests carry secrets; children inherit it from the parent.
	EnvSecrets = "CSI_SANITY_SECRETS"
)

const (
	// VolumeSize is small: volumes are sparse files, but clones and
	// snapshots copy the data regions, so keep the suite cheap.
	VolumeSize int64 = 64 << 20
	// ExpandSize is what the expansion specs grow a volume to.
	ExpandSize int64 = 128 << 20
	// suiteTimeout bounds one sanity run.
	suiteTimeout = 10 * time.Minute
)

// Focus selects the Identity and Controller suites; the Node suite (mounts)
// and GroupController (not offered by the driver) are filtered out. Ginkgo
// matches these against "<suite description> <spec text>", so no anchors.
var Focus = []string{`Identity Service `, `\[Controller Server\]`}

// Config is the sanity configuration every run uses: a pool parameter (so
// parameters reach the driver), a small volume size and an explicit expand
// size, so the clone, snapshot and expansion specs run rather than skip.
// pool "" means csidriver.DefaultPoolName.
func Config(endpoint, pool string) sanity.TestConfig {
	if pool == "" {
		pool = csidriver.DefaultPoolName
	}
	cfg := sanity.NewTestConfig()
	cfg.Address = endpoint
	cfg.TestVolumeSize = VolumeSize
	cfg.TestVolumeExpandSize = ExpandSize
	cfg.TestVolumeParameters = map[string]string{csidriver.PoolParameter: pool}
	cfg.TestSnapshotParameters = map[string]string{}
	cfg.SecretsFile = os.Getenv(EnvSecrets)
	return cfg
}

// Run runs the focused sanity suites in this process (once per process:
// ginkgo refuses a second RunSpecs) and writes a ginkgo JSON report to
// reportPath unless it is "". Failed specs fail t.
func Run(t *testing.T, cfg sanity.TestConfig, reportPath string) {
	t.Helper()
	if err := run(t, t.TempDir(), cfg, reportPath); err != nil {
		t.Fatal(err)
	}
}

// run is Run for a test or for the child process of RunSubprocess: failed
// specs call fail.Fail; dir holds sanity's mount and staging paths.
func run(fail ginkgo.GinkgoTestingT, dir string, cfg sanity.TestConfig, reportPath string) error {
	// Sanity mkdirs these itself and fails if they exist: keep them private.
	cfg.TargetPath = filepath.Join(dir, "mount")
	cfg.StagingPath = filepath.Join(dir, "staging")
	sc := sanity.GinkgoTest(&cfg)
	defer sc.Finalize()
	gomega.RegisterFailHandler(ginkgo.Fail)
	suiteCfg, reporterCfg := ginkgo.GinkgoConfiguration()
	suiteCfg.FocusStrings = append(suiteCfg.FocusStrings, Focus...)
	suiteCfg.Timeout = suiteTimeout
	if reportPath != "" {
		abs, err := filepath.Abs(reportPath)
		if err != nil {
			return fmt.Errorf("report path: %w", err)
		}
		reporterCfg.JSONReport = abs
	}
	ginkgo.RunSpecs(fail, "CSI sanity", suiteCfg, reporterCfg)
	return nil
}

// Main is the TestMain of a test binary that calls RunSubprocess. In the
// child RunSubprocess starts (CSI_SANITY_ENDPOINT set) it runs the suites
// against that endpoint, writing the report to CSI_SANITY_REPORT (pool from
// CSI_SANITY_POOL), and exits 1 if a spec failed; otherwise it runs the
// binary's tests. The child is chosen here rather than by a test that
// skips in the parent, so a test run shows no skipped test.
func Main(m *testing.M) {
	endpoint := os.Getenv(EnvEndpoint)
	if endpoint == "" {
		os.Exit(m.Run())
	}
	flag.Parse() // ginkgo's flags, as m.Run would parse them
	os.Exit(runChild(endpoint))
}

func runChild(endpoint string) int {
	dir, err := os.MkdirTemp("", "sanity-child-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	var failed childFailed
	if err := run(&failed, dir, Config(endpoint, os.Getenv(EnvPool)), os.Getenv(EnvReport)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// childFailed is the child's ginkgo.GinkgoTestingT: it notes a failed spec.
type childFailed bool

func (f *childFailed) Fail() { *f = true }

// RunSubprocess runs the sanity suites in a child process of the current
// test binary (whose TestMain is Main) against endpoint, writing the JSON report to reportPath and
// the child's output to reportPath+".log". It returns the child's error (a
// failed spec makes the child fail); the report is there either way, unless
// the child could not run the suite, which is an error of its own.
func RunSubprocess(t testing.TB, endpoint, pool, reportPath string) error {
	t.Helper()
	logPath := reportPath + ".log"
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	_ = os.Remove(reportPath)
	cmd := exec.Command(os.Args[0], "-test.v")
	cmd.Env = append(os.Environ(), EnvEndpoint+"="+endpoint, EnvReport+"="+reportPath, EnvPool+"="+pool)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("sanity against %s took %s (output: %s)", endpoint, time.Since(start).Round(time.Millisecond), logPath)
	if _, err := os.Stat(reportPath); err != nil {
		return fmt.Errorf("sanity child wrote no report %s (is this test binary's TestMain sanityrun.Main?): %v; see %s",
			reportPath, errors.Join(runErr, err), logPath)
	}
	if runErr != nil {
		return fmt.Errorf("sanity child failed: %w; see %s", runErr, logPath)
	}
	return nil
}

// Spec is one sanity spec's outcome.
type Spec struct {
	// Text is the spec's full text, e.g. "Controller Service [Controller
	// Server] CreateVolume should create volume from an existing source volume".
	Text string
	// State is ginkgo's state: "passed", "skipped", "failed", ...
	State string
	// Message is the failure or Skip() message; "" for specs filtered out
	// by the focus, which ginkgo reports as skipped without running them.
	Message string
}

// Filtered is true for a spec that the focus kept from running at all.
func (s Spec) Filtered() bool { return s.State == "skipped" && s.Message == "" }

// ParseReport reads the specs (It nodes) of a ginkgo JSON report, sorted by text.
func ParseReport(path string) ([]Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []types.Report
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("ginkgo report %s: %w", path, err)
	}
	var specs []Spec
	for _, r := range reports {
		for _, sr := range r.SpecReports {
			if sr.LeafNodeType != types.NodeTypeIt {
				continue
			}
			specs = append(specs, Spec{Text: sr.FullText(), State: sr.State.String(), Message: sr.Failure.Message})
		}
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("ginkgo report %s holds no specs", path)
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Text < specs[j].Text })
	return specs, nil
}

// ParseOutcomes maps each spec's full text to its state ("passed",
// "skipped", "failed", ...).
func ParseOutcomes(path string) (map[string]string, error) {
	specs, err := ParseReport(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(specs))
	for _, s := range specs {
		if _, dup := out[s.Text]; dup {
			return nil, fmt.Errorf("ginkgo report %s: spec text %q appears twice", path, s.Text)
		}
		out[s.Text] = s.State
	}
	return out, nil
}

// Counts tallies the specs of one report.
type Counts struct {
	Passed, Failed int
	// Skipped are specs that called Skip() at run time (capability absent).
	Skipped int
	// Filtered are specs the focus kept from running (Node, GroupController).
	Filtered int
	// Pending are specs sanity itself disables (XIt).
	Pending int
}

func (c Counts) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped at run time, %d filtered out by focus, %d pending (disabled in sanity)",
		c.Passed, c.Failed, c.Skipped, c.Filtered, c.Pending)
}

// Count tallies specs by outcome; anything not passed, skipped or pending
// (failed, panicked, timedout, ...) counts as failed.
func Count(specs []Spec) Counts {
	var c Counts
	for _, s := range specs {
		switch {
		case s.Filtered():
			c.Filtered++
		case s.State == "skipped":
			c.Skipped++
		case s.State == "passed":
			c.Passed++
		case s.State == "pending":
			c.Pending++
		default:
			c.Failed++
		}
	}
	return c
}
