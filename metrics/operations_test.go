package metrics

import (
	"bytes"
	"math"
	"sync"
	"testing"
	"time"

	cmetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// csi_sidecar_operations_seconds is csi-lib-utils' metric to the byte: the
// same observations recorded through the cached Observers and through
// csi-lib-utils' own metrics manager (as CallFinished did before) expose the
// same text, name, help, labels, buckets and process_start_time_seconds
// included, before and after the driver's name is set.
func TestOperationsMetricIsCSILibUtils(t *testing.T) {
	m := New()
	lib := cmetrics.NewCSIMetricsManagerForSidecar("")
	record := func(method string, code codes.Code, d time.Duration) {
		m.CallFinished(method, code, d)
		var err error
		if code > codes.Unauthenticated {
			code = codes.Unknown
		}
		if code != codes.OK {
			err = status.Error(code, "")
		}
		lib.RecordMetrics(sidecar.CanonicalMethod(method), err, d)
	}
	durations := []time.Duration{0, time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
		time.Second, 15 * time.Second, 300 * time.Second, 600 * time.Second, time.Hour}
	methods := append(sidecar.Methods(), "/not.csi/Method", "", "\xff")
	each := func() {
		for i, method := range methods {
			for code := codes.OK; code <= codes.Unauthenticated+1; code++ {
				if (i+int(code))%3 == 0 { // leave some series unborn
					continue
				}
				record(method, code, durations[(i+int(code))%len(durations)])
			}
		}
		record(sidecar.MethodCreateVolume, math.MaxUint32, time.Second)
	}
	each()
	compareExposition(t, m.operations.registry, lib.GetRegistry())
	if err := m.SetDriverName("linstor.csi.linbit.com"); err != nil {
		t.Fatal(err)
	}
	lib.SetDriverName("linstor.csi.linbit.com")
	each()
	compareExposition(t, m.operations.registry, lib.GetRegistry())
}

func compareExposition(t *testing.T, got, want prometheus.Gatherer) {
	t.Helper()
	g, w := exposition(t, got), exposition(t, want)
	if !bytes.Equal(g, w) {
		t.Fatalf("exposition differs from csi-lib-utils'\ngot:\n%s\nwant:\n%s", g, w)
	}
	if !bytes.Contains(g, []byte(`csi_sidecar_operations_seconds_bucket{driver_name=`)) {
		t.Fatalf("no operations series:\n%s", g)
	}
}

func exposition(t *testing.T, g prometheus.Gatherer) []byte {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// Relay goroutines record calls while the driver's name is being set: every
// call is counted once, under one name or the other (go test -race).
func TestOperationsRecordConcurrentlyWithSetDriverName(t *testing.T) {
	m := New()
	const goroutines, calls = 4, 500
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range calls {
				m.CallFinished(sidecar.MethodCreateVolume, codes.OK, time.Millisecond)
			}
		})
	}
	if err := m.SetDriverName("linstor.csi.linbit.com"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count uint64
	for _, f := range families {
		if f.GetName() == "csi_sidecar_operations_seconds" {
			for _, s := range f.GetMetric() {
				count += s.GetHistogram().GetSampleCount()
			}
		}
	}
	if count != goroutines*calls {
		t.Fatalf("counted %d calls, want %d", count, goroutines*calls)
	}
}
