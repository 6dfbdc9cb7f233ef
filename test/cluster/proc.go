package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is one component process the harness started. Each runs in its own
// process group so that teardown can end it together with anything it forked
// (unshare's shell, for instance) without touching processes it did not start.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // exit status, valid after done
}

// startProc starts bin with args, stdout and stderr appended to
// <logDir>/<name>.log. The process dies with the test process (Pdeathsig) so
// that a killed `go test` leaves nothing behind.
func startProc(logDir, name string, env []string, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	defer f.Close()
	fmt.Fprintf(f, "### %s %s %q\n", time.Now().Format(time.RFC3339Nano), bin, args)

	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has already ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop ends the process group: SIGTERM, then SIGKILL after grace. It waits for
// the group leader; group members are killed with the leader's group.
func (p *proc) stop(grace time.Duration) error {
	if done, _ := p.exited(); done {
		// The leader is gone; still sweep its group for stragglers.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		return nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
		}
	}
	// Anything left in the group (children that ignored SIGTERM) goes too.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill group of %s: %w", p.name, err)
	}
	return nil
}

// failure describes an unexpected exit, pointing at the component's log.
func (p *proc) failure() error {
	done, err := p.exited()
	if !done {
		return nil
	}
	return fmt.Errorf("%s exited (%v); log: %s", p.name, err, p.log)
}
