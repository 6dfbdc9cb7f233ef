package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The relay's connections after the soak: whatever the kills, the driver
// restart and the outage did, every connection csi-clone-sidecar holds must
// be one half of a live pair, a CSI sidecar's connection and its own to the
// driver, and the driver must hold nothing else. (The processes, mounts and
// sockets of the stack are checked by checkNoLeaks at teardown.)

// unixEnd is one unix socket from /proc/net/unix: its bound path (an
// accepted connection carries its listener's) and whether it is connected.
type unixEnd struct {
	path      string
	connected bool
}

// unixTable maps socket inodes of this network namespace to their ends.
func unixTable() (map[string]unixEnd, error) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	out := map[string]unixEnd{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		e := unixEnd{connected: f[5] == "03"}
		if len(f) > 7 {
			e.path = f[7]
		}
		out[f[6]] = e
	}
	return out, nil
}

// socketsOf lists the unix ends a process holds open.
func socketsOf(pid int, table map[string]unixEnd) ([]unixEnd, int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	var out []unixEnd
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil || !strings.HasPrefix(l, "socket:[") {
			continue
		}
		if e, ok := table[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")]; ok {
			out = append(out, e)
		}
	}
	return out, len(fds), nil
}

// relayCounts are one process's connected unix sockets: accepted ones
// (named: an accepted connection carries the name its listener was bound
// to, which for the relay is a temporary name it renames into place) and
// dialled ones (unnamed). Each process here listens on one socket only.
func relayCounts(ends []unixEnd) (accepted, dialed int) {
	for _, e := range ends {
		switch {
		case !e.connected:
		case e.path != "":
			accepted++
		default:
			dialed++
		}
	}
	return accepted, dialed
}

// pairState is the relay's connections at one moment.
type pairState struct {
	clients                  int // connections the CSI sidecars hold (to replica 0)
	accepted, dialed         []int
	driverAccepted, relayFDs int
}

func readPairs(c *cluster.Cluster) (pairState, error) {
	table, err := unixTable()
	if err != nil {
		return pairState{}, err
	}
	var st pairState
	for _, n := range []string{"csi-provisioner", "csi-resizer", "csi-snapshotter"} {
		ends, _, err := socketsOf(c.PIDOf(n), table)
		if err != nil {
			return st, fmt.Errorf("%s: %w", n, err)
		}
		_, d := relayCounts(ends)
		st.clients += d
	}
	for i, r := range c.Replicas {
		ends, fds, err := socketsOf(c.PIDOf(r.Name), table)
		if err != nil {
			return st, fmt.Errorf("%s: %w", r.Name, err)
		}
		a, d := relayCounts(ends)
		st.accepted, st.dialed = append(st.accepted, a), append(st.dialed, d)
		if i == 0 {
			st.relayFDs = fds
		}
	}
	ends, _, err := socketsOf(c.PIDOf("csi-test-driver"), table)
	st.driverAccepted, _ = relayCounts(ends)
	return st, err
}

// pairsOK: replica 0 holds one accepted connection per CSI sidecar
// connection and one driver connection per accepted one; standbys hold
// none; the driver holds exactly the replicas' connections.
func (st pairState) pairsOK() error {
	dialed := 0
	for i := range st.accepted {
		dialed += st.dialed[i]
		want := 0
		if i == 0 {
			want = st.clients
		}
		if st.accepted[i] != want || st.dialed[i] != want {
			return fmt.Errorf("replica %d holds %d client and %d driver connections, want %d each", i, st.accepted[i], st.dialed[i], want)
		}
	}
	if st.driverAccepted != dialed {
		return fmt.Errorf("the driver holds %d connections, the replicas %d", st.driverAccepted, dialed)
	}
	return nil
}

// checkRelayPairs waits (health probes dial the driver for a moment every
// 10 s) for a moment the pairs add up.
func checkRelayPairs(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	var st pairState
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		if st, err = readPairs(c); err != nil {
			return false, err
		}
		last = st.pairsOK()
		return last == nil, nil
	})
	if err != nil {
		t.Errorf("relay connections after the soak: %v (last: %v, state %+v)", err, last, st)
		return
	}
	t.Logf("relay connections after the soak: %d CSI sidecar connections, each relayed once; replica 0 holds %d fds", st.clients, st.relayFDs)
}
