package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
)

var (
	descPathPredicted = prometheus.NewDesc("csi_clone_path_predicted",
		"The clone path CDI is predicted to take for a worker disk larger than the golden, one series per (golden flavor, StorageClass) pair with value 1: path csi-clone, snapshot-clone, host-assisted or blocked, and its reason. storage_class=\"(default)\" is a disk that names no class, resolved to the default.",
		[]string{"schematic_id", "version", "storage_class", "path", "reason"}, nil)
	descImagePathPredicted = prometheus.NewDesc("csi_clone_image_path_predicted",
		"The clone path CDI is predicted to take for a disk cloned from an image golden (vm-default-images) larger than it, one series per (golden, StorageClass) pair with value 1, as csi_clone_path_predicted for the Talos flavors.",
		[]string{"namespace", "golden", "image", "storage_class", "path", "reason"}, nil)
	descReadWriteManyPredicted = prometheus.NewDesc("csi_clone_read_write_many_predicted",
		"Whether CDI is predicted to give a worker disk of the flavor on the StorageClass a ReadWriteMany claim (1) or not (0: the worker's VM could not live-migrate), one series per csi_clone_path_predicted pair; the platform's worker template names no access modes, so the class's StorageProfile decides. No series where CDI renders no claim.",
		[]string{"schematic_id", "version", "storage_class"}, nil)
	descPredictionChecks = prometheus.NewDesc("csi_clone_prediction_checks",
		"Worker disks with a decided verdict and a recorded prediction, by result: right (the verdict shows the predicted path) or wrong (finding prediction-wrong).",
		[]string{"result"}, nil)
	descClassDisks = prometheus.NewDesc("csi_clone_class_disks",
		"Clone worker disks per flavor and resolved StorageClass.",
		[]string{"schematic_id", "version", "storage_class"}, nil)
	descGoldenReady = prometheus.NewDesc("csi_clone_golden_ready_timestamp_seconds",
		"When each imported golden's import finished (Unix seconds); no series while it imports.",
		flavorLabels, nil)
	descAdmissionParams = prometheus.NewDesc("csi_clone_admission_params_synced",
		"1 when the admission guard's parameters (ConfigMap csi-clone-sidecar-admission) hold the current predictions, 0 when the leader failed to write them; only with --admission-params.",
		nil, nil)
)

// predictionCollector turns the snapshot's clone-path predictions into
// series at scrape time; like the verdict series, only the leader's.
type predictionCollector struct{ src ClonesSource }

// NewPredictionCollector returns the clone-path prediction collector.
func NewPredictionCollector(src ClonesSource) prometheus.Collector {
	return predictionCollector{src: src}
}

func (predictionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPathPredicted, descReadWriteManyPredicted, descImagePathPredicted, descPredictionChecks, descClassDisks, descGoldenReady, descAdmissionParams} {
		ch <- d
	}
}

func (c predictionCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	if s == nil || !s.Leader {
		return
	}
	// Several goldens of one flavor (one misnamed) would repeat a series.
	seen := map[[3]string]bool{}
	for _, p := range s.Paths {
		key := [3]string{label(p.SchematicID), label(p.Version), label(p.StorageClass)}
		if seen[key] {
			continue
		}
		seen[key] = true
		ch <- prometheus.MustNewConstMetric(descPathPredicted, prometheus.GaugeValue, 1, key[0], key[1], key[2], p.Path, p.Reason)
		if len(p.AccessModes) > 0 {
			ch <- prometheus.MustNewConstMetric(descReadWriteManyPredicted, prometheus.GaugeValue,
				boolValue(!predict.LacksReadWriteMany(p.AccessModes)), key[0], key[1], key[2])
		}
	}
	for _, p := range s.ImagePaths {
		ns, name, _ := strings.Cut(p.Golden, "/")
		ch <- prometheus.MustNewConstMetric(descImagePathPredicted, prometheus.GaugeValue, 1,
			label(ns), label(name), label(p.Image), label(p.StorageClass), p.Path, p.Reason)
	}
	ch <- prometheus.MustNewConstMetric(descPredictionChecks, prometheus.GaugeValue, float64(s.PredictionChecks.Right), "right")
	ch <- prometheus.MustNewConstMetric(descPredictionChecks, prometheus.GaugeValue, float64(s.PredictionChecks.Wrong), "wrong")
	for _, d := range s.ClassDisks {
		ch <- prometheus.MustNewConstMetric(descClassDisks, prometheus.GaugeValue, float64(d.Count),
			label(d.Flavor.SchematicID), label(d.Flavor.Version), label(d.Class))
	}
	ready := map[fleet.Flavor]bool{}
	for _, g := range s.Goldens {
		if g.ReadySince.IsZero() || !g.Trusted || ready[g.Flavor] {
			continue
		}
		ready[g.Flavor] = true
		ch <- prometheus.MustNewConstMetric(descGoldenReady, prometheus.GaugeValue, float64(g.ReadySince.Unix()),
			label(g.Flavor.SchematicID), label(g.Flavor.Version))
	}
	switch s.AdmissionParams {
	case publish.AdmissionParamsSynced:
		ch <- prometheus.MustNewConstMetric(descAdmissionParams, prometheus.GaugeValue, 1)
	case publish.AdmissionParamsFailed:
		ch <- prometheus.MustNewConstMetric(descAdmissionParams, prometheus.GaugeValue, 0)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
