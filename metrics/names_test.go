package metrics

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// publishedSeries is every metric family the sidecar exports with its
// labels, as dashboards, alerts and users' queries name them. A metric may be
// added; none may be renamed, lose a label or gain one (that breaks every
// query and alert that aggregates it). The operations histogram of
// csi-lib-utils is held by TestOperationsHistogramCountsEachCallOnceWithItsDuration.
var publishedSeries = []string{
	"csi_clone_admission_params_synced{}",
	"csi_clone_bad_disks{namespace,pool,schematic_id,version,reason}",
	"csi_clone_class_disks{schematic_id,version,storage_class}",
	"csi_clone_concurrent_clones_peak{namespace,golden}",
	"csi_clone_driver_last_ready_timestamp_seconds{}",
	"csi_clone_driver_probes_total{result}",
	"csi_clone_driver_ready{}",
	"csi_clone_duration_seconds{verdict}",
	"csi_clone_evidence_dropped_total{}",
	"csi_clone_evidence_expired_total{}",
	"csi_clone_factory_bytes_avoided_total{schematic_id,version}",
	"csi_clone_factory_fetches_avoided_total{schematic_id,version}",
	"csi_clone_factory_fetches_total{schematic_id,version,kind}",
	"csi_clone_golden_consumers{schematic_id,version}",
	"csi_clone_golden_info{namespace,name,schematic_id,version,storage_class,phase}",
	"csi_clone_golden_ready_timestamp_seconds{schematic_id,version}",
	"csi_clone_image_disks{namespace,golden,image,verdict}",
	"csi_clone_image_golden_info{namespace,golden,image,storage_class,phase}",
	"csi_clone_image_path_predicted{namespace,golden,image,storage_class,path,reason}",
	"csi_clone_in_flight{namespace,golden,phase}",
	"csi_clone_in_flight_oldest_seconds{namespace,golden,phase}",
	"csi_clone_malformed_objects_total{kind}",
	"csi_clone_phase_duration_seconds{phase,verdict,storage_class}",
	"csi_clone_path_predicted{schematic_id,version,storage_class,path,reason}",
	"csi_clone_prediction_checks{result}",
	"csi_clone_read_write_many_predicted{schematic_id,version,storage_class}",
	"csi_clone_tap_calls_undecoded_total{reason}",
	"csi_clone_tap_connections_abandoned_total{reason}",
	"csi_clone_tap_connections_total{}",
	"csi_clone_tap_observations_dropped_total{}",
	"csi_clone_verdict_passes_total{}",
	"csi_clone_worker_disks{schematic_id,version,verdict}",
}

// descRe reads a Desc's name and variable labels from its String form.
var descRe = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// TestPublishedMetricNamesAndLabelsDoNotChange lists every family each
// collector describes, name and labels in order, against publishedSeries.
func TestPublishedMetricNamesAndLabelsDoNotChange(t *testing.T) {
	if got, want := describedSeries(t), slices.Sorted(slices.Values(publishedSeries)); !slices.Equal(got, want) {
		t.Errorf("metric families changed:\n got  %s\n want %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
}

// describedSeries is what every collector of the sidecar describes, as
// "name{label,...}", sorted.
func describedSeries(t *testing.T) []string {
	t.Helper()
	m := New()
	collectors := []prometheus.Collector{m.tapped, m.abandoned, m.dropped, m.undecoded,
		NewCloneCollector(nil), NewPredictionCollector(nil), NewDriverCollector(nil)}
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range collectors {
		c.Describe(ch)
	}
	close(ch)
	var out []string
	for d := range ch {
		parts := descRe.FindStringSubmatch(d.String())
		if parts == nil {
			t.Fatalf("cannot read %s", d)
		}
		out = append(out, parts[1]+"{"+strings.ReplaceAll(parts[2], " ", "")+"}")
	}
	slices.Sort(out)
	return out
}
