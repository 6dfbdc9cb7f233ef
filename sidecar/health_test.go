package sidecar_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// probeServer answers Probe as told: ready, not ready, or never.
type probeServer struct {
	csi.UnimplementedIdentityServer
	notReady, hang atomic.Bool
}

func (p *probeServer) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if p.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(!p.notReady.Load())}, nil
}

// checkFailsWith waits until check fails with an error containing every part.
func checkFailsWith(t *testing.T, check func() error, parts ...string) {
	t.Helper()
	var last error
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if last = check(); last != nil && containsAll(last.Error(), parts) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("check = %v; want an error containing %q", last, parts)
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func TestDriverProbe(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "driver.sock")
	probe := sidecar.NewDriverProbe(sock, 500*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go probe.Run(ctx)

	// No driver at all: unhealthy, saying where and why.
	checkFailsWith(t, probe.Check, "driver at "+sock+" has not answered Probe yet", "no such file or directory")
	if st := probe.Status(); st.Ready || !st.LastReady.IsZero() || st.Probes[sidecar.ProbeFailed] == 0 || st.Probes[sidecar.ProbeReady] != 0 {
		t.Errorf("no driver: status %+v; want not ready, never ready, failed probes only", st)
	}

	srv := &probeServer{}
	serveGRPC(t, sock, func(s *grpc.Server) { csi.RegisterIdentityServer(s, srv) })
	waitFor(t, func() bool { return probe.Check() == nil })
	up := probe.Status()
	if !up.Ready || up.LastReady.IsZero() || up.Probes[sidecar.ProbeReady] == 0 {
		t.Errorf("driver up: status %+v; want ready with a ready probe counted", up)
	}

	srv.notReady.Store(true)
	checkFailsWith(t, probe.Check, "did not answer Probe since", "not ready")
	if st := probe.Status(); st.Ready || st.Probes[sidecar.ProbeNotReady] == 0 || st.LastReady.Before(up.LastReady) {
		t.Errorf("driver not ready: status %+v; want a not_ready probe counted and the last ready time kept", st)
	}
	srv.notReady.Store(false)
	waitFor(t, func() bool { return probe.Check() == nil })

	// Accepting connections but not answering: unhealthy once a probe's
	// interval ran out.
	srv.hang.Store(true)
	failedBefore := probe.Status().Probes[sidecar.ProbeFailed]
	checkFailsWith(t, probe.Check, "did not answer Probe since", "DeadlineExceeded")
	if st := probe.Status(); st.Ready || st.Probes[sidecar.ProbeFailed] <= failedBefore {
		t.Errorf("driver hung: status %+v; want not ready with the unanswered probe counted as failed", st)
	}
	// Every outcome of the closed set is counted, zero or not.
	if st := probe.Status(); len(st.Probes) != len(sidecar.ProbeOutcomes) {
		t.Errorf("status counts %v; want exactly the outcomes %v", st.Probes, sidecar.ProbeOutcomes)
	}
}

// TestCheckListenerNeedsTheServeLoop: the kernel completes a connect to a
// listening socket whether or not anyone accepts, so the check must wait
// for the Serve loop itself.
func TestCheckListenerNeedsTheServeLoop(t *testing.T) {
	dir := t.TempDir()
	r, err := sidecar.NewRelay(relayAt(filepath.Join(dir, "relay.sock")))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	check := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return r.CheckListener(ctx)
	}
	if err := check(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not accept") {
		t.Errorf("check before Serve = %v; want not accepted", err)
	}
	go r.Serve(context.Background())
	if err := check(10 * time.Second); err != nil {
		t.Errorf("check while serving = %v", err)
	}
	r.Close()
	if err := check(10 * time.Second); err == nil {
		t.Error("check after Close passed")
	}
}

// TestCheckListenerCostsNoDriverConnection: a frozen driver (its socket
// listens, nobody accepts or answers) must cost the health checks nothing.
// Were each check's connection paired with a driver connection like any
// client's, the reply direction would wait on the frozen driver for ever:
// two descriptors and a goroutine per probe (300 probes: 600 descriptors).
func TestCheckListenerCostsNoDriverConnection(t *testing.T) {
	dir := t.TempDir()
	cfg := relayAt(filepath.Join(dir, "relay.sock"))
	frozen, err := net.Listen("unix", cfg.DriverPath)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	r, err := sidecar.NewRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go r.Serve(context.Background())
	defer r.Close()
	check := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.CheckListener(ctx); err != nil {
			t.Fatalf("check: %v", err)
		}
	}
	check() // the first check and the goroutines Serve starts once
	fdsBefore, goroutinesBefore := openFDs(t), runtime.NumGoroutine()
	for range 300 {
		check()
	}
	// A handled check returns a moment after the accept it waited for.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && (openFDs(t) > fdsBefore+4 || runtime.NumGoroutine() > goroutinesBefore+4) {
		time.Sleep(10 * time.Millisecond)
	}
	if fds, g := openFDs(t), runtime.NumGoroutine(); fds > fdsBefore+4 || g > goroutinesBefore+4 {
		t.Errorf("after 300 checks against a frozen driver: %d descriptors (was %d), %d goroutines (was %d); want both flat", fds, fdsBefore, g, goroutinesBefore)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
