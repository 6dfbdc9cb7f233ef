package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Killing and restarting csi-clone-sidecar the way it happens in the LINSTOR
// controller pod: the container is SIGKILLed (OOM, node pressure), the
// kubernetes-csi sidecars that dialled its socket exit on their own when the
// connection drops, and the kubelet starts every exited container again with
// the same arguments. The driver keeps running throughout.

const sidecarName = "csi-clone-sidecar"

// terminationLog is where csi-lib-utils writes "Lost connection to CSI
// driver, exiting" before exiting. In a pod the kubelet mounts it per
// container; here it would be the host's /dev, so KillSidecar removes it if
// the exits it waited for created it.
const terminationLog = "/dev/termination-log"

// KillSidecar sends SIGKILL to csi-clone-sidecar and waits until it has
// exited and so have the kubernetes-csi sidecars connected to its socket.
// Those with a call in flight exit on their own at once; an idle one notices
// only at its next call (gRPC redials lazily) and would exit then, so after
// a grace period it is stopped, to be started afresh by RestartSidecar
// rather than die later. Nothing of the sidecar is cleaned up, as after a
// real SIGKILL: its socket file stays.
func (c *Cluster) KillSidecar() error {
	if c.opts.NoSidecar {
		return errors.New("kill csi-clone-sidecar: none runs in this cluster (Options.NoSidecar)")
	}
	c.mu.Lock()
	sc := c.procs[sidecarName]
	c.mu.Unlock()
	clients := c.csiClients()
	if sc == nil {
		return errors.New("kill csi-clone-sidecar: it was never started")
	}
	if done, err := sc.exited(); done {
		return fmt.Errorf("kill csi-clone-sidecar: it had already exited (%v); log: %s", err, sc.log)
	}
	_, statErr := os.Lstat(terminationLog)
	hadTerminationLog := statErr == nil
	if err := sc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill csi-clone-sidecar: %w", err)
	}
	errs := []error{waitExited(sc, 10*time.Second)}
	errs = append(errs, c.dropClients("csi-clone-sidecar SIGKILLed", clients, hadTerminationLog))
	return errors.Join(errs...)
}

// dropClients waits until the kubernetes-csi sidecars in clients have
// exited after their connection dropped, and stops those that were idle
// and so did not notice (see KillSidecar). It removes the termination log
// their exits wrote unless one was there before.
func (c *Cluster) dropClients(what string, clients []*proc, hadTerminationLog bool) error {
	var errs []error
	var exited, stopped []string
	for _, p := range clients {
		if waitExited(p, clientExitGrace) == nil {
			exited = append(exited, p.name)
			continue
		}
		stopped = append(stopped, p.name)
		errs = append(errs, p.stop(5*time.Second))
	}
	c.logf("cluster: %s; exited on connection loss: %v; idle, stopped: %v", what, exited, stopped)
	if !hadTerminationLog {
		errs = append(errs, removeTerminationLog())
	}
	return errors.Join(errs...)
}

// csiClients are the kubernetes-csi sidecar processes of csiSidecarNames
// started so far.
func (c *Cluster) csiClients() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	clients := make([]*proc, 0, len(csiSidecarNames))
	for _, n := range csiSidecarNames {
		if p := c.procs[n]; p != nil {
			clients = append(clients, p)
		}
	}
	return clients
}

// clientExitGrace is how long a CSI sidecar gets to notice the lost
// connection by itself.
const clientExitGrace = 3 * time.Second

// FreezeSidecar stops csi-clone-sidecar with SIGSTOP: it holds its
// connections but does nothing, so a test can pick the exact moment of a
// KillSidecar (say, after the relay forwarded an answer and before the
// sidecar recorded it). A frozen process dies of SIGKILL as any other.
func (c *Cluster) FreezeSidecar() error {
	c.mu.Lock()
	sc := c.procs[sidecarName]
	c.mu.Unlock()
	if sc == nil || c.opts.NoSidecar {
		return errors.New("freeze csi-clone-sidecar: none runs in this cluster")
	}
	if err := sc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("freeze csi-clone-sidecar: %w", err)
	}
	return nil
}

// waitExited waits until p has exited.
func waitExited(p *proc, timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s (pid %d) still running after %s; log: %s", p.name, p.cmd.Process.Pid, timeout, p.log)
	}
}

// removeTerminationLog removes the file the exiting CSI sidecars wrote, and
// only if it holds their message.
func removeTerminationLog() error {
	b, err := os.ReadFile(terminationLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(b, []byte("Lost connection to CSI driver")) {
		return fmt.Errorf("%s appeared with unexpected content %q; left in place", terminationLog, b)
	}
	return os.Remove(terminationLog)
}

// RestartSidecar starts csi-clone-sidecar again with the arguments and
// environment it was started with (same socket, metrics endpoint,
// observations log), waits until its socket accepts connections, then starts
// the kubernetes-csi sidecars again: driver, relay, then its clients, the
// order bringUp follows. Each component's log goes on in the same file. Call
// it after KillSidecar.
func (c *Cluster) RestartSidecar() error {
	if err := c.restart(sidecarName); err != nil {
		return err
	}
	if err := c.waitSocket(sidecarName, c.SidecarSocket, 30*time.Second); err != nil {
		return err
	}
	return c.restartClients()
}

// restartClients starts the kubernetes-csi sidecars again after they exited
// (or were stopped) because the socket they dial went away.
func (c *Cluster) restartClients() error {
	for _, n := range csiSidecarNames {
		if err := c.restart(n); err != nil {
			return err
		}
	}
	// As at the first start: they dial at once and exit if they cannot.
	time.Sleep(500 * time.Millisecond)
	return c.Failed()
}

// restart starts an exited component again in place of its old process, so
// that teardown and Failed see the new one. Refused while the old one runs
// or once the cluster is stopping.
func (c *Cluster) restart(name string) error {
	// Held throughout, so that Stop cannot miss the new process.
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.procs[name]
	switch {
	case old == nil:
		return fmt.Errorf("restart %s: it was never started", name)
	case len(c.order) == 0:
		return fmt.Errorf("restart %s: the cluster is stopping", name)
	}
	if done, _ := old.exited(); !done {
		return fmt.Errorf("restart %s: pid %d is still running", name, old.cmd.Process.Pid)
	}
	// old.cmd.Env is the full environment it had; later entries win.
	p, err := startProc(c.logDir, name, old.cmd.Env, old.cmd.Path, old.cmd.Args[1:]...)
	if err != nil {
		return err
	}
	c.procs[name] = p
	c.logf("cluster: %s restarted (pid %d, was %d)", name, p.cmd.Process.Pid, old.cmd.Process.Pid)
	return nil
}

// Pid is the process id of a running component (e.g. "csi-clone-sidecar"),
// 0 when it is not running.
func (c *Cluster) Pid(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[name]; p != nil && p.cmd.Process != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// LogPath is the log file of a component.
func (c *Cluster) LogPath(name string) string { return filepath.Join(c.logDir, name+".log") }
