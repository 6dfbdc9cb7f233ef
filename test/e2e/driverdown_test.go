package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/linstorpod"
)

// driverDownProbeInterval is the sidecar's --health-probe-interval here,
// a tenth of the default (10s); the liveness probe the test plays kubelet
// for is scaled by the same factor.
const (
	driverDownProbeInterval = time.Second
	driverDownScale         = 10
)

// TestDriverDownLeavesTheRelayAlone hangs the CSI driver (SIGSTOP: its
// socket still accepts, nothing answers, as a LINSTOR driver whose
// controller is unreachable) for longer than the sidecar's liveness window,
// while the test plays kubelet with the liveness probe deploy/ ships. The
// liveness probe must pass throughout (a restart of the relay would heal no
// driver and cut every connection it carries); /readyz and
// csi_clone_driver_ready must say the driver is down; and once the driver
// is back, the connections relayed before the outage are the same ones:
// the test's own gRPC connection answers without a new dial, and no
// kubernetes-csi sidecar exited on a lost connection.
func TestDriverDownLeavesTheRelayAlone(t *testing.T) {
	checkNoLeaks(t)
	liveness := deployedLivenessProbe(t)
	period := time.Duration(liveness.PeriodSeconds) * time.Second / driverDownScale
	c := cluster.Start(t, cluster.Options{NoCDI: true,
		SidecarArgs: []string{"--health-probe-interval=" + driverDownProbeInterval.String()}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base := "http://" + c.SidecarMetrics
	waitEndpoint(t, ctx, base+"/healthz", http.StatusOK, "ok")

	// A connection through the relay from before the outage, and the
	// processes that hold the others.
	var dials atomic.Int32
	conn, err := grpc.NewClient("passthrough:///relay", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "unix", c.SidecarSocket)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pluginInfo(t, ctx, conn)
	pids := map[string]int{}
	for _, name := range []string{"csi-clone-sidecar", "csi-provisioner", "csi-resizer", "csi-snapshotter"} {
		pids[name] = c.Pid(name)
	}
	failedBefore, _ := scrapeSidecar(t, c).value("csi_clone_driver_probes_total", map[string]string{"result": "failed"})

	if err := c.FreezeDriver(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			c.ThawDriver()
		}
	}()
	// Play kubelet: probe /healthz every period; failureThreshold failures
	// in a row would restart the container. The outage lasts until the
	// driver has been reported down for more than a whole liveness window.
	var failures, roundsDown int
	for roundsDown <= int(liveness.FailureThreshold) {
		code, body := getEndpoint(base+"/healthz", time.Duration(liveness.TimeoutSeconds)*time.Second)
		if code != http.StatusOK {
			failures++
			t.Logf("liveness probe failed (%d in a row): %d %q", failures, code, body)
		} else {
			failures = 0
		}
		if failures >= int(liveness.FailureThreshold) {
			t.Fatalf("the kubelet would restart csi-clone-sidecar now, for a driver that does not answer: %d liveness failures in a row, the last %d %q", failures, code, body)
		}
		if code, body := getEndpoint(base+"/readyz", 5*time.Second); code == http.StatusServiceUnavailable && strings.Contains(body, "did not answer Probe since") {
			roundsDown++
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the driver was never reported down while frozen (/readyz, %d rounds)", roundsDown)
		case <-time.After(period):
		}
	}
	s := scrapeSidecar(t, c)
	if ready, ok := s.value("csi_clone_driver_ready", nil); !ok || ready != 0 {
		t.Errorf("csi_clone_driver_ready = %v (present %v) with the driver frozen, want 0", ready, ok)
	}
	failedAfter, _ := s.value("csi_clone_driver_probes_total", map[string]string{"result": "failed"})
	t.Logf("driver reported down for %d liveness periods of %v (the window is %d), %v failed driver probes meanwhile, /healthz ok throughout",
		roundsDown, period, liveness.FailureThreshold, failedAfter-failedBefore)
	if failedAfter-failedBefore < float64(liveness.FailureThreshold) {
		t.Errorf("failed driver probes during the outage: %v, want at least one per liveness period (%d)", failedAfter-failedBefore, liveness.FailureThreshold)
	}

	if err := c.ThawDriver(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	waitEndpoint(t, ctx, base+"/readyz", http.StatusOK, "ok")
	if ready, _ := scrapeSidecar(t, c).value("csi_clone_driver_ready", nil); ready != 1 {
		t.Errorf("csi_clone_driver_ready = %v after the driver is back, want 1", ready)
	}
	pluginInfo(t, ctx, conn)
	if n := dials.Load(); n != 1 {
		t.Errorf("the connection relayed before the outage was dialled %d times, want 1 (the same connection throughout)", n)
	}
	for name, pid := range pids {
		if now := c.Pid(name); now != pid {
			t.Errorf("%s is pid %d after the outage, was %d", name, now, pid)
		}
	}
	if err := c.Failed(); err != nil {
		t.Errorf("a component exited during the outage: %v", err)
	}
}

// deployedLivenessProbe is csi-clone-sidecar's livenessProbe as deploy/
// ships it (deploy/linstor/podtemplate.yaml, rendered from the chart; the
// deploy tests keep the kustomize overlay's equal).
func deployedLivenessProbe(t *testing.T) corev1.Probe {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, "linstor", "podtemplate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tmpl struct{ Spec corev1.PodSpec }
	if err := yaml.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	sc, err := linstorpod.Find(tmpl.Spec, linstorpod.Sidecar)
	if err != nil {
		t.Fatal(err)
	}
	p := sc.LivenessProbe
	if p == nil || p.HTTPGet == nil || p.PeriodSeconds == 0 || p.FailureThreshold == 0 || p.TimeoutSeconds == 0 {
		t.Fatalf("deploy/'s liveness probe %+v: want an httpGet with period, timeout and failure threshold", p)
	}
	return *p
}

func pluginInfo(t *testing.T, ctx context.Context, conn *grpc.ClientConn) {
	t.Helper()
	callCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := csi.NewIdentityClient(conn).GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{}); err != nil {
		t.Fatalf("GetPluginInfo through the relay: %v", err)
	}
}

// getEndpoint GETs url; a failed request is code 0 with the error as body.
func getEndpoint(url string, timeout time.Duration) (int, string) {
	client := http.Client{Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitEndpoint polls url until it answers code with a body containing want.
func waitEndpoint(t *testing.T, ctx context.Context, url string, code int, want string) {
	t.Helper()
	var last string
	for {
		got, body := getEndpoint(url, 5*time.Second)
		if got == code && strings.Contains(body, want) {
			return
		}
		last = fmt.Sprintf("%d %q", got, body)
		select {
		case <-ctx.Done():
			t.Fatalf("%s = %s; want %d with %q", url, last, code, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
