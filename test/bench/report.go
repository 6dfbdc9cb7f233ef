package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The tap's goals: what relay+tap may cost over the bare relay in the same
// run (the tap's own share). The relay against the driver directly is
// reported, not judged: two socket hops cost what the machine's wake-ups
// cost, whatever the relay does.
const (
	goalTapP50        = 1.05
	goalTapP99        = 1.10
	goalTapThroughput = 0.95
	goalGrowth        = 1.10 // long mode: relay+tap's growth over direct's
)

// The short report's tables: absolute columns, then ratios.
const (
	absRow   = "  %-18s %9s %9s %9s   "
	ratioRow = "%-17s %-17s %s"
	tapRow   = "  %-18s %-17s %-17s %s"
)

func (r *shortRun) report(t *tally) {
	for _, k := range r.kinds {
		res := r.results[k]
		fmt.Printf("\n%s\n  %d sequential calls and %v of %d concurrent callers per mode\n",
			k.label, len(res[direct].latencies), res[direct].elapsed.Round(time.Millisecond), r.opts.workers)
		row(absRow+ratioRow, "mode", "p50", "p99", "calls/s", "p50 vs direct", "p99 vs direct", "calls/s vs direct")
		d := summarize(res[direct])
		row(absRow, r.modes[direct].name, short(d.p50), short(d.p99), fmt.Sprintf("%.0f", d.rate))
		for _, mi := range []int{tapped, bare} {
			s := summarize(res[mi])
			row(absRow+ratioRow, r.modes[mi].name, short(s.p50), short(s.p99), fmt.Sprintf("%.0f", s.rate),
				fmt.Sprintf("%.2fx (%s)", ratio(s.p50, d.p50), signed(s.p50-d.p50)),
				fmt.Sprintf("%.2fx", ratio(s.p99, d.p99)), fmt.Sprintf("%.2fx", s.rate/d.rate))
		}
		reportTapShare(summarize(res[tapped]), summarize(res[bare]))
		r.reportTap(t, k)
	}
	fmt.Printf("\ntap observations by method: %v\n", t.byMethod)
	fmt.Print("connections opened per mode (1 = one connection carried every call):")
	for _, m := range r.modes {
		fmt.Printf(" %s %d", m.name, m.dials.Load())
	}
	fmt.Println()
}

// reportTapShare prints relay+tap over the bare relay, the tap's own cost,
// against its goals.
func reportTapShare(s, b summary) {
	row(tapRow, "relay+tap vs bare", "p50 vs bare", "p99 vs bare", "calls/s vs bare")
	row(tapRow, "",
		fmt.Sprintf("%.2fx (%s)", ratio(s.p50, b.p50), signed(s.p50-b.p50)),
		fmt.Sprintf("%.2fx", ratio(s.p99, b.p99)), fmt.Sprintf("%.2fx", s.rate/b.rate))
	row(tapRow, "goal (tap's share)",
		meets(ratio(s.p50, b.p50) <= goalTapP50, "<= %.2fx", goalTapP50),
		meets(ratio(s.p99, b.p99) <= goalTapP99, "<= %.2fx", goalTapP99),
		meets(s.rate/b.rate >= goalTapThroughput, ">= %.2fx", goalTapThroughput))
}

func (r *shortRun) reportTap(t *tally, k *kind) {
	observed, decoded := t.counts(k)
	sent := r.results[k][tapped].sent
	if k.req == nil {
		fmt.Printf("  tap: timed only, %d queued to the observer (it selects the decoded methods, as the verdict engine does)\n", observed)
		return
	}
	fmt.Printf("  tap: %d of %d calls through relay+tap decoded in full (name, clone source, capacity, block, pvc name, volume id)\n",
		decoded, sent)
}

// row prints one table row; a row with empty last columns would otherwise
// end in blanks, which pasted figures carry along.
func row(format string, a ...any) {
	fmt.Println(strings.TrimRight(fmt.Sprintf(format, a...), " "))
}

type summary struct {
	p50, p99 time.Duration
	rate     float64 // calls per second in throughput rounds
}

func summarize(r *result) summary {
	return summary{p50: percentile(r.latencies, .5), p99: percentile(r.latencies, .99),
		rate: float64(r.done) / r.elapsed.Seconds()}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// meets prints a goal and whether it was met; the bench reports, it does
// not fail.
func meets(ok bool, format string, goal float64) string {
	verdict := "met"
	if !ok {
		verdict = "MISSED"
	}
	return fmt.Sprintf(format+" %s", goal, verdict)
}

func signed(d time.Duration) string {
	if d < 0 {
		return short(d).String()
	}
	return "+" + short(d).String()
}

// short rounds a latency to three significant digits or so, enough to read.
func short(d time.Duration) time.Duration {
	switch a := max(d, -d); {
	case a >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case a >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
