package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The outcomes of one Probe of the driver: the closed set of
// csi_clone_driver_probes_total's result label.
const (
	// ProbeReady: the driver answered ready (or left ready unset, which the
	// CSI spec reads as ready).
	ProbeReady = "ready"
	// ProbeNotReady: the driver answered ready=false.
	ProbeNotReady = "not_ready"
	// ProbeFailed: no answer: nothing listening, an error, or none within
	// the interval.
	ProbeFailed = "failed"
)

// ProbeOutcomes lists every outcome a probe can have.
var ProbeOutcomes = []string{ProbeReady, ProbeNotReady, ProbeFailed}

var errNotReady = errors.New("driver answered Probe: not ready")

// DriverProbe asks the driver's Identity service for Probe every interval,
// straight on the driver's socket, and keeps the outcome for the readiness
// check and the metrics. It is never part of liveness: restarting the relay
// heals no driver and cuts every connection it carries.
type DriverProbe struct {
	path     string
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	lastOK  time.Time // when the driver last answered ready
	lastErr error     // the latest probe's failure; nil after a success
	counts  map[string]uint64
}

// DriverStatus is what the probe knows of the driver at one moment.
type DriverStatus struct {
	// Ready is whether Check passes.
	Ready bool
	// LastReady is when the driver last answered ready; zero if never.
	LastReady time.Time
	// Probes counts the finished probes by outcome (every ProbeOutcomes key
	// is present).
	Probes map[string]uint64
}

// NewDriverProbe returns a probe of the driver at path (a socket path, see
// SocketPath) that Run repeats every interval.
func NewDriverProbe(path string, interval time.Duration) *DriverProbe {
	counts := make(map[string]uint64, len(ProbeOutcomes))
	for _, o := range ProbeOutcomes {
		counts[o] = 0
	}
	return &DriverProbe{path: path, interval: interval, now: time.Now, counts: counts}
}

// Run probes at once and then every interval until ctx is done. Each probe
// may take up to the interval.
func (p *DriverProbe) Run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.probeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *DriverProbe) probeOnce(ctx context.Context) {
	probeCtx, cancel := context.WithTimeout(ctx, p.interval)
	defer cancel()
	err := probeDriver(probeCtx, p.path)
	if ctx.Err() != nil {
		return // shutting down: not the driver's outcome
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = err
	switch {
	case err == nil:
		p.lastOK = p.now()
		p.counts[ProbeReady]++
	case errors.Is(err, errNotReady):
		p.counts[ProbeNotReady]++
	default:
		p.counts[ProbeFailed]++
	}
}

// probeDriver dials afresh each time, so that a driver restart is seen at
// the next probe, not after gRPC's reconnect backoff.
func probeDriver(ctx context.Context, path string) error {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return err
	}
	// The spec lets a driver leave ready unset, which means ready.
	if r := resp.GetReady(); r != nil && !r.GetValue() {
		return errNotReady
	}
	return nil
}

// Check returns nil while the driver's latest Probe succeeded and that was
// at most two intervals ago: one interval between probes plus one for a
// probe that is still waiting for its answer. Otherwise it says since when
// the driver has not answered, and why.
func (p *DriverProbe) Check() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checkLocked()
}

func (p *DriverProbe) checkLocked() error {
	switch {
	case p.lastOK.IsZero() && p.lastErr != nil:
		return fmt.Errorf("driver at %s has not answered Probe yet: %w", p.path, p.lastErr)
	case p.lastOK.IsZero():
		return fmt.Errorf("driver at %s has not answered Probe yet", p.path)
	case p.lastErr != nil:
		return fmt.Errorf("driver at %s did not answer Probe since %s: %w", p.path, p.lastOK.Format(time.RFC3339), p.lastErr)
	case p.now().Sub(p.lastOK) > 2*p.interval:
		return fmt.Errorf("driver at %s did not answer Probe since %s: no answer yet", p.path, p.lastOK.Format(time.RFC3339))
	}
	return nil
}

// Status returns what Check says and the probes' history, for metrics.
func (p *DriverProbe) Status() DriverStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts := make(map[string]uint64, len(p.counts))
	for o, n := range p.counts {
		counts[o] = n
	}
	return DriverStatus{Ready: p.checkLocked() == nil, LastReady: p.lastOK, Probes: counts}
}
