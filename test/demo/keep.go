package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// With -keep the demo runs twice: the process `make demo` started relays the
// output of a child in a session of its own, which runs the stack. Once the
// child has printed how to reach the stack, it moves its output to a log
// file and says "detached" on a status pipe; the parent then exits 0 and the
// child keeps the stack (whose components die with it) until SIGTERM. The
// child stays in the private network namespace the parent was started in:
// the stack is reachable only through it (nsenter).

const (
	detachedEnv = "CSI_CLONE_DEMO_DETACHED"
	statusFD    = 3 // the child's end of the status pipe
	detachedMsg = "detached"
)

func isDetached() bool { return os.Getenv(detachedEnv) != "" }

// runDetached starts the child, relays its output and returns the exit code
// for `make`: 0 once the child has detached, else the child's own.
func runDetached() int {
	exe, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		fatal(err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		fatal(err)
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), detachedEnv+"=1")
	cmd.Stdout, cmd.Stderr = outW, outW
	cmd.ExtraFiles = []*os.File{statusW}
	// A session of its own: no terminal's SIGINT or SIGHUP reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	outW.Close()
	statusW.Close()
	// Until it detaches, Ctrl-C here means: stop the demo.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for range sigs {
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}()
	io.Copy(os.Stdout, outR)
	status, _ := io.ReadAll(statusR)
	if string(status) == detachedMsg {
		return 0
	}
	if err := cmd.Wait(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 1
	}
	return 0
}

// statusPipe is the child's end of the status pipe, or nil when not detached.
// main takes it before anything is started: it must not leak into the
// components the child starts, or they would hold it open and the parent
// would never learn the outcome.
var statusPipe *os.File

func takeStatusPipe() {
	if isDetached() {
		syscall.CloseOnExec(statusFD)
		statusPipe = os.NewFile(statusFD, "status")
	}
}

// handOver prints how to reach and stop the stack, writes the helper scripts,
// detaches from the parent and waits for SIGTERM (or SIGINT) to tear down.
func handOver(ctx context.Context, c *cluster.Cluster, sidecarBin string) error {
	status := statusPipe
	if status == nil {
		return fmt.Errorf("-keep: not running as the detached child")
	}
	pid := os.Getpid()
	nsenter := fmt.Sprintf("nsenter --net=/proc/%d/ns/net", pid)
	kubectl, stop := filepath.Join(c.Dir, "kubectl"), filepath.Join(c.Dir, "stop")
	kubectlBin, err := tools.Bin("kubectl") // the pinned one `make tools` built
	if err != nil {
		return err
	}
	if err := writeScripts(c, pid, nsenter, kubectlBin, kubectl, stop); err != nil {
		return err
	}
	header(fmt.Sprintf("KEEP=1: the stack stays up (pid %d), in a private network namespace: reach it through nsenter", pid))
	fmt.Printf("  state, logs:  %s  (logs/: every component; logs/demo.log: this demo from now on)\n", c.Dir)
	fmt.Printf("  kubeconfig:   %s  (server %s)\n", c.Kubeconfig, c.Host)
	fmt.Printf("  kubectl:      %s get dv,pvc -A\n", kubectl)
	fmt.Printf("                (= %s %s --kubeconfig %s get dv,pvc -A)\n", nsenter, kubectlBin, c.Kubeconfig)
	fmt.Printf("  report:       %s %s report --kubeconfig %s\n", nsenter, sidecarBin, c.Kubeconfig)
	fmt.Printf("  metrics:      %s curl -s http://%s/metrics\n", nsenter, c.SidecarMetrics)
	fmt.Printf("  stop:         %s  (= kill %d, then waits until every component is gone and %s is removed)\n", stop, pid, c.Dir)

	logf, err := os.OpenFile(filepath.Join(c.Dir, "logs", "demo.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(logf.Fd()), fd, 0); err != nil {
			return fmt.Errorf("move output to %s: %w", logf.Name(), err)
		}
	}
	if _, err := status.WriteString(detachedMsg); err != nil {
		return err
	}
	status.Close()
	<-ctx.Done()
	fmt.Println("demo: signalled; tearing the stack down")
	return nil
}

// writeScripts writes <dir>/kubectl (kubectl inside the stack's network
// namespace) and <dir>/stop (SIGTERM to the demo, then wait for its end).
func writeScripts(c *cluster.Cluster, pid int, nsenter, kubectlBin, kubectl, stop string) error {
	k := fmt.Sprintf("#!/bin/sh\n# kubectl against the demo stack, inside its network namespace.\nexec %s %s --kubeconfig %s \"$@\"\n",
		nsenter, kubectlBin, c.Kubeconfig)
	p := strconv.Itoa(pid)
	s := `#!/bin/sh
# Stops the demo stack: SIGTERM to the demo, which stops every component and
# removes the state directory; waits until it has.
pid=` + p + `
dir=` + c.Dir + `
running() { grep -q csi-clone-demo /proc/$pid/cmdline 2>/dev/null && [ "$(cut -d' ' -f3 /proc/$pid/stat)" != Z ]; }
if ! running; then echo "demo (pid $pid) is not running"; exit 0; fi
kill -TERM $pid
while running; do sleep 0.2; done
if [ -d "$dir" ]; then
	echo "demo stopped, but its teardown kept $dir:"; tail -n 20 "$dir/logs/demo.log"; exit 1
fi
echo "demo stack stopped; $dir removed"
`
	if err := os.WriteFile(kubectl, []byte(k), 0o755); err != nil {
		return err
	}
	return os.WriteFile(stop, []byte(s), 0o755)
}
