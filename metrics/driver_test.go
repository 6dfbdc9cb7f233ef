package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// TestDriverCollector: the driver's state as series, every result of the
// closed set present (a counter that appears only at its first increment
// makes rate() miss it), the last-ready timestamp only once there is one.
func TestDriverCollector(t *testing.T) {
	cases := map[string]struct {
		status sidecar.DriverStatus
		want   string
	}{
		"never answered": {sidecar.DriverStatus{Probes: probes(0, 0, 0)}, driverSeries("", 0, 0, 0, 0)},
		"ready": {sidecar.DriverStatus{Ready: true, LastReady: time.Unix(1700000000, 500_000_000), Probes: probes(7, 1, 2)},
			driverSeries("1.7000000005e+09", 1, 7, 1, 2)},
		"down since": {sidecar.DriverStatus{LastReady: time.Unix(1700000000, 0), Probes: probes(3, 0, 9)},
			driverSeries("1.7e+09", 0, 3, 0, 9)},
	}
	for name, tc := range cases {
		c := NewDriverCollector(func() sidecar.DriverStatus { return tc.status })
		if err := testutil.CollectAndCompare(c, strings.NewReader(driverExposition(tc.want))); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func probes(ready, notReady, failed uint64) map[string]uint64 {
	return map[string]uint64{sidecar.ProbeReady: ready, sidecar.ProbeNotReady: notReady, sidecar.ProbeFailed: failed}
}

// driverSeries is the exposition of one driver state; lastReady "" means
// never ready (no timestamp series).
func driverSeries(lastReady string, ready int, probesReady, probesNotReady, probesFailed uint64) string {
	var b strings.Builder
	if lastReady != "" {
		fmt.Fprintf(&b, "csi_clone_driver_last_ready_timestamp_seconds %s\n", lastReady)
	}
	fmt.Fprintf(&b, "csi_clone_driver_probes_total{result=\"failed\"} %d\n", probesFailed)
	fmt.Fprintf(&b, "csi_clone_driver_probes_total{result=\"not_ready\"} %d\n", probesNotReady)
	fmt.Fprintf(&b, "csi_clone_driver_probes_total{result=\"ready\"} %d\n", probesReady)
	fmt.Fprintf(&b, "csi_clone_driver_ready %d\n", ready)
	return b.String()
}

// driverExposition adds the HELP and TYPE lines to the series.
func driverExposition(series string) string {
	return `# HELP csi_clone_driver_last_ready_timestamp_seconds When the driver last answered Probe ready, in Unix seconds; absent until it first did.
# TYPE csi_clone_driver_last_ready_timestamp_seconds gauge
# HELP csi_clone_driver_probes_total Probes of the driver's Identity service, by result (ready, not_ready, failed: no answer within the interval, an error, nothing listening).
# TYPE csi_clone_driver_probes_total counter
# HELP csi_clone_driver_ready 1 while the driver answered Probe ready within the last two --health-probe-interval (what /readyz checks besides the relay), else 0. Liveness (/healthz) never depends on it.
# TYPE csi_clone_driver_ready gauge
` + series
}
