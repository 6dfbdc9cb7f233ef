package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// medianSeconds is the median of each phase's durations, in seconds; nil
// when no phase is dated.
func medianSeconds(byPhase map[string][]time.Duration) map[string]float64 {
	if len(byPhase) == 0 {
		return nil
	}
	out := make(map[string]float64, len(byPhase))
	for phase, ds := range byPhase {
		slices.Sort(ds)
		m := ds[len(ds)/2]
		if len(ds)%2 == 0 {
			m = (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
		}
		out[phase] = m.Seconds()
	}
	return out
}

// printPhases prints where each pool's clones spent their time: the median
// per phase, and the disks in flight now by phase.
func printPhases(tw io.Writer, pools []PoolReport) {
	fmt.Fprint(tw, "\nTIME PER PHASE (median)\tPOOL")
	for _, ph := range record.Phases[1:] { // golden-import is the golden's, not the disk's
		fmt.Fprint(tw, "\t", strings.ToUpper(ph))
	}
	fmt.Fprintln(tw, "\tIN FLIGHT")
	for _, p := range pools {
		fmt.Fprintf(tw, "%s\t%s", p.Namespace, verdict.OrNone(p.Pool))
		for _, ph := range record.Phases[1:] {
			if v, ok := p.PhaseSeconds[ph]; ok {
				fmt.Fprintf(tw, "\t%s", secondsText(v))
			} else {
				fmt.Fprint(tw, "\t-")
			}
		}
		inFlight := verdictsText(p.InFlight)
		if inFlight == "" {
			inFlight = "-"
		}
		fmt.Fprintf(tw, "\t%s\n", inFlight)
	}
}

// secondsText is a duration in seconds, rounded for reading.
func secondsText(s float64) string {
	return (time.Duration(s*10) * time.Second / 10).String()
}
