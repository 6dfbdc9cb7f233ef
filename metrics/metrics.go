// Package metrics is csi-clone-sidecar's Prometheus exposition: the standard
// csi_sidecar_operations_seconds histogram for every call the tap sees, the
// tap's own health counters, and the HTTP endpoint (metrics and /healthz)
// that also serves the collectors other packages register.
package metrics

import (
	"fmt"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// Metrics implements sidecar.Recorder and owns the registries served on the
// metrics path.
type Metrics struct {
	operations *operations
	registry   *prometheus.Registry

	tapped    prometheus.Counter
	abandoned *prometheus.CounterVec
	dropped   prometheus.Counter
	undecoded *prometheus.CounterVec
}

// New returns metrics with the tap's counters registered. The driver name is
// "unknown-driver" until SetDriverName is called, as in csi-lib-utils.
func New() *Metrics {
	m := &Metrics{
		operations: newOperations(),
		registry:   prometheus.NewRegistry(),
		tapped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "csi_clone_tap_connections_total",
			Help: "Relayed CSI connections the tap started to follow.",
		}),
		abandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "csi_clone_tap_connections_abandoned_total",
			Help: "Relayed CSI connections the tap stopped following (the relay went on untapped), by reason.",
		}, []string{"reason"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "csi_clone_tap_observations_dropped_total",
			Help: "Decoded CSI calls lost because the queue to the verdict engine was full or it failed.",
		}),
	}
	m.undecoded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "csi_clone_tap_calls_undecoded_total",
		Help: "Finished CSI calls of a method the tap decodes whose messages it could not decode (too large, compressed, malformed, truncated, over the shared buffer budget, too many at once), by reason; they reach no verdict.",
	}, []string{"reason"})
	m.registry.MustRegister(m.tapped, m.abandoned, m.dropped, m.undecoded)
	// Every reason is exported from the start, at zero, so a rate or an
	// increase() sees the first occurrence rather than a series being born.
	for _, reason := range sidecar.AbandonReasons {
		m.abandoned.WithLabelValues(reason)
	}
	for _, reason := range sidecar.UndecodedReasons {
		m.undecoded.WithLabelValues(reason)
	}
	return m
}

// driverNameRule is the CSI spec's rule for a plugin name (GetPluginInfo):
// at most 63 characters, alphanumerics with '-', '_' and '.' inside.
var driverNameRule = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// SetDriverName labels every later operation with the driver's name. A
// name the spec does not allow is refused: it would become a label value.
func (m *Metrics) SetDriverName(name string) error {
	if !driverNameRule.MatchString(name) {
		return fmt.Errorf("driver name %q is not a valid CSI plugin name; keeping the metrics' driver_name %q", name, "unknown-driver")
	}
	m.operations.setDriverName(name)
	return nil
}

// Register adds a collector (e.g. the verdict collectors) to the endpoint.
func (m *Metrics) Register(c prometheus.Collector) error { return m.registry.Register(c) }

// Gatherer returns everything served on the metrics path.
func (m *Metrics) Gatherer() prometheus.Gatherer {
	return prometheus.Gatherers{m.operations.registry, m.registry}
}

// CallFinished implements sidecar.Recorder with the labels csi-lib-utils
// uses. Both label values come from closed sets whatever a peer sent: the
// CSI methods (else "unknown") and gRPC's codes (a code from outside the
// spec's 0-16 becomes Unknown, as its name would be "Code(n)").
func (m *Metrics) CallFinished(method string, code codes.Code, d time.Duration) {
	if code > codes.Unauthenticated {
		code = codes.Unknown
	}
	m.operations.observe(method, code, d)
}

// CallUndecoded implements sidecar.Recorder.
func (m *Metrics) CallUndecoded(reason string) { m.undecoded.WithLabelValues(reason).Inc() }

// ConnectionTapped implements sidecar.Recorder.
func (m *Metrics) ConnectionTapped() { m.tapped.Inc() }

// ConnectionAbandoned implements sidecar.Recorder.
func (m *Metrics) ConnectionAbandoned(reason string) { m.abandoned.WithLabelValues(reason).Inc() }

// ObservationDropped implements sidecar.Recorder.
func (m *Metrics) ObservationDropped() { m.dropped.Inc() }
