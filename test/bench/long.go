package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// The windows the long mode compares: early (after a warm-up) and the end.
const (
	earlyFrom, earlyTo = 1000, 3000
	lateCalls          = 2000
	trendSegments      = 8
)

// runLong makes o.longCalls sequential CreateVolume calls per mode, each
// mode on its one connection for all of them, in blocks of o.longBlock
// calls with the modes shuffled per block, so every mode sees the same
// machine over the run. It shows whether a call gets slower as its
// connection ages, which short rounds cannot.
func runLong(o options) error {
	k := realistic("long", 0)
	t := newTally([]*kind{k})
	var modes []*mode
	var lat [][]time.Duration
	err := measureOn(o, t, func(ms []*mode) (err error) {
		modes = ms
		lat, err = interleave(o, k, ms)
		return err
	})
	if err != nil {
		return err
	}
	reportLong(o, k, modes, lat, t)
	return nil
}

// interleave runs the long mode's calls, the modes taking turns per block,
// and returns every call's latency per mode.
func interleave(o options, k *kind, modes []*mode) ([][]time.Duration, error) {
	lat := make([][]time.Duration, len(modes))
	for mi := range lat {
		lat[mi] = make([]time.Duration, o.longCalls)
	}
	for from := 0; from < o.longCalls; from += o.longBlock {
		to := min(from+o.longBlock, o.longCalls)
		for _, mi := range rand.Perm(len(modes)) {
			if err := deadlineCalls(k, modes[mi], lat[mi][from:to], from); err != nil {
				return nil, err
			}
		}
	}
	return lat, nil
}

// deadlineCalls fills lat with the latencies of calls first, first+1, ...
// Call i gets a deadline of 30s + i ms, so grpc-go sends a grpc-timeout
// value never sent before, which its HPACK encoder adds to its dynamic table
// (and the tap to its copy), evicting older entries: the table churns on
// every call, as csi-provisioner's per-call timeouts make it do on a
// connection that lives for days.
func deadlineCalls(k *kind, m *mode, lat []time.Duration, first int) error {
	for j := range lat {
		timeout := 30*time.Second + time.Duration(first+j)*time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		err := k.call(ctx, m.client)
		lat[j] = time.Since(start)
		cancel()
		if err != nil {
			return fmt.Errorf("%s, long connection, call %d: %w", m.name, first+j, err)
		}
	}
	return nil
}

func reportLong(o options, k *kind, modes []*mode, lat [][]time.Duration, t *tally) {
	n := o.longCalls
	fmt.Printf("\nLong connection: %d sequential calls of %s\n", n, k.label)
	fmt.Printf("  per mode on one connection; each call with its own deadline (a new grpc-timeout value each call);\n")
	fmt.Printf("  modes interleaved in blocks of %d calls, shuffled per block\n", o.longBlock)
	early, late := fmt.Sprintf("calls %s-%s", thousands(earlyFrom), thousands(earlyTo)),
		fmt.Sprintf("calls %s-%s", thousands(n-lateCalls), thousands(n))
	row("  %-18s %5s %18s %18s %8s   %s", "mode", "conns", early+" p50", late+" p50", "growth", "growth vs direct's")
	growth := make([]float64, len(modes))
	for mi, m := range modes {
		e, l := percentile(lat[mi][earlyFrom:earlyTo], .5), percentile(lat[mi][n-lateCalls:], .5)
		growth[mi] = ratio(l, e)
		vs := ""
		if mi != direct {
			vs = fmt.Sprintf("%.2fx", growth[mi]/growth[direct])
		}
		row("  %-18s %5d %18s %18s %7.2fx   %s", m.name, m.dials.Load(), short(e), short(l), growth[mi], vs)
	}
	fmt.Printf("  goal for relay+tap: growth vs direct's %s\n", meets(growth[tapped]/growth[direct] <= goalGrowth, "<= %.2fx", goalGrowth))
	fmt.Printf("  fitted over every block (relay+tap p50 / direct p50 per block, same machine moment): %.2fx from first call to last\n",
		pairedDrift(lat[tapped], lat[direct], o.longBlock))
	fmt.Printf("  median per %d calls, in call order:\n", n/trendSegments)
	for mi, m := range modes {
		fmt.Printf("    %-16s %s\n", m.name, trend(lat[mi]))
	}
	_, decoded := t.counts(k)
	fmt.Printf("  tap: %d of %d calls through relay+tap decoded in full\n", decoded, n)
}

// trend lists the median of each of trendSegments equal runs of calls.
func trend(lat []time.Duration) string {
	seg := len(lat) / trendSegments
	var b strings.Builder
	for i := range trendSegments {
		fmt.Fprintf(&b, "%9s", short(percentile(lat[i*seg:(i+1)*seg], .5)))
	}
	return b.String()
}

func thousands(i int) string {
	if i%1000 == 0 {
		return fmt.Sprintf("%dk", i/1000)
	}
	return fmt.Sprint(i)
}

// pairedDrift fits a line through log(a's median / b's median) per block of
// calls, the two modes having run each block back to back, and returns how
// much the ratio changes from the first block to the last by that line. It
// reads the same growth as the two windows above but from every block, so a
// burst of load during one window moves it less.
func pairedDrift(a, b []time.Duration, block int) float64 {
	var xs, ys []float64
	for from := 0; from+block <= len(a); from += block {
		ra := percentile(a[from:from+block], .5)
		rb := percentile(b[from:from+block], .5)
		xs, ys = append(xs, float64(from)), append(ys, math.Log(ratio(ra, rb)))
	}
	if len(xs) < 2 {
		return 1
	}
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	return math.Exp(sxy / sxx * (xs[len(xs)-1] - xs[0]))
}
