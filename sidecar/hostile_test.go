package sidecar_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/cozystack/csi-clone-sidecar/metrics"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/rawh2"
)

func startMetricsRelay(t *testing.T) (relaySock string, m *metrics.Metrics) {
	t.Helper()
	dir := t.TempDir()
	relaySock, driverSock := filepath.Join(dir, "relay.sock"), filepath.Join(dir, "driver.sock")
	startDriverProcess(t, driverSock, filepath.Join(dir, "marker"))
	m = metrics.New()
	r, err := sidecar.NewRelay(sidecar.Config{ListenPath: relaySock, DriverPath: driverSock, Tap: true, Recorder: m, Observer: newCollector()})
	if err != nil {
		t.Fatal(err)
	}
	go r.Serve(context.Background())
	t.Cleanup(func() { r.Close() })
	return relaySock, m
}

// A :path that is not UTF-8, from a client that hangs up before the answer,
// used to reach a metric label at connection close and panic the process.
// Whatever the path, the relay keeps serving and labels stay in the closed
// set of CSI methods.
func TestHostilePathsNeitherCrashNorGrowLabels(t *testing.T) {
	relaySock, m := startMetricsRelay(t)
	paths := []string{"\xff\xfe/csi.v1.Controller/CreateVolume", "/csi.v1.Controller/\xc3\x28"}
	for i := range 200 {
		paths = append(paths, fmt.Sprintf("/attacker.Service/Method%d", i))
	}
	for _, p := range paths {
		b, err := rawh2.RequestHeaders(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := rawh2.SendAndHangUp(relaySock, b); err != nil {
			t.Fatal(err)
		}
	}
	client := dialController(t, relaySock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "after"}); err != nil {
		t.Fatalf("relay unusable after hostile paths: %v", err)
	}
	waitFor(t, func() bool { return methodLabels(t, m)[sidecar.MethodUnknown] })
	allowed := sidecar.Methods()
	for label := range methodLabels(t, m) {
		if !slices.Contains(allowed, label) {
			t.Errorf("method_name %q is not a CSI method or %q", label, sidecar.MethodUnknown)
		}
	}
}

// methodLabels returns the method_name values of csi_sidecar_operations_seconds.
func methodLabels(t *testing.T, m *metrics.Metrics) map[string]bool {
	t.Helper()
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		if f.GetName() != "csi_sidecar_operations_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "method_name" {
					got[l.GetValue()] = true
				}
			}
		}
	}
	return got
}
