package metrics

import (
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	kmetrics "k8s.io/component-base/metrics"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// csi-lib-utils' csi_sidecar_operations_seconds (metrics.go,
// NewCSIMetricsManagerWithOptions with no options), restated so that each
// finished call costs one cached Observer rather than its label path (a
// slice of values, a status error, a hash of three strings and a map lookup
// per call). TestOperationsMetricIsCSILibUtils compares the exposition of
// both for the same observations.
const (
	operationsSubsystem = "csi_sidecar"
	operationsName      = "operations_seconds"
	operationsHelp      = "Container Storage Interface operation duration with gRPC error code status total"
	unknownDriverName   = "unknown-driver"
)

var operationsBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600}

// operations is the histogram and, per driver name, one Observer for each
// (method, code) of the closed sets, made when first observed: a series
// appears when its first call is recorded, as with csi-lib-utils.
type operations struct {
	registry kmetrics.KubeRegistry
	vec      *kmetrics.HistogramVec
	// methods numbers every value CanonicalMethod can return.
	methods map[string]int
	names   []string
	current atomic.Pointer[observers]
}

// observers are the Observers of one driver name, by method and code.
type observers struct {
	driver string
	cells  [][codes.Unauthenticated + 1]atomic.Pointer[observer]
}

type observer struct{ kmetrics.ObserverMetric }

func newOperations() *operations {
	o := &operations{registry: kmetrics.NewKubeRegistry(), methods: map[string]int{}}
	kmetrics.RegisterProcessStartTime(o.registry.Register)
	o.vec = kmetrics.NewHistogramVec(&kmetrics.HistogramOpts{
		Subsystem:      operationsSubsystem,
		Name:           operationsName,
		Help:           operationsHelp,
		Buckets:        operationsBuckets,
		StabilityLevel: kmetrics.ALPHA,
	}, []string{"driver_name", "method_name", "grpc_status_code"})
	o.registry.MustRegister(o.vec)
	o.names = sidecar.Methods()
	for i, m := range o.names {
		o.methods[m] = i
	}
	o.setDriverName("")
	return o
}

// setDriverName labels later observations with name ("unknown-driver" for
// "").
func (o *operations) setDriverName(name string) {
	if name == "" {
		name = unknownDriverName
	}
	o.current.Store(&observers{driver: name, cells: make([][codes.Unauthenticated + 1]atomic.Pointer[observer], len(o.names))})
}

// observe records one call; method is taken as CanonicalMethod takes it (a
// name outside the CSI spec is "unknown") and code must be at most
// Unauthenticated.
func (o *operations) observe(method string, code codes.Code, d time.Duration) {
	i, ok := o.methods[method]
	if !ok {
		i = o.methods[sidecar.MethodUnknown]
	}
	cur := o.current.Load()
	cell := &cur.cells[i][code]
	obs := cell.Load()
	if obs == nil {
		// Two goroutines may both get here: the vector hands both the
		// same child.
		obs = &observer{o.vec.WithLabelValues(cur.driver, o.names[i], code.String())}
		cell.Store(obs)
	}
	obs.Observe(d.Seconds())
}
