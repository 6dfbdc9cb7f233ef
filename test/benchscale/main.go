// Command csi-clone-benchscale is `make bench-scale`: it builds a synthetic
// fleet of finished worker disks on the loopback control plane
// (test/cluster: etcd, kube-apiserver, kube-controller-manager, the test
// driver and the kubernetes-csi sidecars; no CDI, the fleet is already
// cloned), then starts the shipped binary (bin/csi-clone-sidecar) with the
// flags deploy/ ships and prints what it costs: informer sync time, time to
// the first bad and to every verdict, peak RSS, CPU seconds at start and in
// steady state, its API requests by verb and resource (kube-apiserver's
// audit log), /metrics latency and series, and the ledger's size.
//
// With -baseline OLD it measures two binaries on the same fleet, taking
// turns (OLD, new, OLD, new, ... -rounds times), and prints each figure's
// ratio: a change's cost measured side by side in one run.
//
// It is a benchmark: it measures and asserts nothing. It must run in a
// private network namespace (`make bench-scale` runs it that way).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

type options struct {
	disks, goldens, namespaces, badEvery, parallel int
	rounds                                         int
	sidecar, baseline, profile, extraArgs          string
	steady, timeout                                time.Duration
	keep                                           bool
}

func main() {
	var o options
	flag.IntVar(&o.disks, "disks", 10000, "Worker disks in the fleet.")
	flag.IntVar(&o.goldens, "goldens", 20, "Goldens (flavors).")
	flag.IntVar(&o.namespaces, "namespaces", 200, "Tenant namespaces the disks are spread over.")
	flag.IntVar(&o.badEvery, "bad-every", 100, "Every n-th disk was copied host-assisted (a bad verdict); 0: none.")
	flag.IntVar(&o.parallel, "parallel", 16, "Concurrent writers building the fleet.")
	flag.StringVar(&o.sidecar, "sidecar", "bin/csi-clone-sidecar", "The csi-clone-sidecar binary (make build).")
	flag.StringVar(&o.baseline, "baseline", "", "Another csi-clone-sidecar binary (e.g. one built at an older commit) measured on the same fleet, taking turns with -sidecar, baseline first; the figures' ratios are printed at the end.")
	flag.IntVar(&o.rounds, "rounds", 2, "With -baseline: how many times each binary runs.")
	flag.DurationVar(&o.steady, "steady", 2*time.Minute, "How long steady state is measured after every verdict is written.")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "Give up waiting for the verdicts after this long.")
	flag.StringVar(&o.profile, "profile", "", "Run the sidecar with --enable-pprof and write its heap profile after every verdict (heap.pb.gz), as of the collection before its peak RSS (heap-peak.pb.gz), a CPU profile of the steady state (cpu.pb.gz) and of the start until every verdict (cpu-burst-NN.pb.gz, 20 s each) into this directory.")
	flag.StringVar(&o.extraArgs, "sidecar-args", "", "Flags added to the shipped ones, space-separated (diagnosis, e.g. --v=4; the figures are then not the shipped defaults' own).")
	flag.BoolVar(&o.keep, "keep", false, "Keep the state directory (logs, audit log).")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "bench-scale: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if err := cluster.CheckNetNS(); err != nil {
		return fmt.Errorf("%w\n(`make bench-scale` runs it that way)", err)
	}
	defer cluster.RemoveBuilds()
	if err := o.check(); err != nil {
		return err
	}
	args, env, err := shippedSidecar()
	if err != nil {
		return err
	}
	if o.profile != "" {
		if o.profile, err = filepath.Abs(o.profile); err == nil {
			err = os.MkdirAll(o.profile, 0o755)
		}
		if err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
		args = append(args, "--enable-pprof")
	}
	args = append(args, strings.Fields(o.extraArgs)...)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := cluster.New(cluster.Options{NoCDI: true, SidecarBinary: o.sidecar, SidecarArgs: args, SidecarEnv: env,
		Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }})
	if c != nil {
		defer func() {
			if err := c.Stop(o.keep); err != nil {
				fmt.Fprintf(os.Stderr, "teardown: %v\n", err)
			}
		}()
	}
	if err != nil {
		return err
	}
	// The sidecar starts with the stack; the measured one starts on the
	// finished fleet, as after an install or an upgrade.
	if err := c.StopSidecar(); err != nil {
		return err
	}
	cfg := *c.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	f := &fleet{c: c, kube: kubernetes.NewForConfigOrDie(&cfg), dyn: dynamic.NewForConfigOrDie(&cfg),
		disks: o.disks, goldens: o.goldens, nsN: o.namespaces, badEvery: o.badEvery, created: time.Now().Add(-time.Hour)}
	t0 := time.Now()
	if err := f.build(ctx, o.parallel); err != nil {
		return fmt.Errorf("building the fleet: %w", err)
	}
	fmt.Printf("fleet: %d disks (%d bad), %d goldens, %d namespaces, built in %s\n",
		o.disks, len(f.bad), o.goldens, o.namespaces, time.Since(t0).Round(time.Second))
	clock, err := watchClaims(ctx, f, o)
	if err != nil {
		return err
	}
	var runs []figures
	for i, bin := range runOrder(o) {
		if i > 0 {
			if err := f.forgetVerdicts(ctx, o.parallel); err != nil {
				return err
			}
		}
		fig, err := measure(ctx, c, f, clock, o, bin, args, env)
		if err != nil {
			return err
		}
		runs = append(runs, fig)
	}
	printComparison(o, runs)
	return nil
}

// check makes the binaries' paths absolute and refuses what cannot run.
func (o *options) check() error {
	for _, b := range []struct {
		flag string
		path *string
	}{{"-sidecar", &o.sidecar}, {"-baseline", &o.baseline}} {
		if *b.path == "" {
			continue
		}
		abs, err := filepath.Abs(*b.path)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			return fmt.Errorf("%s: %w (run `make build`)", b.flag, err)
		}
		*b.path = abs
	}
	if o.baseline != "" && o.rounds < 1 {
		return fmt.Errorf("-rounds=%d: must be at least 1", o.rounds)
	}
	if o.baseline != "" && o.profile != "" {
		return fmt.Errorf("-profile with -baseline: the profiles of both binaries would overwrite each other; profile one binary at a time")
	}
	return nil
}
