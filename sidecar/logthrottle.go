package sidecar

import (
	"log/slog"
	"sync"
	"time"
)

// logThrottle writes at most one info line per interval for a condition
// that can repeat on every connection (a driver that is down is dialled by
// every client retry); the next line written says how many it suppressed.
type logThrottle struct {
	interval time.Duration
	now      func() time.Time
	logger   *slog.Logger // slog.Default() when nil, looked up per line

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// abandonLogInterval spaces the lines about connections the tap gave up
// on; every one of them is counted in
// csi_clone_tap_connections_abandoned_total all the same.
const abandonLogInterval = 10 * time.Second

func newLogThrottle(interval time.Duration) *logThrottle {
	return &logThrottle{interval: interval, now: time.Now}
}

// Info logs msg with args unless a line was logged less than an interval ago.
func (l *logThrottle) Info(msg string, args ...any) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.interval {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	logger := l.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Info(msg, args...)
}
