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

// DriverProbe asks the driver's Identity service for Probe every interval,
// straight on the driver's socket, and keeps the outcome for a health check:
// a relay in front of a driver that does not answer is of no use to anyone.
type DriverProbe struct {
	path     string
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	lastOK  time.Time // when the driver last answered ready
	lastErr error     // the latest probe's failure; nil after a success
}

// NewDriverProbe returns a probe of the driver at path (a socket path, see
// SocketPath) that Run repeats every interval.
func NewDriverProbe(path string, interval time.Duration) *DriverProbe {
	return &DriverProbe{path: path, interval: interval, now: time.Now}
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
	ctx, cancel := context.WithTimeout(ctx, p.interval)
	defer cancel()
	err := probeDriver(ctx, p.path)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = err
	if err == nil {
		p.lastOK = p.now()
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
		return errors.New("driver answered Probe: not ready")
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
