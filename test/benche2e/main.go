// Command csi-clone-bench-e2e is `make bench-e2e`: what csi-clone-sidecar
// costs a whole clone on the loopback stack (test/cluster). It times the
// same wave of worker clones (DataVolumes cloned from one golden, created
// together, until every one has Succeeded) with the kubernetes-csi sidecars
// dialling csi-clone-sidecar and with them pointed straight at the driver
// (the sidecar stopped), the two modes taking turns in one run, and prints
// each wave's time and where the CPU went meanwhile (the sidecar, the rest
// of the stack, the harness, the whole machine), the ratio of the modes'
// total times and the stack's own clone throughput. It measures; it asserts
// nothing.
//
// It must run in a private network namespace: `make bench-e2e` builds it and
// runs it under test/e2e/run-in-netns.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

const (
	tenant      = "tenant-bench"
	flavor      = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	version     = "v1.11.3"
	modeSidecar = "sidecar"
	modeDirect  = "direct"
)

type options struct {
	wave, rounds int
	warmup       int
	settle       time.Duration
	timeout      time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.wave, "wave", 20, "Worker clones per wave.")
	flag.IntVar(&o.rounds, "rounds", 4, "Waves per mode; the modes alternate, and which goes first alternates per round (an even number gives each mode the first slot equally often).")
	flag.IntVar(&o.warmup, "warmup", 1, "Unmeasured waves before the first round: the stack's first clones pay one-time costs that would be charged to whichever mode went first.")
	flag.DurationVar(&o.settle, "settle", 10*time.Second, "Pause after each switch of mode and each clean-up, before the next wave.")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "Give up on a wave after this long.")
	flag.Parse()
	if flag.NArg() > 0 || o.wave < 1 || o.rounds < 1 || o.warmup < 0 {
		fmt.Fprintln(os.Stderr, "bench-e2e: usage: csi-clone-bench-e2e [-wave N] [-rounds N] [-warmup N] [-settle D] [-timeout D]")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "bench-e2e: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) (err error) {
	if err := cluster.CheckNetNS(); err != nil {
		return fmt.Errorf("%w\n(`make bench-e2e` runs it that way)", err)
	}
	defer cluster.RemoveBuilds()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := startStack()
	if c != nil {
		defer func() {
			if serr := c.Stop(err != nil); serr != nil {
				fmt.Fprintf(os.Stderr, "bench-e2e: teardown: %v\n", serr)
			}
		}()
	}
	if err != nil {
		return err
	}
	golden, err := prepare(ctx, c)
	if err != nil {
		return err
	}
	mode := modeSidecar
	for i := range o.warmup {
		d, _, err := timeWave(ctx, c, golden, fmt.Sprintf("warmup-%d", i), o)
		if err != nil {
			return fmt.Errorf("warm-up wave %d: %w", i, err)
		}
		fmt.Printf("warm-up  %-7s  %d clones in %s (not counted)\n", mode, o.wave, d.Round(10*time.Millisecond))
	}
	times := map[string][]time.Duration{}
	cpus := map[string][]cpuUse{}
	windows := map[string][]window{}
	for round := range o.rounds {
		order := []string{modeSidecar, modeDirect}
		if round%2 == 1 {
			order = []string{modeDirect, modeSidecar}
		}
		for _, m := range order {
			if err := switchMode(c, &mode, m, o.settle); err != nil {
				return err
			}
			from := time.Now()
			d, cpu, err := timeWave(ctx, c, golden, fmt.Sprintf("%s-%d", m, round), o)
			if err != nil {
				return fmt.Errorf("%s wave %d: %w", m, round, err)
			}
			windows[m] = append(windows[m], window{from: from, to: time.Now()})
			times[m] = append(times[m], d)
			cpus[m] = append(cpus[m], cpu)
			fmt.Printf("round %d  %-7s  %d clones in %s  %s\n", round, m, o.wave, d.Round(10*time.Millisecond), cpu)
		}
	}
	printSummary(times, cpus, o)
	return printRequests(c, windows, o.wave*o.rounds)
}

// startStack brings up the stack with the sidecar in the path, shipped
// flags (no leader election: one replica). The garbage collector removes a
// deleted DataVolume's PVC (its owner reference), so that the provisioner
// deletes its volume: the harness leaves it off by default, and without it
// the first clean-up waited for ever.
func startStack() (*cluster.Cluster, error) {
	dir, err := cluster.NewStateDir("bench-e2e-")
	if err != nil {
		return nil, err
	}
	return cluster.New(cluster.Options{Dir: dir, Logf: func(f string, a ...any) { fmt.Printf("  "+f+"\n", a...) },
		ExtraControllers: []string{"garbage-collector-controller"}})
}

// prepare imports the golden and makes the tenant namespace.
func prepare(ctx context.Context, c *cluster.Cluster) (string, error) {
	g := cluster.Golden{SchematicID: flavor, Version: version, StorageClass: "replicated"}
	if _, err := c.CreateGolden(ctx, g); err != nil {
		return "", err
	}
	name := cluster.GoldenName(flavor, version)
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, name, cdiv1.Succeeded, 3*time.Minute); err != nil {
		return "", err
	}
	return name, c.CreateNamespace(ctx, tenant)
}

// switchMode points the kubernetes-csi sidecars at the relay or at the
// driver. Either way they are fresh processes at the start of every wave.
func switchMode(c *cluster.Cluster, mode *string, want string, settle time.Duration) error {
	var err error
	switch {
	case want == modeDirect && *mode == modeSidecar:
		err = c.BypassSidecar()
	case want == modeSidecar && *mode == modeDirect:
		err = c.UseSidecar()
	case want == modeSidecar:
		err = c.StopSidecar()
		if err == nil {
			err = c.StartSidecar(nil)
		}
	default:
		if err = c.UseSidecar(); err == nil {
			err = c.BypassSidecar()
		}
	}
	*mode = want
	time.Sleep(settle)
	return err
}

// timeWave creates one wave of worker clones together and returns how long
// until every one succeeded, and the CPU time used meanwhile; then it
// deletes them and waits until their volumes are gone, so that every wave
// starts from the same state.
func timeWave(ctx context.Context, c *cluster.Cluster, golden, tag string, o options) (time.Duration, cpuUse, error) {
	names := make([]string, o.wave)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%s-%02d", tag, i)
	}
	mark := markCPU(c)
	start := time.Now()
	errs := make(chan error, len(names))
	for _, n := range names {
		go func() {
			_, err := c.CreateWorkerDisk(ctx, cluster.Worker{Namespace: tenant, Name: n, Pool: "kubernetes-bench",
				Golden: golden, StorageClass: "replicated", Size: "20Gi"})
			errs <- err
		}()
	}
	for range names {
		if err := <-errs; err != nil {
			return 0, cpuUse{}, err
		}
	}
	if err := waitSucceeded(ctx, c, names, o.timeout); err != nil {
		return 0, cpuUse{}, err
	}
	took, cpu := time.Since(start), mark.since(c)
	return took, cpu, cleanUp(ctx, c, names, o)
}

func waitSucceeded(ctx context.Context, c *cluster.Cluster, names []string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.Dynamic.Resource(cluster.DataVolumeGVR).Namespace(tenant).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		done := 0
		for _, u := range l.Items {
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			if slices.Contains(names, u.GetName()) && phase == string(cdiv1.Succeeded) {
				done++
			}
		}
		return done == len(names), c.Failed()
	})
}

// cleanUp deletes the wave's DataVolumes and waits until no PV of the
// tenant is left (the provisioner's DeleteVolume calls are done).
func cleanUp(ctx context.Context, c *cluster.Cluster, names []string, o options) error {
	for _, n := range names {
		if err := c.Dynamic.Resource(cluster.DataVolumeGVR).Namespace(tenant).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, o.timeout, true, func(ctx context.Context) (bool, error) {
		pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, pv := range pvs.Items {
			if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == tenant {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("clean-up: volumes of the wave still there: %w", err)
	}
	time.Sleep(o.settle)
	return nil
}

func printSummary(times map[string][]time.Duration, cpus map[string][]cpuUse, o options) {
	total := map[string]time.Duration{}
	for m, ds := range times {
		for _, d := range ds {
			total[m] += d
		}
	}
	n := o.wave * o.rounds
	fmt.Printf("\n%d waves of %d clones per mode, alternating\n", o.rounds, o.wave)
	for _, m := range []string{modeSidecar, modeDirect} {
		fmt.Printf("%-7s  total %-9s  median wave %-9s  %.1f clones/min  waves %s\n", m, total[m].Round(10*time.Millisecond),
			median(times[m]).Round(10*time.Millisecond), float64(n)/total[m].Minutes(), list(times[m]))
	}
	fmt.Printf("sidecar/direct: total time %.3fx, median wave %.3fx (goal: total within 1.05x)\n",
		total[modeSidecar].Seconds()/total[modeDirect].Seconds(), median(times[modeSidecar]).Seconds()/median(times[modeDirect]).Seconds())
	for _, m := range []string{modeSidecar, modeDirect} {
		var sum cpuUse
		for _, u := range cpus[m] {
			sum = sum.add(u)
		}
		fmt.Printf("%-7s  per clone %.2f cpu-s sidecar, %.2f rest of stack, %.2f harness; machine busy %.2f of %d cores\n", m,
			sum.sidecar/float64(n), sum.stack/float64(n), sum.harness/float64(n), sum.machine/sum.wall.Seconds(), cores())
		fmt.Printf("%-7s  per clone, cpu-s by process: %s\n", m, sum.perProcess(n))
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func list(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(100 * time.Millisecond).String()
	}
	return strings.Join(out, " ")
}
