package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/test/syncbuf"
)

// lines splits what a test logger wrote into lines.
func logLines(b *syncbuf.Buffer) []string {
	return strings.Split(strings.TrimSpace(b.String()), "\n")
}

// dialUntilClosed connects to the relay and waits until it hangs up, which
// it does only after logging why.
func dialUntilClosed(t *testing.T, sock string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatal(err)
	}
}

func TestDriverUnreachableIsLoggedAtInfoAtMostOncePerInterval(t *testing.T) {
	dir := t.TempDir()
	driver := filepath.Join(dir, "driver.sock")
	r, err := NewRelay(Config{ListenPath: filepath.Join(dir, "relay.sock"), DriverPath: driver})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var now atomic.Int64
	var out syncbuf.Buffer
	r.unreachable.now = func() time.Time { return time.Unix(now.Load(), 0) }
	r.unreachable.logger = slog.New(slog.NewTextHandler(&out, nil))
	go r.Serve(context.Background())

	for range 3 {
		dialUntilClosed(t, r.cfg.ListenPath)
	}
	lines := logLines(&out)
	if len(lines) != 1 || !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[0], "driver="+driver) ||
		!strings.Contains(lines[0], "no such file or directory") || strings.Contains(lines[0], "suppressed") {
		t.Fatalf("after 3 failed dials in one interval, log = %q; want one info line with the driver and the error", lines)
	}
	now.Add(9)
	dialUntilClosed(t, r.cfg.ListenPath)
	if lines = logLines(&out); len(lines) != 1 {
		t.Fatalf("9s later, log = %q; want still one line", lines)
	}
	now.Add(1)
	dialUntilClosed(t, r.cfg.ListenPath)
	if lines = logLines(&out); len(lines) != 2 || !strings.Contains(lines[1], "suppressed=3") {
		t.Fatalf("10s later, log = %q; want a second line counting the 3 suppressed", lines)
	}
}

func TestDriverProbeGoesStaleWithoutAnAnswer(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start
	p := NewDriverProbe("/nonexistent/driver.sock", time.Minute)
	p.now = func() time.Time { return now }
	p.lastOK = start
	if err := p.Check(); err != nil {
		t.Fatalf("right after an answer: %v", err)
	}
	// A probe that is still waiting for its answer may take one interval
	// after the next one started.
	now = start.Add(2 * time.Minute)
	if err := p.Check(); err != nil {
		t.Fatalf("two intervals after an answer: %v", err)
	}
	now = now.Add(time.Second)
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "did not answer Probe since "+start.Format(time.RFC3339)) {
		t.Fatalf("more than two intervals after an answer: %v", err)
	}
}
