// Command bench measures what the relay costs. The same CSI calls go to a
// stateless in-process driver directly, through the relay with its tap (and
// a metrics Recorder and an Observer, as the binary runs it) and through the
// relay without its tap, interleaved so every mode sees the same machine;
// -relay-process runs the relays in a process of their own. Short mode: per call kind, p50,
// p99 and throughput with their ratios to direct. Long mode: whether calls
// slow down as one connection ages. It measures; it asserts nothing.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

type options struct {
	short, long bool
	rounds      int
	calls       int
	largeCalls  int
	window      time.Duration
	workers     int
	longCalls   int
	longBlock   int
	inProcess   bool
}

func main() {
	var o options
	flag.BoolVar(&o.short, "short", true, "run the short mode: latency and throughput rounds per call kind")
	flag.BoolVar(&o.long, "long", true, "run the long mode: many calls with per-call deadlines on one connection per mode")
	flag.IntVar(&o.rounds, "rounds", 8, "short mode: rounds; each runs every kind in every mode, modes shuffled")
	flag.IntVar(&o.calls, "calls", 1000, "short mode: sequential calls per latency round (small kinds)")
	flag.IntVar(&o.largeCalls, "large-calls", 80, "short mode: sequential calls per latency round (1 MiB CreateVolume)")
	flag.DurationVar(&o.window, "window", time.Second, "short mode: length of each throughput round")
	flag.IntVar(&o.workers, "workers", 16, "short mode: concurrent callers in throughput rounds")
	flag.IntVar(&o.longCalls, "long-calls", 40000, "long mode: calls per mode")
	flag.IntVar(&o.longBlock, "long-block", 1000, "long mode: calls a mode makes before the next mode's turn")
	relayProcess := flag.Bool("relay-process", false, "run the relays in a process of their own; direct then still crosses no process, so every relay mode pays two process hops more than direct (an upper bound, not what a deployment sees)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (all modes) to this file; with -in-process it covers the relays too")
	child := flag.String(childFlag, "", "internal: be the relay process serving the sockets in this directory")
	flag.Parse()
	o.inProcess = !*relayProcess
	// Nothing here should log per call; if anything does, that is the same
	// cost in every mode and only noise on a terminal.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	if *child != "" {
		if err := relayChild(*child); err != nil {
			fmt.Fprintln(os.Stderr, "bench relay process:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o, *cpuProfile); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// validate refuses values that would leave a percentile without samples or
// a loop without progress.
func (o options) validate() error {
	if o.rounds < 1 || o.calls < 1 || o.largeCalls < 1 || o.workers < 1 || o.window <= 0 || o.longBlock < 1 {
		return errors.New("-rounds, -calls, -large-calls, -workers, -window and -long-block must be positive")
	}
	if o.longCalls < earlyTo+lateCalls {
		return fmt.Errorf("-long-calls must be at least %d", earlyTo+lateCalls)
	}
	return nil
}

func run(o options, cpuProfile string) error {
	if err := o.validate(); err != nil {
		return err
	}
	start := time.Now()
	if cpuProfile != "" {
		stop, err := startCPUProfile(cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	header()
	if o.short {
		if err := runShort(o); err != nil {
			return err
		}
	}
	if o.long {
		if err := runLong(o); err != nil {
			return err
		}
	}
	fmt.Printf("\ntotal %v\n", time.Since(start).Round(time.Second))
	return nil
}

// header says what was measured where, so figures pasted elsewhere keep
// their context.
func header() {
	rev, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		rev = []byte("unknown")
	}
	fmt.Printf("csi-clone-sidecar bench, %s, commit %s, %s, %d CPUs (GOMAXPROCS %d)\n",
		time.Now().Format(time.DateTime), strings.TrimSpace(string(rev)), runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Println("driver: a stateless in-process CSI controller that answers from the request alone, identically in every")
	fmt.Println("  mode, so differences are the relay's; a real driver takes far longer per call, so these ratios are an")
	fmt.Println("  upper bound on the relay's relative cost and the added time (+µs) is the figure that carries over.")
	fmt.Println("modes: direct (client to driver socket), relay+tap (tap, metrics, counting observer), bare relay (no tap);")
	fmt.Println("  short-mode calls carry no deadline; goals are for relay+tap, bare relay is the reference.")
}

func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
