package cluster

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Faults beyond a killed csi-clone-sidecar (restart.go), as they happen to a
// real control plane: kube-apiserver down for a while, the CSI driver
// container crashing under load, and the kubelet starting again whatever
// exited meanwhile. Each keeps the component's arguments, environment and
// log file.

const (
	apiServerName = "kube-apiserver"
	driverName    = "csi-test-driver"
)

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 5 s).
// Until StartAPIServer every client gets "connection refused"; what gives up
// on that and exits, Failed reports and RestartExited starts again.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	p := c.procs[apiServerName]
	c.mu.Unlock()
	if p == nil {
		return errors.New("stop kube-apiserver: it was never started")
	}
	if err := p.stop(5 * time.Second); err != nil {
		return err
	}
	c.logf("cluster: kube-apiserver stopped")
	return nil
}

// StartAPIServer starts kube-apiserver again on the same port, etcd and
// certificates, and waits for /readyz.
func (c *Cluster) StartAPIServer() error {
	if err := c.restart(apiServerName); err != nil {
		return err
	}
	return c.waitHTTP(apiServerName, c.Host+"/readyz", c.apiTLS(), 90*time.Second)
}

// KillDriver SIGKILLs the test CSI driver, as a crashed driver container:
// calls in flight die with it (its volumes stay on disk). The kubernetes-csi
// sidecars exit when their connection drops (through the relay, which closes
// a client's connection when its driver side ends); idle ones are stopped,
// as KillSidecar does. csi-clone-sidecar keeps running: it only relays.
func (c *Cluster) KillDriver() error {
	c.mu.Lock()
	d := c.procs[driverName]
	c.mu.Unlock()
	if d == nil {
		return errors.New("kill csi-test-driver: it was never started")
	}
	_, statErr := os.Lstat(terminationLog)
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill csi-test-driver: %w", err)
	}
	if err := waitExited(d, 10*time.Second); err != nil {
		return err
	}
	return c.dropClients("csi-test-driver SIGKILLed", c.csiClients(), statErr == nil)
}

// RestartDriver starts the test driver again on its socket and state
// directory, then the kubernetes-csi sidecars. Call it after KillDriver.
func (c *Cluster) RestartDriver() error {
	if err := c.restart(driverName); err != nil {
		return err
	}
	if err := c.waitSocket(driverName, c.DriverSocket, 30*time.Second); err != nil {
		return err
	}
	return c.restartClients()
}

// RestartExited does what the kubelet does for containers that exited:
// starts each again, in start order, with its arguments. It returns the
// names it restarted. Components that wait on a socket or an endpoint are
// waited for as at the first start.
func (c *Cluster) RestartExited() ([]string, error) {
	c.mu.Lock()
	var names []string
	for _, n := range c.order {
		if done, _ := c.procs[n].exited(); done {
			names = append(names, n)
		}
	}
	c.mu.Unlock()
	for _, n := range names {
		if err := c.restart(n); err != nil {
			return names, err
		}
		var err error
		switch n {
		case apiServerName:
			err = c.waitHTTP(n, c.Host+"/readyz", c.apiTLS(), 90*time.Second)
		case driverName:
			err = c.waitSocket(n, c.DriverSocket, 30*time.Second)
		default:
			if r := c.replica(n); r != nil {
				err = c.waitSocket(n, r.Socket, 30*time.Second)
			}
		}
		if err != nil {
			return names, err
		}
	}
	return names, nil
}

// FreezeDriver stops the test CSI driver with SIGSTOP: a driver that hangs
// (its LINSTOR controller unreachable, a stuck call) rather than one that
// crashed. Its socket still accepts connections (the kernel completes them)
// and every connection already open stays open, but nothing is answered
// until ThawDriver.
func (c *Cluster) FreezeDriver() error { return c.signalDriver(syscall.SIGSTOP, "frozen") }

// ThawDriver lets a frozen driver run again (SIGCONT): it answers what
// waited on its connections, on the same connections.
func (c *Cluster) ThawDriver() error { return c.signalDriver(syscall.SIGCONT, "thawed") }

func (c *Cluster) signalDriver(sig syscall.Signal, what string) error {
	c.mu.Lock()
	d := c.procs[driverName]
	c.mu.Unlock()
	if d == nil {
		return errors.New("signal csi-test-driver: it was never started")
	}
	if err := d.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal csi-test-driver: %w", err)
	}
	c.logf("cluster: csi-test-driver %s", what)
	return nil
}

// TerminateSidecar stops csi-clone-sidecar the way the kubelet stops a
// container: SIGTERM (then SIGCONT, in case FreezeSidecar stopped it: the
// SIGTERM waits until then), and waits up to grace for it to exit; then,
// as KillSidecar, for the kubernetes-csi sidecars that lose their
// connection. Unlike a SIGKILL the sidecar shuts down in order.
func (c *Cluster) TerminateSidecar(grace time.Duration) error {
	c.mu.Lock()
	sc := c.procs[sidecarName]
	c.mu.Unlock()
	if sc == nil || c.opts.NoSidecar {
		return errors.New("terminate csi-clone-sidecar: none runs in this cluster")
	}
	clients := c.csiClients()
	_, statErr := os.Lstat(terminationLog)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGCONT} {
		if err := sc.cmd.Process.Signal(sig); err != nil {
			return fmt.Errorf("terminate csi-clone-sidecar: %w", err)
		}
	}
	errs := []error{waitExited(sc, grace)}
	errs = append(errs, c.dropClients("csi-clone-sidecar terminated", clients, statErr == nil))
	return errors.Join(errs...)
}
