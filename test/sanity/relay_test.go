// Package sanity_test holds the csi-sanity comparison of the test driver
// reached directly and reached through the sidecar's relay: the relay must be
// invisible to a CSI client, spec by spec.
package sanity_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
	"github.com/cozystack/csi-clone-sidecar/test/sanity"
	"github.com/cozystack/csi-clone-sidecar/test/sanityrun"
)

// TestMain is also the child that sanityrun.RunSubprocess runs.
func TestMain(m *testing.M) { sanityrun.Main(m) }

// secretValue is what sanity sends as every request's secrets; it must reach
// the driver and never an observation.
const secretValue = "s3cr3t-never-observed"

// TestSanityDirectVsRelay runs the same sanity suites against one driver
// directly and against a second, identical driver through the relay with its
// tap on, and requires the same outcome for every spec and no failure. It
// also checks that the tap observed exactly what the driver behind the relay
// received, and no secret.
func TestSanityDirectVsRelay(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(sanityrun.EnvSecrets, writeSecrets(t, dir))
	direct := startDriver(t, filepath.Join(dir, "direct"), nil)
	received := &sanity.Received{}
	behind := startDriver(t, filepath.Join(dir, "behind-relay"), received.Interceptor)

	var mu sync.Mutex
	observed := map[string]int{}
	var all []sidecar.Observation
	relayPath := filepath.Join(dir, "relay.sock")
	relay, err := sidecar.NewRelay(sidecar.Config{
		ListenPath: relayPath,
		SocketMode: 0o660,
		DriverPath: behind.SocketPath(),
		Tap:        true,
		Observer: sidecar.ObserverFunc(func(o sidecar.Observation) {
			mu.Lock()
			observed[o.Method]++
			all = append(all, o)
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
	compareWithDriver(t, received, all)
}

// compareWithDriver requires the tap's decoded calls to be, as a multiset,
// exactly the calls the driver received, clones and failures included.
func compareWithDriver(t *testing.T, received *sanity.Received, observed []sidecar.Observation) {
	t.Helper()
	want, withSecrets := received.Calls()
	if withSecrets == 0 {
		t.Fatal("no request carried secrets: the secret check below would prove nothing")
	}
	var got []string
	clones, snapshotRestores := 0, 0
	for _, o := range observed {
		if c, ok := sanity.FromObservation(o); ok {
			got = append(got, c.String())
			if c.Method == sidecar.MethodCreateVolume && c.SourceVolume != "" && c.Code == "OK" && c.RespVolumeID != "" {
				clones++
			}
			if c.Method == sidecar.MethodCreateVolume && c.SourceSnapshot != "" && c.Code == "OK" {
				snapshotRestores++
			}
		}
		b, _ := json.Marshal(o)
		if strings.Contains(string(b), secretValue) {
			t.Errorf("observation carries a secret: %s", b)
		}
	}
	var wantS []string
	for _, c := range want {
		wantS = append(wantS, c.String())
	}
	slices.Sort(got)
	slices.Sort(wantS)
	if !slices.Equal(got, wantS) {
		t.Errorf("tap observed %d decoded calls, driver received %d; first difference:\n%s", len(got), len(wantS), firstDiff(got, wantS))
	}
	if clones == 0 || snapshotRestores == 0 {
		t.Errorf("observed %d clones from a volume and %d restores from a snapshot; sanity makes both", clones, snapshotRestores)
	}
	t.Logf("tap and driver agree on %d decoded calls (%d clones, %d snapshot restores; %d requests carried secrets)", len(got), clones, snapshotRestores, withSecrets)
}

func firstDiff(a, b []string) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return "observed: " + a[i] + "\nreceived: " + b[i]
		}
	}
	return "one list is a prefix of the other"
}

func writeSecrets(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for _, k := range []string{"CreateVolumeSecret", "DeleteVolumeSecret", "ControllerExpandVolumeSecret",
		"CreateSnapshotSecret", "DeleteSnapshotSecret", "ControllerPublishVolumeSecret"} {
		b.WriteString(k + ":\n  password: " + secretValue + "\n")
	}
	path := filepath.Join(dir, "secrets.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startDriver(t *testing.T, dir string, interceptor grpc.UnaryServerInterceptor) *csidriver.Driver {
	t.Helper()
	d, err := csidriver.Start(csidriver.Config{
		Endpoint:    "unix://" + filepath.Join(dir, "csi.sock"),
		StateDir:    filepath.Join(dir, "state"),
		Interceptor: interceptor,
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
