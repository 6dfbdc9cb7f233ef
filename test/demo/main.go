// Command csi-clone-demo is `make demo`: on the loopback stack (test/cluster)
// it imports one flavor's golden, creates 20 worker disks in pools that each
// take another path from it (CSI clone, an empty class, a host-assisted
// fallback, another class of the same driver, an HTTP import) and four disks
// of a vm-default-images golden (a vm-disk, one on a class without expansion,
// one through a DataSource, one restoring the golden's VolumeSnapshot) and a
// bare PVC cloning it, no DataVolume, waits for the
// sidecar's verdicts, prints what CDI recorded next to them, the sidecar's
// `report` table (with -html, also its HTML page, written to a file) and its
// key metric lines, and tears everything down. With -keep the stack stays up
// in the background and the demo prints how to reach and stop it.
//
// It prints what happened; it asserts nothing about which verdict each pool
// gets, so a wrong verdict shows up in its output instead of being hidden.
// It must run in a private network namespace: `make demo` builds it and runs
// it under test/e2e/run-in-netns.sh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/demo/pools"
)

type options struct {
	keep    bool   // leave the stack running (KEEP=1)
	sidecar string // the csi-clone-sidecar binary whose `report` is shown
	html    string // where `report -o html` goes ("" = nowhere)
	timeout time.Duration
}

func main() {
	takeStatusPipe()
	var o options
	flag.BoolVar(&o.keep, "keep", false, "Keep the stack running in the background and print how to reach and stop it.")
	flag.StringVar(&o.sidecar, "sidecar", "bin/csi-clone-sidecar", "csi-clone-sidecar binary to run `report` with (make build).")
	flag.StringVar(&o.html, "html", "", "Also write `report -o html` to this file and print its path.")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "Give up if the disks have no final verdict by then.")
	flag.Parse()
	if flag.NArg() > 0 {
		fatal(fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	abs, err := filepath.Abs(o.sidecar)
	if err != nil {
		fatal(err)
	}
	o.sidecar = abs
	if o.html != "" {
		// Absolute, so that the path printed opens from anywhere.
		if o.html, err = filepath.Abs(o.html); err != nil {
			fatal(err)
		}
	}
	if _, err := os.Stat(o.sidecar); err != nil {
		fatal(fmt.Errorf("-sidecar: %w (run `make build`)", err))
	}
	if o.keep && !isDetached() {
		// The stack must outlive this process: run it in a child of its
		// own session and relay its output until it detaches.
		os.Exit(runDetached())
	}
	if err := run(o); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "demo: %v\n", err)
	os.Exit(1)
}

// run brings the stack up, plays the scenario, shows the result and tears the
// stack down (or, with -keep, hands it over to the user).
func run(o options) (err error) {
	if err := cluster.CheckNetNS(); err != nil {
		return fmt.Errorf("%w\n(`make demo` runs it that way)", err)
	}
	defer cluster.RemoveBuilds()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	before, err := cluster.Snapshot()
	if err != nil {
		return err
	}
	t0 := time.Now()
	c, err := startStack()
	if c != nil {
		// Logs are kept when the demo failed, not when it was interrupted.
		defer func() { teardown(c, before, err != nil && ctx.Err() == nil) }()
	}
	if err != nil {
		return err
	}
	playCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	played := play(playCtx, c)
	// A run that timed out still shows what it has; an interrupted one
	// (SIGINT, SIGTERM) or a broken stack goes straight to the teardown.
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	if played != nil && !errors.Is(played, errIncomplete) {
		return played
	}
	if err := show(ctx, c, o.sidecar, o.html); err != nil {
		return errors.Join(played, err)
	}
	if played != nil {
		return played
	}
	fmt.Printf("\ndemo: stack up, %d disks judged and shown in %s\n", pools.DiskCount(), time.Since(t0).Round(100*time.Millisecond))
	if o.keep {
		return handOver(ctx, c, o.sidecar)
	}
	return nil
}

// startStack brings the loopback stack up with the demo's storage classes.
func startStack() (*cluster.Cluster, error) {
	// Where the harness keeps the e2e tests' state: its leak check looks
	// for left-over sockets there.
	dir, err := cluster.NewStateDir("demo-")
	if err != nil {
		return nil, err
	}
	header("stack: etcd, kube-apiserver, kube-controller-manager, test CSI driver behind csi-clone-sidecar, " +
		"csi-provisioner/resizer/snapshotter, snapshot-controller, cdi-controller (state in " + dir + ")")
	return cluster.New(cluster.Options{
		Dir:            dir,
		StorageClasses: pools.StorageClasses(),
		Logf:           func(f string, a ...any) { fmt.Printf("  "+f+"\n", a...) },
	})
}

// teardown stops every component, checks nothing was left behind, and removes
// the state directory unless the demo failed (its logs explain why).
func teardown(c *cluster.Cluster, before cluster.Resources, failed bool) {
	header("teardown")
	err := c.Stop(failed)
	if after, serr := cluster.Snapshot(); serr == nil {
		err = errors.Join(err, before.Leaked(after))
	}
	if err != nil {
		fmt.Printf("  teardown: %v\n", err)
		return
	}
	if failed {
		fmt.Printf("  logs kept in %s\n", c.Dir)
		return
	}
	if rerr := os.RemoveAll(c.Dir); rerr != nil {
		fmt.Printf("  remove %s: %v\n", c.Dir, rerr)
		return
	}
	fmt.Println("  every process stopped, no mount, socket or loop device left; state directory removed")
}

func header(s string) { fmt.Printf("\n== %s\n", s) }
