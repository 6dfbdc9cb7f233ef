package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The sidecar's safety-net full pass runs every --resync-period, counted
// from the moment its caches synced. A steady-state window that happens to
// hold a pass reads as a rate several times the true one (the 2026-12-02
// figure, 1.20 s per minute), one that misses it reads low. So steady state is
// measured in two parts, each on its own: the rate between passes, over a
// window placed clear of any pass, and one pass's cost, over a window
// around it less the rate between passes; the pass is then spread over its
// period.

// passWindow is how long the window around a full pass lasts; passLead is
// how much of it comes before the pass is due. A pass over 10,000 disks
// takes a few seconds.
const (
	passWindow = time.Minute
	passLead   = 5 * time.Second
)

// resyncPeriod is the --resync-period the sidecar runs with.
func resyncPeriod(args []string) (time.Duration, error) {
	period := config.DefaultResyncPeriod
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--resync-period="); ok {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return 0, fmt.Errorf("--resync-period=%s: not a positive duration", v)
			}
			period = d
		}
	}
	return period, nil
}

// nextPass is when the first full pass after t is due.
func nextPass(synced time.Time, period time.Duration, t time.Time) time.Time {
	n := t.Sub(synced)/period + 1
	return synced.Add(n * period)
}

// clearOfPasses returns the earliest start at or after t of a window of
// length d that overlaps no pass window, and false when no such window
// fits between two passes (then t).
func clearOfPasses(synced time.Time, period, d time.Duration, t time.Time) (time.Time, bool) {
	if d+passWindow > period {
		return t, false
	}
	start := t
	if prevEnd := nextPass(synced, period, t).Add(-period).Add(passWindow - passLead); start.Before(prevEnd) {
		start = prevEnd
	}
	if next := nextPass(synced, period, start); start.Add(d).After(next.Add(-passLead)) {
		start = next.Add(passWindow - passLead)
	}
	return start, true
}

// steadyCost is steady state's CPU: perMinute between passes, and perPass
// for one full pass (what its window used beyond that rate).
type steadyCost struct {
	perMinute, perPass float64
	period             time.Duration
	passMeasured       bool
}

// spread is one full pass's CPU spread over its period, per minute (0 when
// the pass was not measured).
func (s steadyCost) spread() float64 {
	if !s.passMeasured {
		return 0
	}
	return s.perPass / s.period.Minutes()
}

func (s steadyCost) print(window time.Duration) {
	fmt.Printf("CPU in steady state between passes  %6.2f s per minute (over %s, clear of the full passes)\n", s.perMinute, window.Round(time.Second))
	if !s.passMeasured {
		fmt.Printf("CPU of a full pass                  not measured (the window cannot fit between passes every %s)\n", s.period)
		return
	}
	fmt.Printf("CPU of a full pass (every %s)     %6.2f s (%.2f s per minute spread over the period)\n", s.period, s.perPass, s.spread())
	fmt.Printf("CPU in steady state, passes included %5.2f s per minute\n", s.perMinute+s.spread())
}

// measureSteady measures steady state's CPU between passes over a window
// of o.steady clear of them (the CPU profile, with -profile, covers that
// window), then one full pass, and returns the window.
func measureSteady(ctx context.Context, c *cluster.Cluster, o options, pid int, synced time.Time, period time.Duration) (from, to time.Time, cost steadyCost, err error) {
	cost.period = period
	from, clear := time.Now(), false
	if !synced.IsZero() {
		from, clear = clearOfPasses(synced, period, o.steady, from)
	}
	if err := sleepUntil(ctx, from); err != nil {
		return from, to, cost, err
	}
	from, cpu0 := time.Now(), cpuSeconds(pid)
	if o.profile != "" {
		saveProfile(c, o.profile, "cpu.pb.gz", fmt.Sprintf("profile?seconds=%d", int(o.steady.Seconds())))
	}
	if err := sleepUntil(ctx, from.Add(o.steady)); err != nil {
		return from, to, cost, err
	}
	to, cpu1 := time.Now(), cpuSeconds(pid)
	cost.perMinute = (cpu1 - cpu0) / to.Sub(from).Minutes()
	if !clear {
		return from, to, cost, nil
	}
	pass := nextPass(synced, period, time.Now().Add(passLead))
	fmt.Printf("steady state measured; waiting %s for the full pass due at %s\n", time.Until(pass).Round(time.Second), pass.Format(time.TimeOnly))
	if err := sleepUntil(ctx, pass.Add(-passLead)); err != nil {
		return from, to, cost, err
	}
	w0, pass0 := time.Now(), cpuSeconds(pid)
	if err := sleepUntil(ctx, w0.Add(passWindow)); err != nil {
		return from, to, cost, err
	}
	cost.perPass = cpuSeconds(pid) - pass0 - cost.perMinute*time.Since(w0).Minutes()
	cost.passMeasured = true
	return from, to, cost, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(t)):
		return nil
	}
}
