package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// HealthCheck reports whether a part of the sidecar is healthy.
type HealthCheck func() error

// Endpoint is what the HTTP endpoint serves.
type Endpoint struct {
	Addr, MetricsPath string
	// Pprof adds Go's profiles under /debug/pprof/ (--enable-pprof, as the
	// kubernetes-csi sidecars name it); off by default, since a heap or CPU
	// profile of the process costs the data path time.
	Pprof bool
	// Live are the checks of /healthz, the liveness probe's endpoint: only
	// what a restart of the process can heal. Ready are what /readyz, the
	// readiness probe's, checks besides them. Kubernetes' own components
	// split /livez and /readyz the same way; /healthz keeps the name every
	// kubernetes-csi sidecar and csi-livenessprobe use for liveness.
	Live, Ready []HealthCheck
}

// Serve runs the HTTP endpoint until ctx is done: metrics, /healthz (fails
// while a Live check fails) and /readyz (fails while any check fails).
// Listening errors are returned at once so a bad --http-endpoint fails
// start-up.
func Serve(ctx context.Context, e Endpoint, m *Metrics) error {
	addr := e.Addr
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on --http-endpoint %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(e.MetricsPath, promhttp.HandlerFor(m.Gatherer(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.Handle("/healthz", healthHandler(e.Live))
	mux.Handle("/readyz", healthHandler(append(slices.Clip(e.Live), e.Ready...)))
	if e.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "HTTP endpoint stopped", "address", addr)
		}
	}()
	return nil
}

// healthHandler answers "ok" while every check passes, else 503 with the
// first failure's reason.
func healthHandler(checks []HealthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for _, check := range checks {
			if err := check(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
}
