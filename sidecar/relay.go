package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// Config describes one relay: where the CSI sidecars connect, where the
// driver listens, and who gets to see the traffic.
type Config struct {
	// ListenPath is the unix socket the kubernetes-csi sidecars connect to.
	ListenPath string
	// SocketMode is the permission of ListenPath (0660 when zero).
	SocketMode os.FileMode
	// DriverPath is the CSI driver's unix socket.
	DriverPath string
	// DialTimeout bounds each connection attempt to the driver (1s when zero).
	DialTimeout time.Duration
	// Observer receives decoded calls; nil means the tap only feeds Recorder.
	Observer Observer
	// Recorder receives per-call timings and tap health; nil means none.
	Recorder Recorder
	// QueueSize bounds the observations waiting for Observer (1024 when zero).
	QueueSize int
	// Tap switches the tap on. A relay without a tap copies bytes only.
	Tap bool
}

// Relay accepts connections on Config.ListenPath and pairs each with a new
// connection to the driver, copying bytes both ways unchanged. It never
// answers a CSI call itself: when the driver is unreachable the client's
// connection is closed, exactly as if it had dialled the driver directly.
type Relay struct {
	cfg      Config
	listener *net.UnixListener
	tap      *Tap

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewRelay listens on cfg.ListenPath, replacing a stale socket left by a
// previous run but refusing to remove anything that is not a socket.
func NewRelay(cfg Config) (*Relay, error) {
	if cfg.ListenPath == "" || cfg.DriverPath == "" {
		return nil, errors.New("relay needs both a listen path and a driver path")
	}
	if cfg.ListenPath == cfg.DriverPath {
		return nil, fmt.Errorf("listen path and driver path are the same (%s): the relay would dial itself", cfg.ListenPath)
	}
	if cfg.SocketMode == 0 {
		cfg.SocketMode = 0o660
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = time.Second
	}
	if err := removeStaleSocket(cfg.ListenPath); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.ListenPath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %s: %w", cfg.ListenPath, err)
	}
	if err := os.Chmod(cfg.ListenPath, cfg.SocketMode); err != nil {
		l.Close()
		return nil, fmt.Errorf("failed to set mode %o on %s: %w", cfg.SocketMode, cfg.ListenPath, err)
	}
	r := &Relay{cfg: cfg, listener: l, conns: map[net.Conn]struct{}{}}
	if cfg.Tap {
		r.tap = NewTap(cfg.Observer, cfg.Recorder, cfg.QueueSize)
	}
	return r, nil
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to inspect %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("failed to remove stale socket %s: %w", path, err)
	}
	return nil
}

// Serve accepts connections until ctx is done or Close is called. It returns
// nil after an orderly stop.
func (r *Relay) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	for {
		conn, err := r.listener.AcceptUnix()
		if err != nil {
			if r.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept on %s: %w", r.cfg.ListenPath, err)
		}
		if !r.track(conn) {
			conn.Close()
			return nil
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.untrack(conn)
			r.handle(conn)
		}()
	}
}

// Close stops accepting, closes every relayed connection (clients see the
// same connection loss a driver restart would cause), removes the socket and
// waits for the tap to deliver what it already decoded.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.listener.Close() // also unlinks the socket file
	r.wg.Wait()
	if r.tap != nil {
		r.tap.Close()
	}
	return err
}

func (r *Relay) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.conns, c)
}

// handle pairs one client connection with one driver connection.
func (r *Relay) handle(client *net.UnixConn) {
	defer client.Close()
	d, err := net.DialTimeout("unix", r.cfg.DriverPath, r.cfg.DialTimeout)
	if err != nil {
		// The client would have got "connection refused" from the driver's
		// socket; closing its connection is the nearest equivalent.
		slog.Debug("Driver unreachable, closing client connection", "driver", r.cfg.DriverPath, "err", err)
		return
	}
	driver := d.(*net.UnixConn)
	if !r.track(driver) {
		driver.Close()
		return
	}
	defer r.untrack(driver)
	defer driver.Close()

	var toDriver, toClient byteSink = discard{}, discard{}
	if r.tap != nil {
		tc := r.tap.NewConn()
		defer tc.Close()
		toDriver, toClient = tc.FromClient(), tc.FromDriver()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pump(client, driver, toClient)
	}()
	pump(driver, client, toDriver)
	<-done
}

// byteSink sees the bytes relayed in one direction. Feed must not block and
// must not keep p.
type byteSink interface {
	Feed(p []byte, at time.Time)
}

type discard struct{}

func (discard) Feed([]byte, time.Time) {}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// pump copies src to dst until src ends. A clean end of src is passed on as a
// half-close of dst, so either side can finish sending and still read the
// other's reply; an error closes both, as a reset would.
func pump(dst, src *net.UnixConn, sink byteSink) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, err := src.Read(buf)
		if n > 0 {
			at := time.Now()
			_, werr := dst.Write(buf[:n])
			// Only after forwarding: the tap parses what is complete and
			// returns, it never waits for bytes or for an observer. It sees
			// what was sent even when the peer was already gone.
			sink.Feed(buf[:n], at)
			if werr != nil {
				src.Close()
				dst.Close()
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				dst.CloseWrite()
				return
			}
			src.Close()
			dst.Close()
			return
		}
	}
}
