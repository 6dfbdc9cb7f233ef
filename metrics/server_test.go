package metrics

import (
	"context"
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
