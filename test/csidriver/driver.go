// Package csidriver is a real CSI driver for tests that behaves like LINSTOR at
// the CSI level: volumes and snapshots are sparse files in a state directory,
// clones copy real data, storage pools are selected by a StorageClass
// parameter, and a node-local pool cannot be the target of a clone from
// another pool (it hangs or fails, as configured). Faults (delays, error codes,
// a crash after N calls) can be injected per method. It serves the Identity
// and Controller services, plus the few Node calls csi-sanity's cleanup makes.
package csidriver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

const (
	// DefaultDriverName is the name GetPluginInfo reports unless Config says otherwise.
	DefaultDriverName = "csi.clone-sidecar.test"
	// DefaultPoolName is the pool a driver gets when Config lists none.
	DefaultPoolName = "default"
	// DefaultNodeID is the node NodeGetInfo reports unless Config says otherwise.
	DefaultNodeID = "csi-test-node"
	// DefaultPoolCapacity is a pool's size when Config gives none. Volumes are
	// sparse files, so this is bookkeeping, not disk space.
	DefaultPoolCapacity int64 = 1 << 40
	// PoolParameter is the CreateVolume / GetCapacity parameter that selects a
	// pool. A key ending in "/storagePool" (LINSTOR's
	// "linstor.csi.linbit.com/storagePool") is accepted as well.
	PoolParameter = "storagePool"
	// ExitAfterStatus is the binary's exit status once --exit-after is reached.
	ExitAfterStatus = 3
)

// CloneMode says what a clone into a node-local pool from a source the pool
// does not hold does.
type CloneMode string

const (
	// CloneHang blocks until the caller's deadline or cancellation and then
	// returns DeadlineExceeded / Canceled, as LINSTOR does (cozystack#2908).
	CloneHang CloneMode = "hang"
	// CloneFail returns InvalidArgument at once with a message naming the pools.
	CloneFail CloneMode = "fail"
)

// Pool is one storage pool.
type Pool struct {
	Name string
	// NodeLocal pools hold data on one node only: they cannot be the target of
	// a clone (from a volume or a snapshot) whose source is in another pool.
	NodeLocal bool
	// CapacityBytes is the pool's size; 0 means DefaultPoolCapacity.
	CapacityBytes int64
}

// Config is everything a Driver needs. Zero values get the defaults named on
// each field.
type Config struct {
	// Endpoint is "unix:///path/to.sock", "unix:/path" or a plain path. A stale
	// socket file there is removed; any other file there is an error.
	Endpoint string
	// StateDir holds volumes/ and snapshots/ (data files and JSON metadata).
	// A driver started on an existing StateDir knows its volumes again.
	StateDir string
	// DriverName defaults to DefaultDriverName.
	DriverName string
	// NodeID defaults to DefaultNodeID; it is the only node that exists.
	NodeID string
	// Pools defaults to one pool named DefaultPoolName.
	Pools []Pool
	// DefaultPool is used when a request names no pool; defaults to Pools[0].
	DefaultPool string
	// NodeLocalClone defaults to CloneHang.
	NodeLocalClone CloneMode
	// Faults are injected on every call of the named methods.
	Faults Faults
	// Interceptor, if set, sees every call after the driver answered it:
	// tests use it to record exactly what the driver received.
	Interceptor grpc.UnaryServerInterceptor
	// OnExitAfter runs once Faults.ExitAfter calls have finished and the
	// server has stopped. The binary exits the process here; nil just stops.
	OnExitAfter func()
}

// Driver is a running test CSI driver.
type Driver struct {
	cfg        Config
	socketPath string
	pools      map[string]Pool
	store      *store
	server     *grpc.Server
	faults     *faultInjector
	done       chan struct{}
	stopOnce   sync.Once
}

// Start validates cfg, loads the state directory and serves CSI on the
// endpoint until Stop.
func Start(cfg Config) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	path, err := SocketPath(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	st, err := openStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg, socketPath: path, pools: map[string]Pool{}, store: st, done: make(chan struct{})}
	for _, p := range cfg.Pools {
		d.pools[p.Name] = p
	}
	if err := d.checkStatePools(); err != nil {
		return nil, err
	}
	d.faults = newFaultInjector(cfg.Faults, d.exitAfter)
	lis, err := listenUnix(path)
	if err != nil {
		return nil, err
	}
	chain := []grpc.UnaryServerInterceptor{d.logCall, d.faults.intercept}
	if cfg.Interceptor != nil {
		chain = append([]grpc.UnaryServerInterceptor{cfg.Interceptor}, chain...)
	}
	d.server = grpc.NewServer(grpc.ChainUnaryInterceptor(chain...))
	csi.RegisterIdentityServer(d.server, &identityServer{d: d})
	csi.RegisterControllerServer(d.server, &controllerServer{d: d})
	csi.RegisterNodeServer(d.server, &nodeServer{d: d})
	go func() {
		if err := d.server.Serve(lis); err != nil {
			klog.ErrorS(err, "CSI server stopped")
		}
	}()
	klog.InfoS("test CSI driver serving", "endpoint", d.Endpoint(), "driver", cfg.DriverName,
		"stateDir", cfg.StateDir, "pools", poolSummary(cfg.Pools), "defaultPool", cfg.DefaultPool,
		"nodeLocalClone", cfg.NodeLocalClone, "volumes", len(st.volumes), "snapshots", len(st.snapshots))
	return d, nil
}

// Endpoint is the driver's address as "unix:///path".
func (d *Driver) Endpoint() string { return "unix://" + d.socketPath }

// SocketPath is the driver's unix socket path.
func (d *Driver) SocketPath() string { return d.socketPath }

// VolumePath is the data file of a volume, for tests that write or compare
// its bytes. It does not check that the volume exists.
func (d *Driver) VolumePath(volumeID string) string { return d.store.volumeData(volumeID) }

// SnapshotPath is the data file of a snapshot.
func (d *Driver) SnapshotPath(snapshotID string) string { return d.store.snapshotData(snapshotID) }

// Done is closed once the driver has stopped (Stop, or --exit-after).
func (d *Driver) Done() <-chan struct{} { return d.done }

// Stop stops serving at once (calls in flight are cancelled) and removes the
// socket. The state directory is kept.
func (d *Driver) Stop() {
	d.stopOnce.Do(func() {
		d.server.Stop()
		_ = os.Remove(d.socketPath)
		close(d.done)
	})
}

// exitAfter stops the server gracefully, so the last call's response is
// flushed, and then runs OnExitAfter. A call that never finishes (a hanging
// clone) must not keep the driver alive, hence the bound.
func (d *Driver) exitAfter(n int) {
	klog.InfoS("exiting after the configured number of calls", "calls", n)
	stopped := make(chan struct{})
	go func() { d.server.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
	}
	d.Stop()
	if d.cfg.OnExitAfter != nil {
		d.cfg.OnExitAfter()
	}
}

// SocketPath turns an endpoint ("unix:///p", "unix:/p" or "/p") into a path.
func SocketPath(endpoint string) (string, error) {
	p := endpoint
	switch {
	case strings.HasPrefix(p, "unix://"):
		p = strings.TrimPrefix(p, "unix://")
	case strings.HasPrefix(p, "unix:"):
		p = strings.TrimPrefix(p, "unix:")
	case strings.Contains(p, "://"):
		return "", fmt.Errorf("endpoint %q: only unix sockets are supported", endpoint)
	}
	if p == "" || !filepath.IsAbs(p) {
		return "", fmt.Errorf("endpoint %q: want unix:///absolute/path.sock", endpoint)
	}
	return filepath.Clean(p), nil
}

// listenUnix removes a stale socket left by a previous run (a crashed driver
// leaves one behind) but refuses to delete anything that is not a socket.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("endpoint %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("endpoint %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("endpoint directory: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return lis, nil
}

// checkStatePools refuses a state directory holding volumes or snapshots in
// pools the configuration no longer has: they could be neither expanded nor
// accounted for.
func (d *Driver) checkStatePools() error {
	for _, v := range d.store.volumes {
		if _, ok := d.pools[v.Pool]; !ok {
			return fmt.Errorf("state directory %s holds volume %s in pool %q, which is not configured (pools: %s)",
				d.cfg.StateDir, v.ID, v.Pool, poolSummary(d.cfg.Pools))
		}
	}
	for _, sn := range d.store.snapshots {
		if _, ok := d.pools[sn.Pool]; !ok {
			return fmt.Errorf("state directory %s holds snapshot %s in pool %q, which is not configured (pools: %s)",
				d.cfg.StateDir, sn.ID, sn.Pool, poolSummary(d.cfg.Pools))
		}
	}
	return nil
}

// pool returns the pool a request's parameters select.
func (d *Driver) pool(params map[string]string) (Pool, error) {
	name := poolParameter(params)
	if name == "" {
		name = d.cfg.DefaultPool
	}
	p, ok := d.pools[name]
	if !ok {
		return Pool{}, fmt.Errorf("unknown storage pool %q (pools: %s)", name, poolSummary(d.cfg.Pools))
	}
	return p, nil
}

func poolParameter(params map[string]string) string {
	if v, ok := params[PoolParameter]; ok {
		return v
	}
	for k, v := range params {
		if strings.HasSuffix(k, "/"+PoolParameter) {
			return v
		}
	}
	return ""
}

func poolSummary(pools []Pool) string {
	var parts []string
	for _, p := range pools {
		s := p.Name
		if p.NodeLocal {
			s += ":node-local"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}
