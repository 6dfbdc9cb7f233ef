package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPprofOnlyWhenAsked: the profiles are served with --enable-pprof and
// are not found without it, next to the metrics either way.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		addr := freeAddr(t)
		if err := Serve(ctx, Endpoint{Addr: addr, MetricsPath: "/metrics", Pprof: on}, New()); err != nil {
			t.Fatal(err)
		}
		if code, _ := get(t, "http://"+addr+"/metrics"); code != http.StatusOK {
			t.Errorf("pprof %v: /metrics = %d", on, code)
		}
		code, body := get(t, "http://"+addr+"/debug/pprof/heap?debug=1")
		if on && (code != http.StatusOK || !strings.Contains(body, "heap profile")) {
			t.Errorf("with pprof: /debug/pprof/heap = %d %.80q", code, body)
		}
		if !on && code != http.StatusNotFound {
			t.Errorf("without pprof: /debug/pprof/heap = %d, want 404", code)
		}
		cancel()
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestLivenessLeavesTheDriverToReadiness: a failing readiness check (the
// driver's Probe) fails /readyz only; a failing liveness check (the relay's
// listener) fails both, since a sidecar that cannot serve is not ready
// either.
func TestLivenessLeavesTheDriverToReadiness(t *testing.T) {
	cases := []struct {
		name                    string
		live, ready             error
		healthzCode, readyzCode int
		healthzBody, readyzBody string
	}{
		{"all well", nil, nil, http.StatusOK, http.StatusOK, "ok", "ok"},
		{"driver down", nil, errors.New("driver at /csi/csi.sock did not answer Probe"), http.StatusOK, http.StatusServiceUnavailable, "ok", "did not answer Probe"},
		{"relay not accepting", errors.New("relay did not accept"), nil, http.StatusServiceUnavailable, http.StatusServiceUnavailable, "relay did not accept", "relay did not accept"},
		{"both", errors.New("relay did not accept"), errors.New("driver down"), http.StatusServiceUnavailable, http.StatusServiceUnavailable, "relay did not accept", "relay did not accept"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addr := freeAddr(t)
			e := Endpoint{Addr: addr, MetricsPath: "/metrics",
				Live:  []HealthCheck{func() error { return tc.live }},
				Ready: []HealthCheck{func() error { return tc.ready }}}
			if err := Serve(ctx, e, New()); err != nil {
				t.Fatal(err)
			}
			if code, body := get(t, "http://"+addr+"/healthz"); code != tc.healthzCode || !strings.Contains(body, tc.healthzBody) {
				t.Errorf("/healthz = %d %q; want %d with %q", code, body, tc.healthzCode, tc.healthzBody)
			}
			if code, body := get(t, "http://"+addr+"/readyz"); code != tc.readyzCode || !strings.Contains(body, tc.readyzBody) {
				t.Errorf("/readyz = %d %q; want %d with %q", code, body, tc.readyzCode, tc.readyzBody)
			}
		})
	}
}
