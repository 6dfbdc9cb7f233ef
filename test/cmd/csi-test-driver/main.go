// Command csi-test-driver runs the LINSTOR-like test CSI driver of package
// test/csidriver on a unix socket: flags in, csidriver.Config out.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-test-driver: %v\n", err)
		os.Exit(2)
	}
	cfg.OnExitAfter = func() {
		klog.Flush()
		os.Exit(csidriver.ExitAfterStatus)
	}
	d, err := csidriver.Start(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-test-driver: %v\n", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		klog.InfoS("stopping", "signal", s.String())
		d.Stop()
	case <-d.Done():
	}
	klog.Flush()
}

// parseFlags turns the command line into a validated Config. Errors are one
// line; usage goes to out only for -h.
func parseFlags(args []string, out io.Writer) (csidriver.Config, error) {
	fs := flag.NewFlagSet("csi-test-driver", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	klog.InitFlags(fs)
	var (
		cfg        csidriver.Config
		pools      csidriver.PoolsFlag
		capacities = csidriver.SizesFlag{}
		delays     = csidriver.DelaysFlag{}
		fails      = csidriver.CodesFlag{}
		mode       string
	)
	fs.StringVar(&cfg.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint, unix:///path/to.sock (a stale socket there is removed)")
	fs.StringVar(&cfg.StateDir, "state-dir", "/var/lib/csi-test-driver", "directory for volume and snapshot data and metadata")
	fs.StringVar(&cfg.DriverName, "drivername", csidriver.DefaultDriverName, "name reported by GetPluginInfo")
	fs.StringVar(&cfg.NodeID, "node-id", csidriver.DefaultNodeID, "the one node that exists (NodeGetInfo, ControllerPublishVolume)")
	fs.Var(&pools, "pool", "storage pool NAME or NAME:node-local; repeatable; default: one pool \""+csidriver.DefaultPoolName+"\"")
	fs.StringVar(&cfg.DefaultPool, "default-pool", "", "pool used when a request has no "+csidriver.PoolParameter+" parameter (default: the first --pool)")
	fs.Var(capacities, "capacity", "POOL=SIZE (e.g. replicated=100Gi); repeatable; default 1Ti per pool")
	fs.StringVar(&mode, "node-local-clone", string(csidriver.CloneHang),
		"clone into a node-local pool from another pool: hang (until the caller's deadline, like LINSTOR) or fail")
	fs.Var(delays, "delay", "METHOD=DURATION, delay every call of a CSI method (e.g. CreateVolume=2s); repeatable")
	fs.Var(fails, "fail", "METHOD=CODE, answer every call of a CSI method with a gRPC code (e.g. ControllerExpandVolume=Unavailable); repeatable")
	fs.Var(&cfg.Faults.FailClones, "fail-clones", "CODE:N, answer the first N CreateVolume calls that copy a volume or snapshot with a gRPC code (e.g. ResourceExhausted:3), then run them")
	fs.IntVar(&cfg.Faults.ExitAfter, "exit-after", 0, fmt.Sprintf("exit with status %d once N calls have been answered (0: never)", csidriver.ExitAfterStatus))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(out)
			fmt.Fprintf(out, "Usage of csi-test-driver (methods: %s):\n", strings.Join(csidriver.CSIMethods(), ", "))
			fs.PrintDefaults()
		}
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for i, p := range pools {
		if c, ok := capacities[p.Name]; ok {
			pools[i].CapacityBytes = c
			delete(capacities, p.Name)
		}
	}
	for name := range capacities {
		if name != csidriver.DefaultPoolName || len(pools) > 0 {
			return cfg, fmt.Errorf("--capacity names pool %q, which no --pool defines", name)
		}
		pools = csidriver.PoolsFlag{{Name: name, CapacityBytes: capacities[name]}}
	}
	cfg.Pools = pools
	cfg.NodeLocalClone = csidriver.CloneMode(mode)
	cfg.Faults.Delay, cfg.Faults.Fail = delays, fails
	return cfg, cfg.Validate()
}
