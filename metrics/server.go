package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// HealthCheck reports whether a part of the sidecar is healthy.
type HealthCheck func() error

// Serve runs the HTTP endpoint on addr until ctx is done: metrics at path and
// /healthz, which fails while any check fails. Listening errors are returned
// at once so a bad --http-endpoint fails start-up.
func Serve(ctx context.Context, addr, path string, m *Metrics, checks ...HealthCheck) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on --http-endpoint %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(path, promhttp.HandlerFor(m.Gatherer(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		for _, check := range checks {
			if err := check(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
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
