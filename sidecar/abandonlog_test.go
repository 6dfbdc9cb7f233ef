package sidecar

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/test/syncbuf"
)

// TestAbandonedConnectionsAreLoggedAtMostOncePerInterval: a client that
// keeps opening connections the tap cannot follow (here: not HTTP/2) must
// not get one Info line each; every abandoned connection is still counted
// (csi_clone_tap_connections_abandoned_total), and the next line says how
// many were not logged.
func TestAbandonedConnectionsAreLoggedAtMostOncePerInterval(t *testing.T) {
	rec := &abandonCounter{byReason: map[string]*atomic.Int32{AbandonNotHTTP2: new(atomic.Int32)}}
	tap := NewTap(nil, rec, 8)
	defer tap.Close()
	var now atomic.Int64
	var out syncbuf.Buffer
	tap.abandonLog.now = func() time.Time { return time.Unix(now.Load(), 0) }
	tap.abandonLog.logger = slog.New(slog.NewTextHandler(&out, nil))
	notHTTP2 := func() {
		tc := tap.NewConn()
		tc.FromClient().Feed([]byte("GET / HTTP/1.1\r\n\r\n"), time.Now())
		tc.Close()
	}

	for range 100 {
		notHTTP2()
	}
	lines := logLines(&out)
	if len(lines) != 1 || !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[0], "reason="+AbandonNotHTTP2) || strings.Contains(lines[0], "suppressed") {
		t.Fatalf("after 100 abandoned connections in one interval, log = %q; want one info line with the reason", lines)
	}
	if n := rec.byReason[AbandonNotHTTP2].Load(); n != 100 {
		t.Fatalf("connections counted as abandoned for %s: %d, want all 100", AbandonNotHTTP2, n)
	}
	now.Add(int64(abandonLogInterval / time.Second))
	notHTTP2()
	if lines = logLines(&out); len(lines) != 2 || !strings.Contains(lines[1], "suppressed=99") {
		t.Fatalf("an interval later, log = %q; want a second line counting the 99 suppressed", lines)
	}
}

// abandonCounter counts the abandoned connections of the one reason the
// test provokes.
type abandonCounter struct {
	noRecorder
	byReason map[string]*atomic.Int32
}

func (r *abandonCounter) ConnectionAbandoned(reason string) {
	if n := r.byReason[reason]; n != nil {
		n.Add(1)
	}
}
