package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SidecarReplica is one csi-clone-sidecar process of the stack.
//
// The model of Options.SidecarReplicas > 1: a CSI controller Deployment with
// that many pods, each with the driver, the kubernetes-csi sidecars and
// csi-clone-sidecar. The kubernetes-csi sidecars elect a leader per sidecar
// kind, so only one pod's provisioner, resizer and snapshotter make CSI
// calls; the others wait for their leases and call nothing. Here replica 0
// is the pod whose kubernetes-csi sidecars hold those leases (they dial its
// socket, as in a single-replica stack), and every further replica is a
// standby pod's csi-clone-sidecar: its own socket (dialled by nothing), its
// own metrics endpoint and observations log, the same driver, kubeconfig and
// flags, and its own hostname (a private UTS namespace), which is its
// leader-election identity as a pod's hostname is. All replicas campaign for
// the verdict Lease; which one holds it is independent of which one relays,
// as in a cluster.
type SidecarReplica struct {
	// Name is the component name (its log is Dir/logs/<Name>.log).
	Name string
	// Identity is the replica's hostname: its leader-election identity.
	Identity string
	// Socket is its --listen-address, Metrics its --http-endpoint,
	// ObservationsLog its --observations-log.
	Socket, Metrics, ObservationsLog string
}

// LeaseName is the Lease the replicas' verdict engines are elected with,
// in NamespaceCSI.
const LeaseName = "csi-clone-sidecar"

// setReplica records replica i.
func (c *Cluster) setReplica(i int, r SidecarReplica) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.Replicas) <= i {
		c.Replicas = append(c.Replicas, SidecarReplica{})
	}
	c.Replicas[i] = r
}

// replica returns the replica named name, or nil.
func (c *Cluster) replica(name string) *SidecarReplica {
	return c.findReplica(func(r SidecarReplica) bool { return r.Name == name })
}

// findReplica returns a copy of the first replica match accepts, or nil.
func (c *Cluster) findReplica(match func(SidecarReplica) bool) *SidecarReplica {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.Replicas {
		if match(r) {
			return &r
		}
	}
	return nil
}

// startStandbys starts replicas 1 … SidecarReplicas-1.
func (c *Cluster) startStandbys() error {
	if c.opts.NoSidecar {
		return nil
	}
	bins, err := buildBinaries()
	if err != nil {
		return err
	}
	for i := 1; i < c.opts.SidecarReplicas; i++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		r := SidecarReplica{
			Name:            sidecarName + "-" + strconv.Itoa(i),
			Socket:          filepath.Join(c.Dir, "csi", "standby-"+strconv.Itoa(i)+".sock"),
			Metrics:         "127.0.0.1:" + strconv.Itoa(port),
			ObservationsLog: filepath.Join(c.Dir, "observations-"+strconv.Itoa(i)+".jsonl"),
		}
		r.Identity = r.Name
		c.setReplica(i, r)
		// unshare execs sh, which execs the sidecar: one pid throughout, so
		// a SIGKILL reaches the sidecar itself.
		args := append([]string{"--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, r.Identity,
			c.sidecarBinary(bins)}, c.sidecarArgs(r)...)
		if _, err := c.start(r.Name, c.sidecarEnv(), "unshare", args...); err != nil {
			return err
		}
		c.onStop(func() error { return removeIfSocket(r.Socket) })
		if err := c.waitSocket(r.Name, r.Socket, 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// LeaderIdentity is the holder of the verdict Lease now ("" if none).
func (c *Cluster) LeaderIdentity(ctx context.Context) (string, error) {
	l, err := c.Client.CoordinationV1().Leases(NamespaceCSI).Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// ReplicaByIdentity returns the replica with that identity, or nil.
func (c *Cluster) ReplicaByIdentity(identity string) *SidecarReplica {
	return c.findReplica(func(r SidecarReplica) bool { return r.Identity == identity })
}

// KillReplica SIGKILLs one csi-clone-sidecar replica. For replica 0 it is
// KillSidecar (its kubernetes-csi sidecars exit with it); a standby has no
// clients.
func (c *Cluster) KillReplica(name string) error {
	if name == sidecarName {
		return c.KillSidecar()
	}
	c.mu.Lock()
	p := c.procs[name]
	c.mu.Unlock()
	if p == nil || c.replica(name) == nil {
		return fmt.Errorf("kill %s: no such replica", name)
	}
	if done, err := p.exited(); done {
		return fmt.Errorf("kill %s: it had already exited (%v); log: %s", name, err, p.log)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	if err := waitExited(p, 10*time.Second); err != nil {
		return err
	}
	c.logf("cluster: %s SIGKILLed", name)
	return nil
}

// RestartReplica starts a killed replica again, as the kubelet would
// (RestartSidecar for replica 0), and waits for its socket.
func (c *Cluster) RestartReplica(name string) error {
	if name == sidecarName {
		return c.RestartSidecar()
	}
	r := c.replica(name)
	if r == nil {
		return errors.New("restart " + name + ": no such replica")
	}
	if err := c.restart(name); err != nil {
		return err
	}
	return c.waitSocket(name, r.Socket, 30*time.Second)
}

// PIDOf is the process id of a running component (0 if it is not running).
func (c *Cluster) PIDOf(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[name]
	if p == nil {
		return 0
	}
	if done, _ := p.exited(); done {
		return 0
	}
	return p.cmd.Process.Pid
}
