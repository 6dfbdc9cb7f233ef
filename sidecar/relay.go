package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one relay: where the CSI sidecars connect, where the
// driver listens, and who gets to see the traffic.
type Config struct {
	// ListenPath is the unix socket the kubernetes-csi sidecars connect to.
	ListenPath string
	// SocketMode is the permission of ListenPath (0660 when zero). The socket
	// has it from the moment ListenPath names it.
	SocketMode os.FileMode
	// DriverPath is the CSI driver's unix socket.
	DriverPath string
	// DialTimeout bounds each connection attempt to the driver, and the check
	// whether a socket left at ListenPath is still in use (1s when zero).
	DialTimeout time.Duration
	// CloseTimeout bounds how long Close waits for the relayed connections
	// to end and the queued observations to reach Observer (10s when zero);
	// what is still queued then is lost, and Close says so.
	CloseTimeout time.Duration
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
	cfg         Config
	listener    *net.UnixListener
	socket      os.FileInfo // what listenSocket put at ListenPath
	tap         *Tap
	unreachable *logThrottle

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	accepted chan struct{} // closed and replaced at every accepted connection
	wg       sync.WaitGroup

	closeOnce sync.Once
	closing   chan struct{} // closed when Close starts
	closed    chan struct{} // closed when Close has finished
	closeErr  error
}

// NewRelay listens on cfg.ListenPath, replacing a stale socket left by a
// previous run but refusing to remove a live socket or anything that is not
// a socket.
func NewRelay(cfg Config) (*Relay, error) {
	if cfg.ListenPath == "" || cfg.DriverPath == "" {
		return nil, errors.New("relay needs both a listen path and a driver path")
	}
	if cfg.ListenPath == cfg.DriverPath {
		return nil, fmt.Errorf("listen path and driver path are the same (%s): the relay would dial itself", cfg.ListenPath)
	}
	cfg = withDefaults(cfg)
	l, own, err := listenSocket(cfg.ListenPath, cfg.SocketMode, cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, listener: l, socket: own, unreachable: newLogThrottle(10 * time.Second),
		conns: map[net.Conn]struct{}{}, accepted: make(chan struct{}),
		closing: make(chan struct{}), closed: make(chan struct{})}
	if cfg.Tap {
		r.tap = NewTap(cfg.Observer, cfg.Recorder, cfg.QueueSize)
	}
	return r, nil
}

func withDefaults(cfg Config) Config {
	if cfg.SocketMode == 0 {
		cfg.SocketMode = 0o660
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = time.Second
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = 10 * time.Second
	}
	return cfg
}

// Serve accepts connections until ctx is done or Close is called, and
// returns once Close has finished: the queued observations were delivered
// (nil) or Close gave up on them (its error). A failing accept (out of file
// descriptors, an aborted connection) is retried after a pause that doubles
// from 5ms to 1s, as net/http does: it never ends the relay.
func (r *Relay) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	var pause time.Duration
	for {
		conn, err := r.listener.AcceptUnix()
		if err != nil {
			if r.isClosing() {
				<-r.closed
				return r.closeErr
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			slog.Warn("Accept failed; retrying", "listen", r.cfg.ListenPath, "err", err, "retryIn", pause)
			r.sleep(pause)
			continue
		}
		pause = 0
		if !r.admit(conn) {
			conn.Close()
			continue // closing: the next accept fails
		}
		go func() {
			defer r.wg.Done()
			defer r.untrack(conn)
			r.handle(conn)
		}()
	}
}

// sleep pauses for d or until Close starts.
func (r *Relay) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.closing:
	}
}

// Close stops accepting, closes every relayed connection (clients see the
// same connection loss a driver restart would cause), removes the socket if
// it is still ours and waits, at most Config.CloseTimeout, for the tap to
// deliver what it already decoded. Every call waits for that first one.
func (r *Relay) Close() error {
	r.closeOnce.Do(r.shutdown)
	return r.closeErr
}

func (r *Relay) shutdown() {
	defer close(r.closed)
	r.mu.Lock()
	close(r.closing)
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.closeErr = errors.Join(r.listener.Close(), removeOwnSocket(r.cfg.ListenPath, r.socket), r.drain())
}

// drain waits for the connections' goroutines and then the tap's queue.
func (r *Relay) drain() error {
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		r.wg.Wait()
		if r.tap != nil {
			r.tap.Close()
		}
	}()
	t := time.NewTimer(r.cfg.CloseTimeout)
	defer t.Stop()
	select {
	case <-drained:
		return nil
	case <-t.C:
		return fmt.Errorf("relay on %s: connections or queued observations still pending after %v; given up", r.cfg.ListenPath, r.cfg.CloseTimeout)
	}
}

func (r *Relay) isClosing() bool {
	select {
	case <-r.closing:
		return true
	default:
		return false
	}
}

// admit tracks an accepted client connection and counts it in r.wg, under
// the same lock Close takes, so that no connection starts after Close began
// waiting.
func (r *Relay) admit(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.trackLocked(c) {
		return false
	}
	r.wg.Add(1)
	close(r.accepted)
	r.accepted = make(chan struct{})
	return true
}

// track adds a driver connection for Close to close.
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trackLocked(c)
}

func (r *Relay) trackLocked(c net.Conn) bool {
	if r.isClosing() {
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

// CheckListener reports whether the relay serves its socket: it dials
// ListenPath and waits until the Serve loop accepts a connection. A
// successful connect alone would prove little: the kernel completes it into
// the listen backlog even while the loop is stuck or gone. The accept it
// sees may be another client's, which proves the loop runs just as well.
//
// The check's connection is bound to an abstract address of this process
// (selfCheckAddr), by which handle knows it and closes it without dialling
// the driver: paired like a client's, a check against a hung driver would
// leave two descriptors and a goroutine behind per probe.
func (r *Relay) CheckListener(ctx context.Context) error {
	r.mu.Lock()
	accepted := r.accepted
	r.mu.Unlock()
	d := net.Dialer{LocalAddr: &net.UnixAddr{Name: selfCheckAddr(), Net: "unix"}}
	c, err := d.DialContext(ctx, "unix", r.cfg.ListenPath)
	if err != nil {
		return fmt.Errorf("relay socket %s does not accept connections: %w", r.cfg.ListenPath, err)
	}
	defer c.Close()
	select {
	case <-accepted:
		return nil
	case <-r.closing:
		return fmt.Errorf("relay on %s is closed", r.cfg.ListenPath)
	case <-ctx.Done():
		return fmt.Errorf("relay on %s did not accept a connection: %w", r.cfg.ListenPath, ctx.Err())
	}
}

// selfCheckPrefix starts the abstract address of every health check's
// connection in this process. Abstract addresses live in the network
// namespace, so the pid keeps another process's from being taken for ours;
// the sequence keeps concurrent checks (of one relay or of several) apart.
var (
	selfCheckPrefix = fmt.Sprintf("@csi-clone-sidecar-check/%d/", os.Getpid())
	selfCheckSeq    atomic.Uint64
)

func selfCheckAddr() string {
	return selfCheckPrefix + strconv.FormatUint(selfCheckSeq.Add(1), 10)
}

// isSelfCheck tells whether an accepted connection is CheckListener's.
func isSelfCheck(c *net.UnixConn) bool {
	a, ok := c.RemoteAddr().(*net.UnixAddr)
	return ok && strings.HasPrefix(a.Name, selfCheckPrefix)
}

// handle pairs one client connection with one driver connection.
func (r *Relay) handle(client *net.UnixConn) {
	defer client.Close()
	if isSelfCheck(client) {
		return // accepted is what the check waits for; admit signalled it
	}
	d, err := net.DialTimeout("unix", r.cfg.DriverPath, r.cfg.DialTimeout)
	if err != nil {
		// The client would have got "connection refused" from the driver's
		// socket; closing its connection is the nearest equivalent.
		r.unreachable.Info("Driver unreachable, closing client connection", "driver", r.cfg.DriverPath, "err", err)
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

// byteSink sees the bytes relayed in one direction. A pump puts each read
// in line with feedRead before forwarding it and hands the turn back to
// parseAfter once forwarded; neither waits for anything. Feed is both at
// once, for a caller without a relay buffer; it does not keep p.
type byteSink interface {
	Feed(p []byte, at time.Time)
	feedRead(r *relayRead, n int, at time.Time) turn
	parseAfter(turn)
}

type discard struct{}

func (discard) Feed([]byte, time.Time)                   {}
func (discard) feedRead(*relayRead, int, time.Time) turn { return turn{} }
func (discard) parseAfter(turn)                          {}

// relayRead is a buffer one pump read into. The pump forwards from it and
// the tap's parser may parse from it meanwhile (both only read it); it goes
// back to the pool when the last of them releases it, never before.
type relayRead struct {
	b    []byte
	refs atomic.Int32
}

var readPool = sync.Pool{New: func() any { return &relayRead{b: make([]byte, relayBufferBytes)} }}

func newRelayRead() *relayRead {
	r := readPool.Get().(*relayRead)
	r.refs.Store(1)
	return r
}

func (r *relayRead) hold() { r.refs.Add(1) }

func (r *relayRead) release() {
	if r.refs.Add(-1) == 0 {
		readPool.Put(r)
	}
}

// pump copies src to dst until src ends. A clean end of src is passed on as a
// half-close of dst, so either side can finish sending and still read the
// other's reply; an error closes both, as a reset would.
func pump(dst, src *net.UnixConn, sink byteSink) {
	for {
		r := newRelayRead()
		n, err := src.Read(r.b)
		if n > 0 {
			// In line before forwarding: the tap must have the request
			// before the driver can answer it, and the reply before the
			// client can react. Parsed after forwarding, and even when the
			// peer was already gone.
			t := sink.feedRead(r, n, time.Now())
			_, werr := dst.Write(r.b[:n])
			sink.parseAfter(t)
			if werr != nil {
				r.release()
				src.Close()
				dst.Close()
				return
			}
		}
		r.release()
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
