package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

const sidecarProcess = "csi-clone-sidecar"

// cpuUse is where CPU time went during one wave: the sidecar, the rest of
// the stack's processes, the harness (pod emulator, polling), and the
// machine as a whole, which on a shared machine includes other work.
type cpuUse struct {
	sidecar, stack, harness float64            // CPU-seconds
	byProcess               map[string]float64 // the same, per component
	machine                 float64            // CPU-seconds of every process on the machine
	wall                    time.Duration
}

// cpuMark is a reading taken when a wave starts.
type cpuMark struct {
	procs   map[string]float64
	machine float64
	at      time.Time
}

func markCPU(c *cluster.Cluster) cpuMark {
	return cpuMark{procs: c.CPUSeconds(), machine: machineBusySeconds(), at: time.Now()}
}

// since is the CPU used from the mark to now. A process started after the
// mark (the CSI sidecars are fresh each wave, but started before it) counts
// from zero.
func (m cpuMark) since(c *cluster.Cluster) cpuUse {
	now := c.CPUSeconds()
	u := cpuUse{machine: machineBusySeconds() - m.machine, wall: time.Since(m.at), byProcess: map[string]float64{}}
	for name, s := range now {
		d := s - m.procs[name]
		u.byProcess[name] = d
		switch name {
		case sidecarProcess:
			u.sidecar += d
		case cluster.HarnessProcess:
			u.harness += d
		default:
			u.stack += d
		}
	}
	return u
}

func (u cpuUse) String() string {
	return fmt.Sprintf("cpu-s: sidecar %.1f, rest of stack %.1f, harness %.1f; machine busy %.2f of %d cores",
		u.sidecar, u.stack, u.harness, u.machine/u.wall.Seconds(), cores())
}

// machineBusySeconds is the machine's non-idle CPU time (/proc/stat, all
// CPUs; USER_HZ is 100 on Linux).
func machineBusySeconds() float64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var busy float64
	for i, f := range fields[1:] {
		n, _ := strconv.ParseFloat(f, 64)
		if i != 3 && i != 4 && i < 8 { // not idle, not iowait; guest time is inside user
			busy += n
		}
	}
	return busy / 100
}

func cores() int {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "cpu") && !strings.HasPrefix(l, "cpu ") {
			n++
		}
	}
	return n
}

// add sums two waves' readings.
func (u cpuUse) add(v cpuUse) cpuUse {
	sum := cpuUse{sidecar: u.sidecar + v.sidecar, stack: u.stack + v.stack, harness: u.harness + v.harness,
		machine: u.machine + v.machine, wall: u.wall + v.wall, byProcess: map[string]float64{}}
	for _, m := range []map[string]float64{u.byProcess, v.byProcess} {
		for name, s := range m {
			sum.byProcess[name] += s
		}
	}
	return sum
}

// perProcess lists each component's CPU-seconds divided by n, by name.
func (u cpuUse) perProcess(n int) string {
	names := slices.Sorted(maps.Keys(u.byProcess))
	out := make([]string, len(names))
	for i, name := range names {
		out[i] = fmt.Sprintf("%s %.3f", name, u.byProcess[name]/float64(n))
	}
	return strings.Join(out, ", ")
}
