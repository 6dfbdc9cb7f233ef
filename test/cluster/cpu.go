package cluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// HarnessProcess names, in CPUSeconds, the process running the harness
// itself: the pod emulator and whatever the test or benchmark does.
const HarnessProcess = "harness"

// CPUSeconds is the user + system CPU time each running component process
// has used so far, by component name (children it waited for included, so
// a component started through a shell counts whole). Benchmarks take it
// before and after a run to say where the machine's time went.
func (c *Cluster) CPUSeconds() map[string]float64 {
	c.mu.Lock()
	pids := map[string]int{}
	for name, p := range c.procs {
		if done, _ := p.exited(); !done && p.cmd.Process != nil {
			pids[name] = p.cmd.Process.Pid
		}
	}
	c.mu.Unlock()
	pids[HarnessProcess] = os.Getpid()
	out := map[string]float64{}
	for name, pid := range pids {
		if s, err := processCPUSeconds(pid); err == nil {
			out[name] = s
		}
	}
	return out
}

// processCPUSeconds reads utime, stime, cutime and cstime from
// /proc/<pid>/stat (clock ticks of 1/100 s on Linux).
func processCPUSeconds(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	// Fields after the command: state is [0], utime [11] ... cstime [14].
	fields := strings.Fields(s[i+2:])
	if len(fields) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	var ticks float64
	for _, f := range fields[11:15] {
		n, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return ticks / 100, nil
}
