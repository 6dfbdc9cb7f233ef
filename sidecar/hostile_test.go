package sidecar_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/rawh2"
)

// startRecordingRelay starts a relay with the tap on in front of a driver
// process; rec receives what the tap hands to metrics. The metric families
// themselves are checked against the binary (cmd/csi-clone-sidecar's
// hostile test), so this package's test build stays free of Kubernetes.
func startRecordingRelay(t *testing.T) (relaySock string, rec *diffRecorder) {
	t.Helper()
	dir := t.TempDir()
	relaySock, driverSock := filepath.Join(dir, "relay.sock"), filepath.Join(dir, "driver.sock")
	startDriverProcess(t, driverSock, filepath.Join(dir, "marker"))
	rec = &diffRecorder{}
	r, err := sidecar.NewRelay(sidecar.Config{ListenPath: relaySock, DriverPath: driverSock, Tap: true, Recorder: rec, Observer: newCollector()})
	if err != nil {
		t.Fatal(err)
	}
	go r.Serve(context.Background())
	t.Cleanup(func() { r.Close() })
	return relaySock, rec
}

// A :path that is not UTF-8, from a client that hangs up before the answer,
// used to reach a metric label at connection close and panic the process.
// Whatever the path, the relay keeps serving and labels stay in the closed
// set of CSI methods.
func TestHostilePathsNeitherCrashNorGrowLabels(t *testing.T) {
	relaySock, rec := startRecordingRelay(t)
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
	waitFor(t, func() bool { return recordedMethods(rec)[sidecar.MethodUnknown] })
	allowed := sidecar.Methods()
	for method := range recordedMethods(rec) {
		if !slices.Contains(allowed, method) {
			t.Errorf("the tap recorded method %q, not a CSI method or %q", method, sidecar.MethodUnknown)
		}
	}
}

// recordedMethods returns the methods of the calls the tap recorded as
// finished: what becomes the method_name label.
func recordedMethods(rec *diffRecorder) map[string]bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	got := map[string]bool{}
	for _, f := range rec.finished {
		method, _, _ := strings.Cut(f, " ")
		got[method] = true
	}
	return got
}
