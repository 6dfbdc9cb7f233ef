// Package cluster brings up a real Kubernetes storage stack on loopback for
// the e2e tests and the demo: etcd, kube-apiserver, kube-controller-manager,
// our test CSI driver behind the csi-clone-sidecar relay, the real
// kubernetes-csi sidecars, snapshot-controller and CDI's cdi-controller, plus
// a kubelet-free emulation of the few pods CDI waits on. Everything runs as
// child processes of the test, in a private network namespace (see Main), with
// all state in one directory per test. csi-clone-sidecar runs with exactly
// the RBAC deploy/rbac ships, as the ServiceAccount it binds (see rbac.go).
//
// Real: every Kubernetes, CSI and CDI component, the CSI calls and their
// results, the volume data (files of the test driver). Emulated, because no
// kubelet or container runtime exists here: only the status of the pods CDI
// creates and waits on (see emulator), never CDI's own objects. Not run: the
// cdi-apiserver webhooks (the harness mints the clone token they would add,
// and sets the fields their defaulting would). kube-scheduler runs, with one
// Node kept Ready, only when a StorageClass is WaitForFirstConsumer.
//
// Tests use it as
//
//	func TestMain(m *testing.M) { cluster.Main(m) } // private network namespace
//
//	c := cluster.Start(t, cluster.Options{})       // torn down by t.Cleanup
//	c.CreateGolden(ctx, cluster.Golden{...})
//	c.CreateWorkerDisk(ctx, cluster.Worker{...})
//	c.WaitDataVolumePhase(ctx, ns, name, cdiv1.Succeeded, time.Minute)
//	obs, _ := c.Observations()                     // the sidecar's tap
package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Clone strategies, as CDI spells them.
const (
	StrategyCSIClone = "csi-clone"
	StrategySnapshot = "snapshot"
	StrategyCopy     = "copy"
)

// Options shape one cluster. The zero value is a usable default: two pools,
// csi-clone forced through the CDI resource.
type Options struct {
	// Dir is the state directory. Empty: a fresh one under $CSI_CLONE_E2E_DIR
	// (default <os temp dir>/csi-clone-e2e). It is removed on a clean stop
	// and kept, with every component's log, when the test failed or
	// $CSI_CLONE_E2E_KEEP is set.
	Dir string
	// DriverName is the CSI driver name (default DefaultDriverName).
	DriverName string
	// StorageClasses are created for the driver, one pool each. Default:
	// DefaultStorageClasses().
	StorageClasses []StorageClass
	// CloneStrategy selects how CDI clones: StrategyCSIClone (default) is
	// forced through the CDI resource's spec.cloneStrategyOverride, as on a
	// cluster whose StorageProfile does not know the driver; StrategySnapshot
	// is set through each StorageProfile and a VolumeSnapshotClass is created
	// for the driver; StrategyCopy forces host-assisted copies.
	CloneStrategy string
	// NoSidecar points the kubernetes-csi sidecars at the driver directly,
	// without the csi-clone-sidecar relay in between.
	NoSidecar bool
	// SidecarArgs are extra flags for csi-clone-sidecar.
	SidecarArgs []string
	// SidecarEnv is extra environment for every csi-clone-sidecar replica,
	// e.g. what the downward API gives it in deploy/ (MEMORY_LIMIT).
	SidecarEnv []string
	// SidecarBinary, if set, is the csi-clone-sidecar binary to run (e.g.
	// bin/csi-clone-sidecar as `make build` ships it) instead of a build of
	// this checkout.
	SidecarBinary string
	// DriverArgs are extra flags for the test driver (fault injection).
	DriverArgs []string
	// CSISidecarArgs are extra flags for csi-provisioner, csi-resizer and
	// csi-snapshotter, e.g. "--v=5" to have them log every CSI call.
	CSISidecarArgs []string
	// SidecarReplicas is how many csi-clone-sidecar processes run (0 or 1:
	// one). See SidecarReplica for what the others model.
	SidecarReplicas int
	// ExtraControllers are kube-controller-manager controllers to run besides
	// the storage ones, e.g. "garbage-collector-controller".
	ExtraControllers []string
	// NoCDI skips cdi-controller and the emulation (storage-only tests).
	NoCDI bool
	// ControlPlaneOnly starts only etcd, kube-apiserver,
	// kube-controller-manager and the base objects (CRDs, namespaces,
	// CSIDriver): enough to check manifests against the API server.
	ControlPlaneOnly bool
	// SidecarAdmin gives csi-clone-sidecar the admin kubeconfig. By default
	// it runs as in production: as the ServiceAccount that deploy/rbac binds,
	// with exactly the RBAC deploy/rbac ships, through a token of that
	// ServiceAccount (see sidecarIdentity).
	SidecarAdmin bool
	// SidecarRBAC, if set, edits the RBAC objects rendered from deploy/rbac
	// before they are applied (e.g. drop a rule to show it is needed).
	SidecarRBAC RBACEdit
	// Scheduler runs kube-scheduler and a Node without a
	// WaitForFirstConsumer class (which always runs them): for a test that
	// needs the scheduler's words on a pod.
	Scheduler bool
	// SchedulerBindTimeout, if set, is the scheduler's VolumeBinding
	// bindTimeoutSeconds (600 s by default): how long a pod waits in
	// PreBind for its claims to bind before FailedScheduling says so.
	SchedulerBindTimeout time.Duration
	// Logf receives progress lines (default: discarded; Start uses t.Logf).
	Logf func(format string, args ...any)
}

// Cluster is one running stack. Its exported fields are valid after Start.
type Cluster struct {
	// Dir is the state directory; logs are in Dir/logs.
	Dir string
	// Host is the API server URL, Kubeconfig an admin kubeconfig for it.
	Host, Kubeconfig string
	// Config is the admin REST config; Client and Dynamic are built from it.
	Config  *rest.Config
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// DriverName is the CSI driver's name, DriverSocket its endpoint, and
	// SidecarSocket the csi-clone-sidecar relay's listen socket (the one the
	// kubernetes-csi sidecars use; equal to DriverSocket with NoSidecar).
	DriverName, DriverSocket, SidecarSocket string
	// SidecarMetrics is the sidecar's --http-endpoint (host:port).
	SidecarMetrics string
	// ObservationsLog is the sidecar's --observations-log file.
	ObservationsLog string
	// SidecarKubeconfig is the kubeconfig csi-clone-sidecar runs with: its
	// ServiceAccount's token, or Kubeconfig with Options.SidecarAdmin.
	SidecarKubeconfig string
	// AuditLog holds kube-apiserver's audit events of the requests made by
	// ServiceAccounts of NamespaceCSI (the sidecar's), one JSON per line.
	AuditLog string
	// Factory is the loopback HTTP server golden images are imported from.
	Factory *Factory
	// Replicas are the csi-clone-sidecar processes; Replicas[0] is the one
	// above (SidecarSocket, SidecarMetrics, ObservationsLog). Empty with
	// Options.NoSidecar.
	Replicas []SidecarReplica

	opts     Options
	pki      *pki
	logDir   string
	mu       sync.Mutex
	procs    map[string]*proc
	order    []string // start order; stopped in reverse
	cleanups []func() error
	logf     func(format string, args ...any)
	tempDir  bool // Dir was made by us and may be removed
	emu      *emulator
	cdiKey   string // private key cdi-controller verifies clone tokens with
	rbacEdit RBACEdit

	// otherDrivers maps each driver StartOtherDriver started to its state
	// directory (otherdriver.go).
	otherDrivers map[string]string
}

// Start brings up a cluster for t and registers its teardown with t.Cleanup.
// Any failure to start is fatal to t, with the path of the logs.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	c, err := New(opts)
	if c != nil {
		t.Cleanup(func() {
			if err := c.Stop(t.Failed()); err != nil {
				t.Errorf("cluster teardown: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	return c
}

// New brings up a cluster. On error the returned Cluster (if not nil) still
// holds what was started: call Stop on it.
func New(opts Options) (*Cluster, error) {
	if err := CheckNetNS(); err != nil {
		return nil, err
	}
	opts = withDefaults(opts)
	c := &Cluster{opts: opts, procs: map[string]*proc{}, logf: opts.Logf, DriverName: opts.DriverName, rbacEdit: opts.SidecarRBAC}
	if err := c.makeDir(); err != nil {
		return nil, err
	}
	c.Factory = newFactory()
	c.onStop(func() error { c.Factory.Close(); return nil })
	start := time.Now()
	if err := c.bringUp(); err != nil {
		return c, fmt.Errorf("%w (logs in %s)", err, c.logDir)
	}
	c.logf("cluster: up in %s, state in %s", time.Since(start).Round(time.Millisecond), c.Dir)
	return c, nil
}

// NewStateDir makes a fresh state directory for a stack run outside a test
// (the demo, benchmarks), where the e2e tests keep theirs
// ($CSI_CLONE_E2E_DIR, default <os temp dir>/csi-clone-e2e), so that the
// leak check sees its sockets; pass it as Options.Dir.
func NewStateDir(prefix string) (string, error) {
	base := os.Getenv("CSI_CLONE_E2E_DIR")
	if base == "" {
		base = filepath.Join(os.TempDir(), "csi-clone-e2e")
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(base, prefix)
}

func withDefaults(o Options) Options {
	if o.DriverName == "" {
		o.DriverName = DefaultDriverName
	}
	if o.StorageClasses == nil {
		o.StorageClasses = DefaultStorageClasses()
	}
	if o.CloneStrategy == "" {
		o.CloneStrategy = StrategyCSIClone
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

func (c *Cluster) makeDir() error {
	if c.opts.Dir != "" {
		c.Dir = c.opts.Dir
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return err
		}
	} else {
		base := os.Getenv("CSI_CLONE_E2E_DIR")
		if base == "" {
			base = filepath.Join(os.TempDir(), "csi-clone-e2e")
		}
		if err := os.MkdirAll(base, 0o755); err != nil {
			return err
		}
		d, err := os.MkdirTemp(base, time.Now().Format("150405-"))
		if err != nil {
			return err
		}
		c.Dir, c.tempDir = d, true
	}
	noteStateDir(c.Dir)
	c.logDir = filepath.Join(c.Dir, "logs")
	return os.MkdirAll(c.logDir, 0o755)
}

// bringUp starts the components in dependency order. The CSI sidecars come
// after the relay, which comes after the driver: each exits when the socket
// it dials goes away.
func (c *Cluster) bringUp() error {
	steps := []struct {
		name string
		fn   func() error
		base bool // part of a ControlPlaneOnly start
	}{
		{"control plane", c.startControlPlane, true},
		{"CRDs and objects", c.installBase, true},
		{"CSI driver", c.startDriver, false},
		{"csi-clone-sidecar", c.startSidecar, false},
		{"csi-clone-sidecar standby replicas", c.startStandbys, false},
		{"CSI sidecars", c.startCSISidecars, false},
		{"storage classes", c.installStorage, false},
		{"kube-scheduler", c.startScheduler, false},
		{"CDI", c.startCDI, false},
	}
	for _, s := range steps {
		if c.opts.ControlPlaneOnly && !s.base {
			continue
		}
		t0 := time.Now()
		if err := s.fn(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		c.logf("cluster: %s ready in %s", s.name, time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// start launches one component and records it for teardown.
func (c *Cluster) start(name string, env []string, bin string, args ...string) (*proc, error) {
	p, err := startProc(c.logDir, name, env, bin, args...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs[name] = p
	c.order = append(c.order, name)
	c.mu.Unlock()
	return p, nil
}

// StartComponent starts one more process as part of the stack, e.g. a
// Prometheus that scrapes the sidecar: its output goes to
// Dir/logs/<name>.log, Failed reports its death, and teardown stops it (and
// its process group) before what was started earlier.
func (c *Cluster) StartComponent(name, bin string, args ...string) error {
	c.mu.Lock()
	_, dup := c.procs[name]
	c.mu.Unlock()
	if dup {
		return fmt.Errorf("a component named %s is already running", name)
	}
	_, err := c.start(name, nil, bin, args...)
	return err
}

// onStop registers a cleanup run after every process has stopped.
func (c *Cluster) onStop(fn func() error) {
	c.mu.Lock()
	c.cleanups = append(c.cleanups, fn)
	c.mu.Unlock()
}

// Failed returns an error naming every component that exited on its own.
func (c *Cluster) Failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, name := range c.order {
		if err := c.procs[name].failure(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stop ends every process the cluster started (in reverse start order, each
// with its process group), runs the registered cleanups (mounts, sockets) and
// removes the state directory unless keep is true, in which case it says
// where the logs are.
func (c *Cluster) Stop(keep bool) error {
	c.mu.Lock()
	order := append([]string(nil), c.order...)
	cleanups := c.cleanups
	c.order, c.cleanups = nil, nil
	emu := c.emu
	c.emu = nil
	c.mu.Unlock()

	t0 := time.Now()
	if emu != nil {
		emu.stop()
	}

	var errs []error
	var died []string
	for i := len(order) - 1; i >= 0; i-- {
		p := c.procs[order[i]]
		if done, err := p.exited(); done {
			died = append(died, fmt.Sprintf("%s (%v)", p.name, err))
		}
		if err := p.stop(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(cleanups) - 1; i >= 0; i-- {
		if err := cleanups[i](); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.raceReports(order); err != nil {
		errs = append(errs, err)
	}
	c.logf("cluster: stopped in %s", time.Since(t0).Round(time.Millisecond))
	if len(died) > 0 {
		sort.Strings(died)
		c.logf("cluster: components that had exited before teardown: %s", strings.Join(died, ", "))
	}
	if keep || len(errs) > 0 || os.Getenv("CSI_CLONE_E2E_KEEP") != "" {
		c.logf("cluster: state and component logs kept in %s", c.logDir)
		return errors.Join(errs...)
	}
	if c.tempDir {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
