// Command bench measures what the relay costs: the same unary CSI call sent
// straight to the test driver and through the relay (tap on, metrics on),
// alternating in one process so both see the same machine. It prints p50,
// p99 and throughput with their ratios. It measures; it asserts nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/metrics"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
)

func main() {
	rounds := flag.Int("rounds", 10, "alternating rounds per mode")
	calls := flag.Int("calls", 2000, "sequential calls per latency round")
	window := flag.Duration("window", time.Second, "length of each throughput round")
	workers := flag.Int("workers", 16, "concurrent callers in throughput rounds")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (all modes) to this file")
	flag.Parse()
	// The test driver logs every call; that is the same cost in every mode
	// but it is noise, and a terminal makes it slow noise.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer stop()
	}
	if err := run(*rounds, *calls, *window, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
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

type mode struct {
	name      string
	client    csi.ControllerClient
	latencies []time.Duration
	done      int64
	elapsed   time.Duration
}

func run(rounds, calls int, window time.Duration, workers int) error {
	dir, err := os.MkdirTemp("", "csi-clone-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	driverSock, relaySock := filepath.Join(dir, "driver.sock"), filepath.Join(dir, "relay.sock")
	bareSock := filepath.Join(dir, "bare.sock")
	drv, err := csidriver.Start(csidriver.Config{Endpoint: driverSock, StateDir: filepath.Join(dir, "state")})
	if err != nil {
		return err
	}
	defer drv.Stop()
	var observed atomic.Int64
	for _, cfg := range []sidecar.Config{
		{ListenPath: relaySock, DriverPath: driverSock, Tap: true, Recorder: metrics.New(),
			Observer: sidecar.ObserverFunc(func(sidecar.Observation) { observed.Add(1) })},
		{ListenPath: bareSock, DriverPath: driverSock},
	} {
		relay, err := sidecar.NewRelay(cfg)
		if err != nil {
			return err
		}
		go relay.Serve(context.Background())
		defer relay.Close()
	}

	direct, err := newMode("direct", driverSock)
	if err != nil {
		return err
	}
	relayed, err := newMode("relay+tap", relaySock)
	if err != nil {
		return err
	}
	bare, err := newMode("bare relay", bareSock)
	if err != nil {
		return err
	}
	modes := []*mode{direct, relayed, bare}
	for _, m := range modes { // warm up connections and code paths
		m.latencyRound(200)
	}
	for _, m := range modes {
		m.latencies = nil
	}
	for r := 0; r < rounds; r++ {
		for _, m := range modes {
			if err := m.latencyRound(calls); err != nil {
				return err
			}
			m.throughputRound(window, workers)
		}
	}
	report(direct, relayed, bare, observed.Load())
	return nil
}

func newMode(name, sock string) (*mode, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &mode{name: name, client: csi.NewControllerClient(conn)}, nil
}

func (m *mode) call() error {
	_, err := m.client.ControllerGetCapabilities(context.Background(), &csi.ControllerGetCapabilitiesRequest{})
	return err
}

func (m *mode) latencyRound(n int) error {
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := m.call(); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		m.latencies = append(m.latencies, time.Since(start))
	}
	return nil
}

func (m *mode) throughputRound(window time.Duration, workers int) {
	var done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(window)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if m.call() == nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	m.done += done.Load()
	m.elapsed += time.Since(start)
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func report(direct, relayed, bare *mode, observed int64) {
	dp50, rp50 := percentile(direct.latencies, .5), percentile(relayed.latencies, .5)
	dp99, rp99 := percentile(direct.latencies, .99), percentile(relayed.latencies, .99)
	dtp := float64(direct.done) / direct.elapsed.Seconds()
	rtp := float64(relayed.done) / relayed.elapsed.Seconds()
	fmt.Printf("ControllerGetCapabilities, %d sequential calls per mode, throughput over %v per mode\n", len(direct.latencies), direct.elapsed.Round(time.Millisecond))
	fmt.Printf("%-10s %10s %10s %12s\n", "mode", "p50", "p99", "calls/s")
	fmt.Printf("%-10s %10v %10v %12.0f\n", direct.name, dp50, dp99, dtp)
	fmt.Printf("%-10s %10v %10v %12.0f\n", relayed.name, rp50, rp99, rtp)
	fmt.Printf("ratio      %9.2fx %9.2fx %11.2fx   (goal: p50 <= 1.30x, p99 <= 1.40x, throughput >= 0.75x)\n",
		float64(rp50)/float64(dp50), float64(rp99)/float64(dp99), rtp/dtp)
	fmt.Printf("reference: the relay without its tap: p50 %.2fx, p99 %.2fx, throughput %.2fx\n",
		float64(percentile(bare.latencies, .5))/float64(dp50), float64(percentile(bare.latencies, .99))/float64(dp99),
		float64(bare.done)/bare.elapsed.Seconds()/dtp)
	fmt.Printf("observations delivered by the tap: %d\n", observed)
}
