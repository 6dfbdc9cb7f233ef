package cluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// stateDirs are the state directories clusters of this process made (also
// under CSI_CLONE_E2E_DIR or Options.Dir), so that their sockets are seen
// wherever they live.
var stateDirs sync.Map

func noteStateDir(dir string) {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	stateDirs.Store(dir+string(filepath.Separator), true)
}

// inStateDir reports whether path is in a known state directory or in one
// named like the default (another test process's).
func inStateDir(path string) bool {
	if strings.Contains(path, "csi-clone-e2e") {
		return true
	}
	found := false
	stateDirs.Range(func(dir, _ any) bool {
		found = strings.HasPrefix(path, dir.(string))
		return !found
	})
	return found
}

// Resources is what a stack can leave behind on the machine: descendant
// processes of this test process, mounts, loop devices and bound unix sockets
// of the e2e state directories. Take one before and one after a cluster's
// life and compare with Leaked.
type Resources struct {
	Procs   []string // "pid comm" of every descendant process
	Mounts  []string // mount points of this mount namespace
	Loops   []string // attached loop devices and their backing files
	Sockets []string // unix socket paths under an e2e state directory
}

// Snapshot records the Resources present now.
func Snapshot() (Resources, error) {
	var r Resources
	var err error
	if r.Procs, err = descendants(os.Getpid()); err != nil {
		return r, err
	}
	if r.Mounts, err = mountPoints(); err != nil {
		return r, err
	}
	r.Loops = loopDevices()
	r.Sockets, err = e2eSockets()
	return r, err
}

// Leaked reports everything in after that was not in before.
func (before Resources) Leaked(after Resources) error {
	var msgs []string
	add := func(kind string, b, a []string) {
		for _, x := range a {
			if !slices.Contains(b, x) {
				msgs = append(msgs, kind+" "+x)
			}
		}
	}
	add("process", before.Procs, after.Procs)
	add("mount", before.Mounts, after.Mounts)
	add("loop device", before.Loops, after.Loops)
	add("socket", before.Sockets, after.Sockets)
	if len(msgs) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// descendants lists the live descendants of pid (zombies excluded: they are
// only waiting to be reaped by a Wait that is already running).
func descendants(pid int) ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	parent := map[int]int{}
	info := map[int]string{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...; comm may contain spaces and parens.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[p] = pp
		info[p] = fmt.Sprintf("%d %s", p, s[strings.IndexByte(s, '(')+1:i])
	}
	var out []string
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, info[p])
				break
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 4 {
			out = append(out, f[4])
		}
	}
	return out, sc.Err()
}

func loopDevices() []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f)))+" "+strings.TrimSpace(string(b)))
	}
	return out
}

// e2eSockets lists bound unix sockets (of this network namespace) whose path
// is in a state directory (inStateDir).
func e2eSockets() ([]string, error) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 8 && inStateDir(f[7]) {
			out = append(out, f[7])
		}
	}
	return out, nil
}
