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
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cozystack/csi-clone-sidecar/cloner"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/metrics"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// version is set by the build (-ldflags "-X main.version=...").
var version = "dev"

type options struct {
	listenAddress   string
	socketMode      string
	healthInterval  time.Duration
	observationsLog string
	queueSize       int
	tap             bool
	verdicts        bool
	pprof           bool
	cloner          config.Config

	// listenPath and driverPath are --listen-address and --csi-address as
	// socket paths, set by validate.
	listenPath, driverPath string
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func runSidecar(args []string) error {
	fs := flag.NewFlagSet("csi-clone-sidecar", flag.ContinueOnError)
	opts := registerFlags(fs)
	if err := parseFlags(lookupCommand("serve"), fs, args); err != nil {
		return err
	}
	cfg := standardflags.Configuration
	if cfg.ShowVersion {
		return runVersion(nil)
	}
	setGCPercent()
	softLimit, err := setMemoryLimit()
	if err != nil {
		return err
	}
	mode, err := validate(opts, cfg)
	if err != nil {
		return err
	}
	if softLimit > 0 {
		klog.V(2).InfoS("Garbage collector keeps the process under a soft memory limit", "bytes", softLimit, "shareOfContainerLimit", softMemoryShare)
	}
	// The data path logs through log/slog; send it to klog with the rest.
	slog.SetDefault(slog.New(logr.ToSlogHandler(klog.Background())))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, opts, cfg, mode)
}

// runReport prints what the verdicts say, per flavor and pool, from the
// state the sidecar persisted; it needs read access only.
func runReport(args []string) error {
	fs := flag.NewFlagSet("csi-clone-sidecar report", flag.ContinueOnError)
	var c config.Config
	registerClonerFlags(fs, &c)
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig; in-cluster config when empty.")
	format := fs.String("o", "table", "Output format: table, json or html (one self-contained page on stdout: inline CSS and SVG, nothing fetched).")
	predictClass := fs.String("predict", "", "Print only the predicted clone path of every golden on this StorageClass (\"(default)\": a disk that names none), with the reason and the fix.")
	cmd := lookupCommand("report")
	if err := parseFlags(cmd, fs, args); err != nil {
		return err
	}
	switch {
	case *format != "table" && *format != "json" && *format != report.FormatHTML:
		return &usageError{cmd, fmt.Errorf("-o %q: want table, json or html", *format)}
	case *format == report.FormatHTML && *predictClass != "":
		return &usageError{cmd, errors.New("-o html does not go with --predict: the page shows every class's predicted path; use -o table or json with --predict")}
	}
	if err := c.ValidateReport(); err != nil {
		return err
	}
	clients, _, err := kubeClients(standardflags.SidecarConfiguration{KubeConfig: *kubeconfig, KubeAPIQPS: 20, KubeAPIBurst: 40})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if *predictClass != "" {
		return report.ReportClonePaths(ctx, clients, c, os.Stdout, *format, *predictClass)
	}
	return report.Report(ctx, clients, c, os.Stdout, *format)
}

func registerFlags(fs *flag.FlagSet) *options {
	klog.InitFlags(fs)
	// standardflags registers --metrics-path on the global set; mirror it.
	standardflags.RegisterCommonFlags(fs)
	fs.StringVar(&standardflags.Configuration.MetricsPath, "metrics-path", "/metrics", "The HTTP path where prometheus metrics will be exposed.")
	overrideDefault(fs, "kube-api-qps", strconv.Itoa(defaultKubeAPIQPS), "QPS to use while communicating with the kubernetes apiserver.")
	overrideDefault(fs, "kube-api-burst", strconv.Itoa(defaultKubeAPIBurst), "Burst to use while communicating with the kubernetes apiserver.")
	o := &options{}
	fs.StringVar(&o.listenAddress, "listen-address", "", "Unix socket the CSI sidecars (provisioner, resizer, snapshotter) connect to, as /path or unix:///path; every byte is relayed to --csi-address (same forms). Required.")
	fs.StringVar(&o.socketMode, "listen-socket-mode", "0660", "Permissions of --listen-address, in octal.")
	fs.DurationVar(&o.healthInterval, "health-probe-interval", 10*time.Second, "How often the driver is asked for Probe (each probe may take as long); /readyz fails and csi_clone_driver_ready is 0 when it has not answered ready for two intervals. /healthz (liveness) does not depend on the driver.")
	fs.StringVar(&o.observationsLog, "observations-log", "", "Append every observed CSI call as a JSON line to this file (debugging; holds no secrets).")
	fs.IntVar(&o.queueSize, "observation-queue", 1024, "Observations that may wait for the verdict engine before new ones are dropped (and counted).")
	fs.BoolVar(&o.tap, "tap", true, "Decode the relayed calls. With --tap=false the relay only copies bytes.")
	fs.BoolVar(&o.verdicts, "verdicts", true, "Watch Kubernetes and give each worker disk a verdict. With --verdicts=false only the relay and its metrics run (no Kubernetes access needed).")
	fs.BoolVar(&o.pprof, "enable-pprof", false, "Serve Go's profiles under /debug/pprof/ on --http-endpoint (debugging; a profile costs the data path time while it runs).")
	registerClonerFlags(fs, &o.cloner)
	return o
}

func registerClonerFlags(fs *flag.FlagSet, c *config.Config) {
	*c = config.DefaultConfig()
	fs.StringVar(&c.GoldenNamespace, "golden-namespace", c.GoldenNamespace, "Namespaces of the goldens, comma-separated (e.g. cozy-public or cozy-public,golden-images): every DataVolume or VolumeSnapshot there that a disk clones is a golden.")
	fs.DurationVar(&c.StuckAfter, "stuck-after", c.StuckAfter, "A requested clone not bound after this long is reported as stuck.")
	fs.DurationVar(&c.ResyncPeriod, "resync-period", c.ResyncPeriod, "Spacing of full verdict passes (a safety net: a change re-judges the disks it touches at once).")
	fs.StringVar(&c.LedgerNamespace, "ledger-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the ledger ConfigMap and the leader election Lease (default $POD_NAMESPACE).")
	fs.StringVar(&c.LedgerName, "ledger-name", c.LedgerName, "Name of the ConfigMap that keeps the fetch counters across restarts.")
	fs.Int64Var(&c.FactoryImageBytes, "factory-image-bytes", 0, "Bytes one Image Factory fetch transfers; 0 counts a fetch as the golden volume's size.")
	fs.DurationVar(&c.EvidenceTTL, "evidence-ttl", c.EvidenceTTL, "How long evidence waits for its PV or PVC to appear.")
	fs.DurationVar(&c.EvidenceGrace, "evidence-grace", c.EvidenceGrace, "How long a finished disk whose PV has no tap evidence yet waits for it before it is judged from CDI's annotations, and how long CDI must keep an error on a clone (clonePhase Error) before the disk is failed.")
	fs.IntVar(&c.EvidenceQueue, "evidence-queue", c.EvidenceQueue, "Observations that may wait to be turned into evidence before new ones are dropped.")
	fs.BoolVar(&c.AdmissionParams, "admission-params", false, "Keep the admission guard's parameters (ConfigMap "+publish.AdmissionParamsName+" in --ledger-namespace) current; turn on with deploy/admission.")
	fs.BoolVar(&c.AdmissionAllowClassMismatch, "admission-allow-class-mismatch", false, "Let the admission guard admit, without a warning, a disk onto another StorageClass than its golden's (its verdict still flags class-mismatch).")
}

// defaultGCPercent is the garbage collector's target when GOGC is not set.
// Nearly all of the sidecar's heap is its long-lived informer caches, so
// Go's default (collect when the heap has doubled) lets the process grow to
// twice what it holds; at 25 it stays within 1.25 times, for more
// collections while the caches fill and few after (README, Scale: 10,000
// disks peak at 176 MiB instead of 205, for 17 CPU-seconds to judge them
// instead of 14). GOGC in the environment overrides it.
const defaultGCPercent = 25

func setGCPercent() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// memoryLimitEnv carries the container's memory limit in bytes; the
// manifests in deploy/ set it from the downward API (limits.memory).
const memoryLimitEnv = "MEMORY_LIMIT"

// softMemoryShare is the share of the container's memory limit the Go
// runtime is asked to stay under. The relay lives in this process: a fleet
// that outgrows the limit should make the collector work harder, not get
// every relayed connection killed with the process. The rest of the limit is
// for what the runtime does not count, the binary's mapped code (about
// 30 MiB). GOMEMLIMIT in the environment overrides it.
const softMemoryShare = 0.9

// setMemoryLimit returns the soft limit it set, 0 if none.
func setMemoryLimit() (int64, error) {
	value, set := os.LookupEnv(memoryLimitEnv)
	if _, own := os.LookupEnv("GOMEMLIMIT"); own || !set || value == "" {
		return 0, nil
	}
	limit, err := strconv.ParseInt(value, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("$%s=%q: want the container's memory limit in bytes, as the downward API's resourceFieldRef limits.memory gives it", memoryLimitEnv, value)
	}
	soft := int64(float64(limit) * softMemoryShare)
	debug.SetMemoryLimit(soft)
	return soft, nil
}

// The client's rate limit. csi-lib-utils' 5/10 would make a 10,000-disk
// fleet wait half an hour for its verdicts after an upgrade that changes
// every record (one PVC patch per disk); at 200/s the patches take under a
// minute, and a fleet whose records are unchanged costs nothing (README,
// Scale).
const (
	defaultKubeAPIQPS   = 200
	defaultKubeAPIBurst = 400
)

// overrideDefault changes the default of a flag another package registered.
func overrideDefault(fs *flag.FlagSet, name, value, usage string) {
	f := fs.Lookup(name)
	if err := f.Value.Set(value); err != nil {
		panic(err) // our own constant: cannot happen
	}
	f.DefValue, f.Usage = value, usage
}

// validate checks the flags, resolves the two socket addresses into o and
// returns the listen socket's mode.
func validate(o *options, cfg standardflags.SidecarConfiguration) (os.FileMode, error) {
	if o.listenAddress == "" {
		return 0, errors.New("--listen-address is required (the socket the CSI sidecars should connect to)")
	}
	var err error
	if o.listenPath, err = sidecar.SocketPath(o.listenAddress); err != nil {
		return 0, fmt.Errorf("--listen-address: %w", err)
	}
	if o.driverPath, err = sidecar.SocketPath(cfg.CSIAddress); err != nil {
		return 0, fmt.Errorf("--csi-address: %w", err)
	}
	if o.healthInterval <= 0 {
		return 0, fmt.Errorf("--health-probe-interval must be positive, got %v", o.healthInterval)
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
	if o.pprof && cfg.HttpEndpoint == "" && cfg.MetricsAddress == "" {
		return 0, errors.New("--enable-pprof needs --http-endpoint (the profiles are served there)")
	}
	if o.verdicts {
		if err := o.cloner.Validate(); err != nil {
			return 0, err
		}
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
	var ctrl *cloner.Controller
	var kube kubernetes.Interface
	if o.verdicts {
		var err error
		if ctrl, kube, err = newVerdicts(o, cfg, m); err != nil {
			return err
		}
		observers = append(observers, ctrl)
	}
	relay, err := sidecar.NewRelay(sidecar.Config{
		ListenPath: o.listenPath, SocketMode: mode, DriverPath: o.driverPath,
		Observer: observers, Recorder: m, QueueSize: o.queueSize, Tap: o.tap,
	})
	if err != nil {
		return err
	}
	if err := serveHTTP(ctx, o, cfg, m, relay); err != nil {
		relay.Close()
		return err
	}
	// The informers and the evidence loop outlive ctx (the signal): the
	// relay hands what its tap still had queued to the cloner while it
	// closes, and that must reach the PVs before they stop.
	evidenceCtx, stopEvidence := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEvidence()
	// Only now, with the socket listening, may anything wait on the API
	// server: the CSI sidecars give up on a socket that does not answer.
	if ctrl != nil {
		startVerdicts(ctx, evidenceCtx, ctrl, kube, o, cfg)
	}
	go learnDriverName(ctx, o.driverPath, m)
	klog.InfoS("Relaying CSI calls", "listen", o.listenPath, "driver", o.driverPath, "tap", o.tap, "version", version)
	err = relay.Serve(ctx)
	if ctrl != nil {
		finishEvidence(ctrl)
	}
	return err
}

// evidenceShutdownTimeout bounds how long the evidence of the calls the
// relay decoded may take to reach the PVs at shutdown, after the relay's
// own 10 s: 20 s in all, within Kubernetes' default grace period of 30 s.
const evidenceShutdownTimeout = 10 * time.Second

// finishEvidence persists what the relay's tap delivered while it closed.
func finishEvidence(ctrl *cloner.Controller) {
	ctx, cancel := context.WithTimeout(context.Background(), evidenceShutdownTimeout)
	defer cancel()
	if err := ctrl.FinishEvidence(ctx); err != nil {
		klog.ErrorS(err, "Shutting down with evidence not persisted; verdicts of those disks fall back to CDI's annotations")
		return
	}
	klog.V(2).InfoS("Evidence of every decoded call persisted")
}

// serveHTTP starts the metrics, /healthz and /readyz endpoint, if one is
// set. /healthz (liveness) fails only while the relay's Serve loop does not
// accept: a restart heals that and nothing else. The driver's Probe is
// /readyz's and csi_clone_driver_ready's business: restarting the relay
// heals no driver and cuts every connection it carries. Kubernetes is part
// of neither: a slow API server must not get the data path restarted.
func serveHTTP(ctx context.Context, o *options, cfg standardflags.SidecarConfiguration, m *metrics.Metrics, relay *sidecar.Relay) error {
	endpoint := cfg.HttpEndpoint
	if endpoint == "" {
		endpoint = cfg.MetricsAddress
	}
	if endpoint == "" {
		return nil
	}
	probe := sidecar.NewDriverProbe(o.driverPath, o.healthInterval)
	if err := m.Register(metrics.NewDriverCollector(probe.Status)); err != nil {
		return err
	}
	go probe.Run(ctx)
	listening := func() error {
		// Well below the 5s timeout of the probes in deploy/.
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return relay.CheckListener(ctx)
	}
	return metrics.Serve(ctx, metrics.Endpoint{Addr: endpoint, MetricsPath: cfg.MetricsPath, Pprof: o.pprof,
		Live: []metrics.HealthCheck{listening}, Ready: []metrics.HealthCheck{probe.Check}}, m)
}

// newVerdicts builds the cloner without touching the network yet.
func newVerdicts(o *options, cfg standardflags.SidecarConfiguration, m *metrics.Metrics) (*cloner.Controller, kubernetes.Interface, error) {
	clients, kube, err := kubeClients(cfg)
	if err != nil {
		return nil, nil, err
	}
	ctrl, err := cloner.New(o.cloner, clients)
	if err != nil {
		return nil, nil, err
	}
	if err := m.Register(metrics.NewCloneCollector(ctrl)); err != nil {
		return nil, nil, err
	}
	if err := m.Register(metrics.NewPredictionCollector(ctrl)); err != nil {
		return nil, nil, err
	}
	return ctrl, kube, nil
}

// startVerdicts starts the cloner: evidence on every replica for the life of
// evidenceCtx (with the informers), verdicts on the elected leader only, for
// the life of ctx. It returns at once.
func startVerdicts(ctx, evidenceCtx context.Context, ctrl *cloner.Controller, kube kubernetes.Interface, o *options, cfg standardflags.SidecarConfiguration) {
	ctrl.Start(evidenceCtx)
	go func() { logIfFailed("evidence loop", ctrl.RunEvidence(evidenceCtx)) }()
	lead := func(ctx context.Context) { logIfFailed("verdict loop", ctrl.RunVerdicts(ctx)) }
	if !cfg.LeaderElection {
		go lead(ctx)
		return
	}
	ns := cfg.LeaderElectionNamespace
	if ns == "" {
		ns = o.cloner.LedgerNamespace
	}
	le := cloner.LeaderConfig{Namespace: ns, LeaseName: "csi-clone-sidecar",
		LeaseDuration: cfg.LeaderElectionLeaseDuration, RenewDeadline: cfg.LeaderElectionRenewDeadline, Retry: cfg.LeaderElectionRetryPeriod}
	go func() { logIfFailed("leader election", cloner.RunElected(ctx, kube, le, lead)) }()
}

func kubeClients(cfg standardflags.SidecarConfiguration) (config.Clients, kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if cfg.KubeConfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.KubeConfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return config.Clients{}, nil, fmt.Errorf("no Kubernetes access (pass --kubeconfig, run in a pod, or --verdicts=false): %w", err)
	}
	rc.QPS, rc.Burst = float32(cfg.KubeAPIQPS), cfg.KubeAPIBurst
	rc.UserAgent = "csi-clone-sidecar/" + version
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return config.Clients{}, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return config.Clients{}, nil, err
	}
	return config.Clients{Kube: kube, Dynamic: dyn}, kube, nil
}

func logIfFailed(what string, err error) {
	if err != nil {
		klog.ErrorS(err, "Stopped; the relay goes on", "part", what)
	}
}

// learnDriverName asks the driver at path (a socket path, as SocketPath
// returns) for its name (for the metrics' driver_name label), waiting for it
// to come up; the relay does not depend on it.
func learnDriverName(ctx context.Context, path string, m *metrics.Metrics) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		klog.ErrorS(err, "Cannot ask the driver for its name", "driver", path)
		return
	}
	defer conn.Close()
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		name, err := rpc.GetDriverName(callCtx, conn)
		cancel()
		if err == nil {
			if err := m.SetDriverName(name); err != nil {
				klog.ErrorS(err, "Driver answered GetPluginInfo with a name the metrics cannot carry")
				return
			}
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
