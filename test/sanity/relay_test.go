// Package sanity_test holds the csi-sanity comparison of the test driver
// reached directly and reached through the sidecar's relay: the relay must be
// invisible to a CSI client, spec by spec.
package sanity_test

import (
	"context"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
	"github.com/cozystack/csi-clone-sidecar/test/sanityrun"
)

// TestSanityAgainstEndpoint is the child that sanityrun.RunSubprocess runs;
// it skips unless CSI_SANITY_ENDPOINT is set.
func TestSanityAgainstEndpoint(t *testing.T) { sanityrun.AgainstEndpointFromEnv(t) }

// TestSanityDirectVsRelay runs the same sanity suites against one driver
// directly and against a second, identical driver through the relay with its
// tap on, and requires the same outcome for every spec and no failure.
func TestSanityDirectVsRelay(t *testing.T) {
	dir := t.TempDir()
	direct := startDriver(t, filepath.Join(dir, "direct"))
	behind := startDriver(t, filepath.Join(dir, "behind-relay"))

	var mu sync.Mutex
	observed := map[string]int{}
	relayPath := filepath.Join(dir, "relay.sock")
	relay, err := sidecar.NewRelay(sidecar.Config{
		ListenPath: relayPath,
		SocketMode: 0o660,
		DriverPath: behind.SocketPath(),
		Tap:        true,
		Observer: sidecar.ObserverFunc(func(o sidecar.Observation) {
			mu.Lock()
			observed[o.Method]++
			mu.Unlock()
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- relay.Serve(ctx) }()

	directReport, relayReport := filepath.Join(dir, "direct.json"), filepath.Join(dir, "relay.json")
	if err := sanityrun.RunSubprocess(t, direct.Endpoint(), "", directReport); err != nil {
		t.Errorf("direct: %v", err)
	}
	if err := sanityrun.RunSubprocess(t, "unix://"+relayPath, "", relayReport); err != nil {
		t.Errorf("through the relay: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("relay Serve: %v", err)
	}
	relay.Close() // waits for the tap to deliver what it decoded

	compareReports(t, directReport, relayReport)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("tap observations by method: %v", observed)
	if observed[sidecar.MethodCreateVolume] == 0 {
		t.Errorf("the tap observed no CreateVolume during a sanity run that makes dozens")
	}
}

func startDriver(t *testing.T, dir string) *csidriver.Driver {
	t.Helper()
	d, err := csidriver.Start(csidriver.Config{
		Endpoint: "unix://" + filepath.Join(dir, "csi.sock"),
		StateDir: filepath.Join(dir, "state"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

func compareReports(t *testing.T, directReport, relayReport string) {
	t.Helper()
	direct, err := sanityrun.ParseOutcomes(directReport)
	if err != nil {
		t.Fatal(err)
	}
	relayed, err := sanityrun.ParseOutcomes(relayReport)
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]bool{}
	for k := range direct {
		texts[k] = true
	}
	for k := range relayed {
		texts[k] = true
	}
	var sorted []string
	for k := range texts {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if direct[k] != relayed[k] {
			t.Errorf("spec %q: direct %q, through the relay %q", k, direct[k], relayed[k])
		}
	}
	for name, path := range map[string]string{"direct": directReport, "relay": relayReport} {
		specs, err := sanityrun.ParseReport(path)
		if err != nil {
			t.Fatal(err)
		}
		c := sanityrun.Count(specs)
		t.Logf("%s: %s", name, c)
		if c.Failed > 0 || c.Passed == 0 {
			t.Errorf("%s: %d failed, %d passed; want 0 failed and some passed", name, c.Failed, c.Passed)
		}
	}
}
