package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// HealthCheck reports whether a part of the sidecar is healthy.
type HealthCheck func() error

// Endpoint is what the HTTP endpoint serves besides /healthz.
type Endpoint struct {
	Addr, MetricsPath string
	// Pprof adds Go's profiles under /debug/pprof/ (--enable-pprof, as the
	// kubernetes-csi sidecars name it); off by default, since a heap or CPU
	// profile of the process costs the data path time.
	Pprof bool
}

// Serve runs the HTTP endpoint until ctx is done: metrics and /healthz,
// which fails while any check fails. Listening errors are returned at once
// so a bad --http-endpoint fails start-up.
func Serve(ctx context.Context, e Endpoint, m *Metrics, checks ...HealthCheck) error {
	addr := e.Addr
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on --http-endpoint %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(e.MetricsPath, promhttp.HandlerFor(m.Gatherer(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		for _, check := range checks {
			if err := check(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
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
