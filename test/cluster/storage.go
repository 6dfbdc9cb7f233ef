package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// DefaultDriverName is LINSTOR's CSI driver name: the test driver answers to
// it so that CDI treats it as it treats LINSTOR (its StorageProfile knows the
// access modes but not a clone strategy).
const DefaultDriverName = "linstor.csi.linbit.com"

// StorageClass is one StorageClass of the test driver, backed by one pool.
type StorageClass struct {
	Name string
	// Pool is the driver's storage pool (default: Name).
	Pool string
	// NodeLocal makes the pool node-local (clones into it from another pool
	// hang or fail, as on LINSTOR).
	NodeLocal bool
	// NoExpansion sets allowVolumeExpansion: false; CDI then copies
	// host-assisted when a clone target is larger than its source.
	NoExpansion bool
	// Default and DefaultVirt set the Kubernetes / KubeVirt default-class
	// annotations.
	Default, DefaultVirt bool
	// WaitForFirstConsumer makes the class bind a claim only once a pod
	// that mounts it is scheduled (CreateConsumer); such a cluster runs
	// kube-scheduler and has one Node (see startScheduler). Otherwise the
	// class binds Immediate.
	WaitForFirstConsumer bool
}

// DefaultStorageClasses are "replicated" (the goldens' class, expandable) and
// "replicated-fixed" (same driver, no expansion: a larger clone target there
// is copied host-assisted).
func DefaultStorageClasses() []StorageClass {
	return []StorageClass{
		{Name: "replicated", Pool: "replicated"},
		{Name: "replicated-fixed", Pool: "fixed", NoExpansion: true},
	}
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// repoRoot is the checkout this package was compiled from.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// RaceEnv, set to 1, makes the harness build the sidecar with the race
// detector (make e2e, soak and cdidiff set it: the concurrency only a whole
// stack exercises, leader handover, restarts, two replicas, a SIGTERM
// drain, is race-checked there), and teardown fails on a race report in
// any sidecar's log.
const RaceEnv = "CSI_CLONE_E2E_RACE"

// raceBuild tells whether the sidecar is built with -race.
func raceBuild() bool { return os.Getenv(RaceEnv) == "1" }

// buildBinaries builds the sidecar (with -race when RaceEnv says so) and
// the test driver from this checkout, once per process, into a temporary
// directory that RemoveBuilds deletes.
func buildBinaries() (string, error) {
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "csi-clone-e2e-bin-")
		if buildErr != nil {
			return
		}
		sidecar := []string{"./cmd/csi-clone-sidecar"}
		if raceBuild() {
			sidecar = append([]string{"-race"}, sidecar...)
		}
		for _, pkgs := range [][]string{sidecar, {"./test/cmd/csi-test-driver"}} {
			if buildErr = goBuild(buildDir, pkgs...); buildErr != nil {
				return
			}
		}
	})
	return buildDir, buildErr
}

// goBuild runs go build of the repository's packages into dir.
func goBuild(dir string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, args...)...)
	cmd.Dir = repoRoot()
	// No network in the test's namespace: fail at once, never wait on a proxy.
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	if slices.Contains(args, "-race") {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=1") // the race detector's runtime is cgo
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %v\n%s", strings.Join(args, " "), cmd.Dir, err, out)
	}
	return nil
}

// RemoveBuilds deletes what buildBinaries built; Main calls it at exit.
func RemoveBuilds() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// startDriver starts the test CSI driver with one pool per StorageClass.
func (c *Cluster) startDriver() error {
	bins, err := buildBinaries()
	if err != nil {
		return err
	}
	sock := filepath.Join(c.Dir, "csi", "driver.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return err
	}
	c.DriverSocket = sock
	args := []string{
		"--endpoint=unix://" + sock,
		"--state-dir=" + filepath.Join(c.Dir, "driver"),
		"--drivername=" + c.DriverName,
	}
	for _, sc := range c.opts.StorageClasses {
		p := sc.pool()
		if sc.NodeLocal {
			p += ":node-local"
		}
		args = append(args, "--pool="+p)
	}
	args = append(args, c.opts.DriverArgs...)
	if _, err := c.start("csi-test-driver", nil, filepath.Join(bins, "csi-test-driver"), args...); err != nil {
		return err
	}
	c.onStop(func() error { return removeIfSocket(sock) })
	return c.waitSocket("csi-test-driver", sock, 30*time.Second)
}

// object is the StorageClass of a driver's pool. A node-local pool says so
// the way LINSTOR's node-local classes do (allowRemoteVolumeAccess "false").
func (sc StorageClass) object(driver string) *storagev1.StorageClass {
	obj := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: sc.Name, Annotations: map[string]string{}},
		Provisioner:          driver,
		Parameters:           map[string]string{driver + "/storagePool": sc.pool()},
		ReclaimPolicy:        ptr(corev1.PersistentVolumeReclaimDelete),
		AllowVolumeExpansion: ptr(!sc.NoExpansion),
		VolumeBindingMode:    ptr(storagev1.VolumeBindingImmediate),
	}
	if sc.WaitForFirstConsumer {
		obj.VolumeBindingMode = ptr(storagev1.VolumeBindingWaitForFirstConsumer)
	}
	if sc.NodeLocal {
		obj.Parameters[driver+"/allowRemoteVolumeAccess"] = "false"
	}
	if sc.Default {
		obj.Annotations["storageclass.kubernetes.io/is-default-class"] = "true"
	}
	if sc.DefaultVirt {
		obj.Annotations["storageclass.kubevirt.io/is-default-virt-class"] = "true"
	}
	return obj
}

func (sc StorageClass) pool() string {
	if sc.Pool != "" {
		return sc.Pool
	}
	return sc.Name
}

// startSidecar starts csi-clone-sidecar between the driver's socket and the
// socket the kubernetes-csi sidecars dial.
func (c *Cluster) startSidecar() error {
	if c.opts.NoSidecar {
		c.SidecarSocket = c.DriverSocket
		return nil
	}
	bins, err := buildBinaries()
	if err != nil {
		return err
	}
	if c.SidecarMetrics == "" { // a restart keeps the endpoint
		port, err := freePort()
		if err != nil {
			return err
		}
		c.SidecarMetrics = "127.0.0.1:" + strconv.Itoa(port)
	}
	if c.SidecarKubeconfig, err = c.sidecarIdentity(c.rbacEdit); err != nil {
		return err
	}
	c.SidecarSocket = filepath.Join(c.Dir, "csi", "csi.sock")
	c.ObservationsLog = filepath.Join(c.Dir, "observations.jsonl")
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	r := SidecarReplica{Name: sidecarName, Identity: host, Socket: c.SidecarSocket, Metrics: c.SidecarMetrics, ObservationsLog: c.ObservationsLog}
	c.setReplica(0, r)
	if _, err := c.start(sidecarName, c.sidecarEnv(), c.sidecarBinary(bins), c.sidecarArgs(r)...); err != nil {
		return err
	}
	c.onStop(func() error { return removeIfSocket(c.SidecarSocket) })
	return c.waitSocket(sidecarName, c.SidecarSocket, 30*time.Second)
}

// sidecarArgs are the flags of one csi-clone-sidecar replica.
func (c *Cluster) sidecarArgs(r SidecarReplica) []string {
	args := append([]string{
		"--csi-address=" + c.DriverSocket,
		"--listen-address=" + r.Socket,
		"--http-endpoint=" + r.Metrics,
		"--kubeconfig=" + c.SidecarKubeconfig,
		"--observations-log=" + r.ObservationsLog,
	}, c.opts.SidecarArgs...)
	// Debugging aid: extra flags for every test's sidecar, e.g. "--v=5".
	return append(args, strings.Fields(os.Getenv("CSI_CLONE_E2E_SIDECAR_ARGS"))...)
}

// sidecarEnv is the environment of every csi-clone-sidecar replica.
func (c *Cluster) sidecarEnv() []string {
	return append([]string{"POD_NAMESPACE=" + NamespaceCSI}, c.opts.SidecarEnv...)
}

// UseSidecarBinary makes the next StartSidecar run the binary at path (a
// benchmark comparing two builds on one stack).
func (c *Cluster) UseSidecarBinary(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opts.SidecarBinary = path
}

// sidecarBinary is the csi-clone-sidecar binary every replica runs: the
// one built for the tests, or Options.SidecarBinary.
func (c *Cluster) sidecarBinary(bins string) string {
	if c.opts.SidecarBinary != "" {
		return c.opts.SidecarBinary
	}
	return filepath.Join(bins, "csi-clone-sidecar")
}

// csiSidecarNames are the kubernetes-csi sidecars that dial the relay.
var csiSidecarNames = []string{"csi-provisioner", "csi-resizer", "csi-snapshotter"}

// startCSISidecars starts the real external-provisioner, -resizer,
// -snapshotter (all on the relay's socket) and snapshot-controller.
func (c *Cluster) startCSISidecars() error {
	if err := c.startDialers(); err != nil {
		return err
	}
	bin, err := tools.Bin("snapshot-controller")
	if err != nil {
		return err
	}
	_, err = c.start("snapshot-controller", nil, bin, "--kubeconfig="+c.Kubeconfig, "--leader-election=false", "--v=4")
	return err
}

// startDialers starts the kubernetes-csi sidecars of csiSidecarNames.
func (c *Cluster) startDialers() error {
	common := []string{"--csi-address=" + c.SidecarSocket, "--kubeconfig=" + c.Kubeconfig, "--leader-election=false", "--v=4"}
	common = append(common, c.opts.CSISidecarArgs...)
	extra := map[string][]string{
		// piraeus runs the provisioner with --extra-create-metadata; no
		// topology here (at most one node, see startScheduler).
		"csi-provisioner": {"--extra-create-metadata", "--immediate-topology=false", "--timeout=30s"},
		"csi-resizer":     {"--timeout=30s", "--handle-volume-inuse-error=false"},
		"csi-snapshotter": {"--timeout=30s"},
	}
	for _, name := range csiSidecarNames {
		bin, err := tools.Bin(name)
		if err != nil {
			return err
		}
		if _, err := c.start(name, nil, bin, append(append([]string(nil), common...), extra[name]...)...); err != nil {
			return err
		}
	}
	// They dial the socket at start and exit if they cannot: give them a
	// moment and report an early death with its log.
	time.Sleep(500 * time.Millisecond)
	return c.Failed()
}

// installStorage creates one StorageClass per configured class and, for the
// snapshot strategy, a VolumeSnapshotClass of the driver.
func (c *Cluster) installStorage() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sc := range c.opts.StorageClasses {
		if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, sc.object(c.DriverName), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("StorageClass %s: %w", sc.Name, err)
		}
	}
	if c.opts.CloneStrategy != StrategySnapshot {
		return nil
	}
	vsc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion":     "snapshot.storage.k8s.io/v1",
		"kind":           "VolumeSnapshotClass",
		"metadata":       map[string]any{"name": "snapshots"},
		"driver":         c.DriverName,
		"deletionPolicy": "Delete",
	}}
	_, err := c.Dynamic.Resource(VolumeSnapshotClassGVR).Create(ctx, vsc, metav1.CreateOptions{})
	return err
}

// VolumeSnapshotClassGVR names the VolumeSnapshotClass resource.
var VolumeSnapshotClassGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}

// VolumeSnapshotGVR is the external-snapshotter's VolumeSnapshot.
var VolumeSnapshotGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}

// waitSocket waits until something accepts connections on a unix socket.
func (c *Cluster) waitSocket(name, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if err := c.procs[name].failure(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no listener on %s after %s: %v; log: %s", name, path, timeout, err, c.procs[name].log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeIfSocket removes a unix socket file a component left behind.
func removeIfSocket(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s is not a socket; left in place", path)
	}
	return os.Remove(path)
}

// SnapshotClaim snapshots claim ns/claim as VolumeSnapshot ns/name of
// VolumeSnapshotClass class (created for the driver if missing), with the
// given annotations, waits until it is ready to use and returns its
// content's snapshot handle.
func (c *Cluster) SnapshotClaim(ctx context.Context, ns, name, claim, class string, annotations map[string]any) (string, error) {
	vsc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": class}, "driver": c.DriverName, "deletionPolicy": "Delete"}}
	if _, err := c.Dynamic.Resource(VolumeSnapshotClassGVR).Create(ctx, vsc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("VolumeSnapshotClass %s: %w", class, err)
	}
	meta := map[string]any{"name": name, "namespace": ns}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	vs := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": meta, "spec": map[string]any{"volumeSnapshotClassName": class, "source": map[string]any{"persistentVolumeClaimName": claim}}}}
	if _, err := c.Dynamic.Resource(VolumeSnapshotGVR).Namespace(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("VolumeSnapshot %s/%s: %w", ns, name, err)
	}
	var content string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Dynamic.Resource(VolumeSnapshotGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse")
		content, _, _ = unstructured.NestedString(got.Object, "status", "boundVolumeSnapshotContentName")
		return ready && content != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("VolumeSnapshot %s/%s never became ready: %w", ns, name, err)
	}
	got, err := c.Dynamic.Resource(volumeSnapshotContentGVR).Get(ctx, content, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	handle, _, _ := unstructured.NestedString(got.Object, "status", "snapshotHandle")
	return handle, nil
}

var volumeSnapshotContentGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
