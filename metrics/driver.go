package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

var (
	descDriverReady = prometheus.NewDesc("csi_clone_driver_ready",
		"1 while the driver answered Probe ready within the last two --health-probe-interval (what /readyz checks besides the relay), else 0. Liveness (/healthz) never depends on it.",
		nil, nil)
	descDriverLastReady = prometheus.NewDesc("csi_clone_driver_last_ready_timestamp_seconds",
		"When the driver last answered Probe ready, in Unix seconds; absent until it first did.",
		nil, nil)
	descDriverProbes = prometheus.NewDesc("csi_clone_driver_probes_total",
		"Probes of the driver's Identity service, by result (ready, not_ready, failed: no answer within the interval, an error, nothing listening).",
		[]string{"result"}, nil)
)

// driverCollector reads the driver probe's state at scrape time.
type driverCollector struct{ status func() sidecar.DriverStatus }

// NewDriverCollector exports what status (a DriverProbe's Status) says of
// the driver.
func NewDriverCollector(status func() sidecar.DriverStatus) prometheus.Collector {
	return driverCollector{status: status}
}

func (driverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDriverReady
	ch <- descDriverLastReady
	ch <- descDriverProbes
}

func (c driverCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	ready := 0.0
	if st.Ready {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descDriverReady, prometheus.GaugeValue, ready)
	if !st.LastReady.IsZero() {
		ch <- prometheus.MustNewConstMetric(descDriverLastReady, prometheus.GaugeValue, float64(st.LastReady.UnixNano())/1e9)
	}
	for _, result := range sidecar.ProbeOutcomes {
		ch <- prometheus.MustNewConstMetric(descDriverProbes, prometheus.CounterValue, float64(st.Probes[result]), result)
	}
}
