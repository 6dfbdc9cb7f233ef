// Command csi-clone-sidecar relays a CSI driver's socket byte for byte, taps
// the calls it carries, and (with Kubernetes access) proves per worker disk
// that CDI's clone of a golden image was a same-class CSI clone. This file
// only wires flags to packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/metrics"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// version is set by the build (-ldflags "-X main.version=...").
var version = "dev"

type options struct {
	listenAddress   string
	socketMode      string
	observationsLog string
	queueSize       int
	tap             bool
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "csi-clone-sidecar: %v\n", err)
			os.Exit(1)
		}
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("csi-clone-sidecar", flag.ContinueOnError)
	opts := registerFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := standardflags.Configuration
	if cfg.ShowVersion {
		fmt.Println("csi-clone-sidecar", version)
		return nil
	}
	mode, err := validate(opts, cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, opts, cfg, mode)
}

func registerFlags(fs *flag.FlagSet) *options {
	klog.InitFlags(fs)
	// standardflags registers --metrics-path on the global set; mirror it.
	standardflags.RegisterCommonFlags(fs)
	fs.StringVar(&standardflags.Configuration.MetricsPath, "metrics-path", "/metrics", "The HTTP path where prometheus metrics will be exposed.")
	o := &options{}
	fs.StringVar(&o.listenAddress, "listen-address", "", "Unix socket the CSI sidecars (provisioner, resizer, snapshotter) connect to; every byte is relayed to --csi-address. Required.")
	fs.StringVar(&o.socketMode, "listen-socket-mode", "0660", "Permissions of --listen-address, in octal.")
	fs.StringVar(&o.observationsLog, "observations-log", "", "Append every observed CSI call as a JSON line to this file (debugging; holds no secrets).")
	fs.IntVar(&o.queueSize, "observation-queue", 1024, "Observations that may wait for the verdict engine before new ones are dropped (and counted).")
	fs.BoolVar(&o.tap, "tap", true, "Decode the relayed calls. With --tap=false the relay only copies bytes.")
	return o
}

// parseFlags reports a bad flag in one line instead of the whole usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(discard{})
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.PrintDefaults()
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return err
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func validate(o *options, cfg standardflags.SidecarConfiguration) (os.FileMode, error) {
	if o.listenAddress == "" {
		return 0, errors.New("--listen-address is required (the socket the CSI sidecars should connect to)")
	}
	mode, err := strconv.ParseUint(o.socketMode, 8, 32)
	if err != nil || mode > 0o777 {
		return 0, fmt.Errorf("--listen-socket-mode %q is not an octal permission like 0660", o.socketMode)
	}
	if o.queueSize < 1 {
		return 0, fmt.Errorf("--observation-queue must be at least 1, got %d", o.queueSize)
	}
	if cfg.HttpEndpoint != "" && cfg.MetricsAddress != "" {
		return 0, errors.New("only one of --http-endpoint and --metrics-address can be set")
	}
	return os.FileMode(mode), nil
}

func serve(ctx context.Context, o *options, cfg standardflags.SidecarConfiguration, mode os.FileMode) error {
	m := metrics.New()
	var observers sidecar.Observers
	if o.observationsLog != "" {
		f, err := os.OpenFile(o.observationsLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("failed to open --observations-log: %w", err)
		}
		defer f.Close()
		observers = append(observers, sidecar.NewJSONLines(f))
	}
	relay, err := sidecar.NewRelay(sidecar.Config{
		ListenPath: o.listenAddress, SocketMode: mode, DriverPath: cfg.CSIAddress,
		Observer: observers, Recorder: m, QueueSize: o.queueSize, Tap: o.tap,
	})
	if err != nil {
		return err
	}
	endpoint := cfg.HttpEndpoint
	if endpoint == "" {
		endpoint = cfg.MetricsAddress
	}
	if endpoint != "" {
		if err := metrics.Serve(ctx, endpoint, cfg.MetricsPath, m); err != nil {
			relay.Close()
			return err
		}
	}
	go learnDriverName(ctx, cfg.CSIAddress, m)
	klog.InfoS("Relaying CSI calls", "listen", o.listenAddress, "driver", cfg.CSIAddress, "tap", o.tap, "version", version)
	return relay.Serve(ctx)
}

// learnDriverName asks the driver for its name (for the metrics' driver_name
// label), waiting for it to come up; the relay does not depend on it.
func learnDriverName(ctx context.Context, address string, m *metrics.Metrics) {
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		klog.ErrorS(err, "Cannot ask the driver for its name", "driver", address)
		return
	}
	defer conn.Close()
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		name, err := rpc.GetDriverName(callCtx, conn)
		cancel()
		if err == nil {
			m.SetDriverName(name)
			klog.InfoS("Driver identified", "driver", name)
			return
		}
		klog.V(2).InfoS("Driver not answering GetPluginInfo yet", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}
