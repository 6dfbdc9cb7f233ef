package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
)

// ClonesSource is what the verdict collector reads at scrape time;
// *cloner.Controller implements it. The collector only reads.
type ClonesSource interface {
	Snapshot() *ledger.Snapshot
}

// maxLabelBytes caps label values taken from objects (a golden's
// annotations are user input).
const maxLabelBytes = 128

var (
	flavorLabels = []string{"schematic_id", "version"}

	descWorkerDisks = prometheus.NewDesc("csi_clone_worker_disks",
		"Worker disks per flavor and verdict (pending, csi-clone, snapshot-clone, host-assisted, http-import, stuck, failed, unknown).",
		[]string{"schematic_id", "version", "verdict"}, nil)
	descFetchesAvoided = prometheus.NewDesc("csi_clone_factory_fetches_avoided_total",
		"Image Factory fetches avoided: one per worker disk provisioned from a golden, counted once across restarts and replicas (ledger ConfigMap).",
		flavorLabels, nil)
	descFetches = prometheus.NewDesc("csi_clone_factory_fetches_total",
		"Image Factory fetches made, by kind (golden-import, worker-import); an import counts once when it starts plus once per importer restart (DataVolume status.restartCount).",
		[]string{"schematic_id", "version", "kind"}, nil)
	descBytesAvoided = prometheus.NewDesc("csi_clone_factory_bytes_avoided_total",
		"Bytes not fetched from the Image Factory: per avoided fetch, --factory-image-bytes when set, else the golden volume's capacity in bytes at the time the disk was counted (an upper bound of the image's size).",
		flavorLabels, nil)
	descGoldenInfo = prometheus.NewDesc("csi_clone_golden_info",
		"One series per golden DataVolume of the catalog, with its flavor, resolved StorageClass and CDI phase.",
		[]string{"namespace", "name", "schematic_id", "version", "storage_class", "phase"}, nil)
	descGoldenConsumers = prometheus.NewDesc("csi_clone_golden_consumers",
		"Worker disk DataVolumes that name a golden of this flavor; 0 means nothing clones it any more.",
		flavorLabels, nil)
	descImageGoldenInfo = prometheus.NewDesc("csi_clone_image_golden_info",
		"One series per golden that is not a Talos flavor's (a vm-default-images DataVolume, any other DataVolume of a golden namespace) while a disk clones it, with its image (vm-default-images.cozystack.io/name, else its name), resolved StorageClass and CDI phase.",
		[]string{"namespace", "golden", "image", "storage_class", "phase"}, nil)
	descImageDisks = prometheus.NewDesc("csi_clone_image_disks",
		"Disks cloned from a golden that is not a Talos flavor's, per golden and verdict; those with a storage-layer verdict (csi-clone, snapshot-clone) are image fetches avoided.",
		[]string{"namespace", "golden", "image", "verdict"}, nil)
	descBadDisks = prometheus.NewDesc("csi_clone_bad_disks",
		"Worker disks with a bad verdict or finding, per namespace, pool, flavor and reason; a series exists only while its reason is present.",
		[]string{"namespace", "pool", "schematic_id", "version", "reason"}, nil)
	descDuration = prometheus.NewDesc("csi_clone_duration_seconds",
		"Seconds from a disk's first CreateVolume (as the tap saw it; disks cloned from any golden) to the disk being ready (its DataVolume's Ready condition, or its final capacity if later); observed once per disk (ledger ConfigMap).",
		[]string{"verdict"}, nil)
	descPhaseDuration = prometheus.NewDesc("csi_clone_phase_duration_seconds",
		"Seconds a disk's clone (from any golden) spent in each phase (planning, provisioning, create-volume, expand, finishing: its timeline, from object timestamps and the tap), per verdict and resolved StorageClass; observed once per disk with csi_clone_duration_seconds (ledger ConfigMap).",
		[]string{"phase", "verdict", "storage_class"}, nil)
	descPeakClones = prometheus.NewDesc("csi_clone_concurrent_clones_peak",
		"The most clones of a golden that were in flight at once, over the disks that exist now (from each one's request to its DataVolume being ready).",
		[]string{"namespace", "golden"}, nil)
	descInFlight = prometheus.NewDesc("csi_clone_in_flight",
		"Clone disks CDI has neither finished nor failed, per golden and phase (golden-import, planning, provisioning, create-volume, expand, bind, finishing).",
		[]string{"namespace", "golden", "phase"}, nil)
	descInFlightOldest = prometheus.NewDesc("csi_clone_in_flight_oldest_seconds",
		"Seconds since the oldest clone in flight of a golden in a phase was requested (the later of the disk's creation and its golden's import finishing), at scrape time.",
		[]string{"namespace", "golden", "phase"}, nil)
	descMalformed = prometheus.NewDesc("csi_clone_malformed_objects_total",
		"Objects the verdict engine could not read and skipped (distinct object versions seen by this leader process), by kind.",
		[]string{"kind"}, nil)
	descVerdictPasses = prometheus.NewDesc("csi_clone_verdict_passes_total",
		"Verdict passes this leader process finished (full, or over the disks that changed).", nil, nil)
	descEvidenceDropped = prometheus.NewDesc("csi_clone_evidence_dropped_total",
		"Observations this replica dropped because the verdict engine's queue was full.", nil, nil)
	descEvidenceExpired = prometheus.NewDesc("csi_clone_evidence_expired_total",
		"Evidence this replica dropped because its PV or PVC did not appear within --evidence-ttl.", nil, nil)
)

// clonesCollector turns a cloner snapshot into series at scrape time, as
// kube-state-metrics does with its informers: nothing to reconcile, nothing
// lost on restart. Verdict series come only from the leader.
type clonesCollector struct{ src ClonesSource }

// NewCloneCollector returns the verdict collector; register it with
// Metrics.Register.
func NewCloneCollector(src ClonesSource) prometheus.Collector { return clonesCollector{src: src} }

func (clonesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWorkerDisks, descFetchesAvoided, descFetches, descBytesAvoided,
		descGoldenInfo, descGoldenConsumers, descImageGoldenInfo, descImageDisks, descBadDisks, descDuration, descMalformed, descEvidenceDropped, descEvidenceExpired, descVerdictPasses,
		descInFlight, descInFlightOldest, descPhaseDuration, descPeakClones} {
		ch <- d
	}
}

func (c clonesCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descEvidenceDropped, prometheus.CounterValue, float64(s.EvidenceDropped))
	ch <- prometheus.MustNewConstMetric(descEvidenceExpired, prometheus.CounterValue, float64(s.EvidenceExpired))
	if !s.Leader {
		return
	}
	ch <- prometheus.MustNewConstMetric(descVerdictPasses, prometheus.CounterValue, float64(s.Passes))
	collectState(ch, s)
	collectLedger(ch, s)
	for kind, n := range s.Malformed {
		ch <- prometheus.MustNewConstMetric(descMalformed, prometheus.CounterValue, float64(n), label(kind))
	}
}

// collectState emits the gauges derived from the objects as they are now.
func collectState(ch chan<- prometheus.Metric, s *ledger.Snapshot) {
	for _, d := range s.Disks {
		ch <- prometheus.MustNewConstMetric(descWorkerDisks, prometheus.GaugeValue, float64(d.Count),
			label(d.Flavor.SchematicID), label(d.Flavor.Version), d.Verdict)
	}
	consumers := map[fleet.Flavor]int{}
	for _, g := range s.Goldens {
		ch <- prometheus.MustNewConstMetric(descGoldenInfo, prometheus.GaugeValue, 1,
			g.Namespace, g.Name, label(g.Flavor.SchematicID), label(g.Flavor.Version), label(g.StorageClass), g.Phase)
		consumers[g.Flavor] += g.Consumers
	}
	for f, n := range consumers {
		ch <- prometheus.MustNewConstMetric(descGoldenConsumers, prometheus.GaugeValue, float64(n),
			label(f.SchematicID), label(f.Version))
	}
	collectImages(ch, s)
	collectInFlight(ch, s, scrapeClock())
	for _, b := range s.BadDisks {
		ch <- prometheus.MustNewConstMetric(descBadDisks, prometheus.GaugeValue, float64(b.Count),
			b.Namespace, label(b.Pool), label(b.Flavor.SchematicID), label(b.Flavor.Version), b.Reason)
	}
}

// scrapeClock is the time ages are measured at (tests replace it).
var scrapeClock = time.Now

// collectInFlight emits the clones in flight per golden and phase, and the
// age of the oldest, measured now: a clone that stays in a phase ages
// between passes.
func collectInFlight(ch chan<- prometheus.Metric, s *ledger.Snapshot, now time.Time) {
	for _, c := range s.InFlight {
		labels := []string{c.Golden.Namespace, label(c.Golden.Name), c.Phase}
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(c.Count), labels...)
		ch <- prometheus.MustNewConstMetric(descInFlightOldest, prometheus.GaugeValue, max(now.Sub(c.Oldest), 0).Seconds(), labels...)
	}
	for _, p := range s.PeakClones {
		ch <- prometheus.MustNewConstMetric(descPeakClones, prometheus.GaugeValue, float64(p.Peak), p.Golden.Namespace, label(p.Golden.Name))
	}
}

// collectImages emits the non-Talos goldens and their disks: one info
// series per golden, at most one per golden and verdict for its disks.
func collectImages(ch chan<- prometheus.Metric, s *ledger.Snapshot) {
	images := map[string]string{}
	for _, g := range s.Images {
		ch <- prometheus.MustNewConstMetric(descImageGoldenInfo, prometheus.GaugeValue, 1,
			g.Namespace, label(g.Name), label(g.Image), label(g.StorageClass), label(g.Phase))
		images[g.Namespace+"/"+g.Name] = g.Image
	}
	for _, d := range s.ImageDisks {
		image, ok := images[d.Golden.String()]
		if !ok {
			continue // the golden is gone: its disks wait for it, counted nowhere else
		}
		ch <- prometheus.MustNewConstMetric(descImageDisks, prometheus.GaugeValue, float64(d.Count),
			d.Golden.Namespace, label(d.Golden.Name), label(image), d.Verdict)
	}
}

// collectLedger emits the counters kept in the ledger ConfigMap.
func collectLedger(ch chan<- prometheus.Metric, s *ledger.Snapshot) {
	for _, f := range s.Flavors {
		sid, ver := label(f.Flavor.SchematicID), label(f.Flavor.Version)
		ch <- prometheus.MustNewConstMetric(descFetchesAvoided, prometheus.CounterValue, float64(f.FetchesAvoided), sid, ver)
		ch <- prometheus.MustNewConstMetric(descBytesAvoided, prometheus.CounterValue, float64(f.BytesAvoided), sid, ver)
		ch <- prometheus.MustNewConstMetric(descFetches, prometheus.CounterValue, float64(f.GoldenImports), sid, ver, ledger.FetchGoldenImport)
		ch <- prometheus.MustNewConstMetric(descFetches, prometheus.CounterValue, float64(f.WorkerImports), sid, ver, ledger.FetchWorkerImport)
	}
	for key, d := range s.Durations {
		if phase, verdict, class, ok := ledger.SplitPhaseKey(key); ok {
			ch <- prometheus.MustNewConstHistogram(descPhaseDuration, d.Count, d.Sum, d.Cumulative(), phase, verdict, label(class))
			continue
		}
		ch <- prometheus.MustNewConstHistogram(descDuration, d.Count, d.Sum, d.Cumulative(), key)
	}
}

// label makes an object-derived string a safe, bounded label value.
func label(s string) string {
	if len(s) > maxLabelBytes {
		s = s[:maxLabelBytes]
	}
	return strings.ToValidUTF8(s, "")
}
