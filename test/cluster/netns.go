package cluster

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// netnsEnv marks a test binary that Main has already re-executed inside its
// own network namespace.
const netnsEnv = "CSI_CLONE_E2E_NETNS"

// Main is the TestMain of packages that start clusters. It re-executes the
// test binary under `unshare --net` with only a loopback interface up, so the
// whole stack (cdi-controller's metrics listen on :8443 on every interface,
// with no flag to change it) is reachable from nowhere and parallel runs never
// share a port. It needs root, as `unshare --net` does; without it the tests
// fail with a message instead of starting anything on the host's network.
func Main(m *testing.M) {
	if os.Getenv(netnsEnv) == "" {
		os.Exit(reexecInNetNS())
	}
	code := m.Run()
	RemoveBuilds()
	os.Exit(code)
}

func reexecInNetNS() int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: these tests run the stack in a private network namespace and need root "+
			"(`unshare --net`); run them as root, e.g. `sudo go test ./test/e2e/...`, or via `make test`")
		return 1
	}
	args := append([]string{"--net", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`, os.Args[0]}, os.Args[1:]...)
	cmd := exec.Command("unshare", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	// If go test kills us (timeout), the namespaced tests die too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "e2e: cannot enter a private network namespace (unshare --net): %v\n", err)
		return 1
	}
	return 0
}

// CheckNetNS refuses to start a stack unless this process is in a network
// namespace whose only interface is an up loopback.
func CheckNetNS() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list network interfaces: %w", err)
	}
	for _, i := range ifs {
		if i.Name != "lo" {
			return fmt.Errorf("refusing to start the stack: network interface %q is visible, so this is not a private "+
				"network namespace (cdi-controller would listen on :8443 on it); use cluster.Main as TestMain, "+
				"or run under test/e2e/run-in-netns.sh", i.Name)
		}
		if i.Flags&net.FlagUp == 0 {
			return fmt.Errorf("loopback is down in this network namespace: run `ip link set lo up` first")
		}
	}
	return nil
}
