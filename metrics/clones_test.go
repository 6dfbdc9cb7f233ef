package metrics

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// snapshotSource serves a fixed snapshot, as the cloner does between passes.
type snapshotSource struct{ s *ledger.Snapshot }

func (f snapshotSource) Snapshot() *ledger.Snapshot { return f.s }

const sid = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

func leaderSnapshot() *ledger.Snapshot {
	f := fleet.Flavor{SchematicID: sid, Version: "v1.13.2"}
	d := ledger.DurationTotals{Count: 3, Sum: 12.5, Buckets: map[string]uint64{"2.5": 1, "5": 2}}
	return &ledger.Snapshot{
		Leader: true,
		Goldens: []ledger.GoldenStatus{{Namespace: "cozy-public", Name: "talos-worker-" + sid + "-v1.13.2", Flavor: f,
			StorageClass: "replicated", Phase: "Succeeded", Consumers: 4, Trusted: true}},
		Disks: []ledger.DiskCount{{Flavor: f, Verdict: record.VerdictCSIClone, Count: 3}, {Flavor: f, Verdict: record.VerdictHostAssisted, Count: 1}},
		BadDisks: []ledger.BadDiskCount{{Namespace: "tenant-a", Pool: "kubernetes-md1", Flavor: f,
			Reason: record.ReasonHostAssisted, Count: 1}},
		Flavors:         []ledger.FlavorCounters{{Flavor: f, FlavorTotals: ledger.FlavorTotals{FetchesAvoided: 4, GoldenImports: 1, WorkerImports: 2, BytesAvoided: 4 << 30}}},
		Durations:       map[string]ledger.DurationTotals{record.VerdictCSIClone: d},
		Malformed:       map[string]int64{"DataVolume": 1},
		EvidenceDropped: 2,
	}
}

func TestClonesCollectorSeries(t *testing.T) {
	c := NewCloneCollector(snapshotSource{leaderSnapshot()})
	want := `
# HELP csi_clone_bad_disks Worker disks with a bad verdict or finding, per namespace, pool, flavor and reason; a series exists only while its reason is present.
# TYPE csi_clone_bad_disks gauge
csi_clone_bad_disks{namespace="tenant-a",pool="kubernetes-md1",reason="host-assisted",schematic_id="` + sid + `",version="v1.13.2"} 1
# HELP csi_clone_factory_fetches_avoided_total Image Factory fetches avoided: one per worker disk provisioned from a golden, counted once across restarts and replicas (ledger ConfigMap).
# TYPE csi_clone_factory_fetches_avoided_total counter
csi_clone_factory_fetches_avoided_total{schematic_id="` + sid + `",version="v1.13.2"} 4
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "csi_clone_bad_disks", "csi_clone_factory_fetches_avoided_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "csi_clone_factory_fetches_total"); n != 2 {
		t.Fatalf("%d fetch series, want golden-import and worker-import", n)
	}
	if n := testutil.CollectAndCount(c, "csi_clone_duration_seconds"); n != 1 {
		t.Fatalf("%d histograms", n)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}

func TestNonLeaderExposesOnlyItsOwnEvidenceCounters(t *testing.T) {
	s := leaderSnapshot()
	s.Leader = false
	c := NewCloneCollector(snapshotSource{s})
	if n := testutil.CollectAndCount(c); n != 2 {
		t.Fatalf("a non-leader exposed %d series, want only the 2 evidence counters", n)
	}
}

func scrape(t *testing.T, c prometheus.Collector) ([]byte, error) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// TestClonesScrapePassesPromtool runs Debian's promtool on a real scrape.
// `make tools` installs it; without it the test fails (a skip would pass
// unnoticed).
func TestClonesScrapePassesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found in PATH (Debian: apt-get install -y prometheus; make tools installs it)")
	}
	out, err := scrape(t, NewCloneCollector(snapshotSource{leaderSnapshot()}))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(out)
	res, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(res)) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s\nscrape:\n%s", err, res, out)
	}
}

// TestImageGoldenSeries: a non-Talos golden has one info series and one per
// verdict of its disks, labelled with its image; disks of a golden no
// longer in the snapshot make no series (the label set stays bounded by the
// goldens).
func TestImageGoldenSeries(t *testing.T) {
	s := leaderSnapshot()
	ubuntu := types.NamespacedName{Namespace: "cozy-public", Name: "vm-default-images-ubuntu"}
	s.Images = []ledger.ImageStatus{{Namespace: ubuntu.Namespace, Name: ubuntu.Name, Image: "ubuntu",
		StorageClass: "replicated", Phase: "Succeeded", Consumers: 3}}
	s.ImageDisks = []ledger.ImageDiskCount{{Golden: ubuntu, Verdict: record.VerdictCSIClone, Count: 2},
		{Golden: ubuntu, Verdict: record.VerdictStuck, Count: 1},
		{Golden: types.NamespacedName{Namespace: "cozy-public", Name: "gone"}, Verdict: record.VerdictPending, Count: 5}}
	c := NewCloneCollector(snapshotSource{s})
	want := `
# HELP csi_clone_image_disks Disks cloned from a golden that is not a Talos flavor's, per golden and verdict; those with a storage-layer verdict (csi-clone, snapshot-clone) are image fetches avoided.
# TYPE csi_clone_image_disks gauge
csi_clone_image_disks{golden="vm-default-images-ubuntu",image="ubuntu",namespace="cozy-public",verdict="csi-clone"} 2
csi_clone_image_disks{golden="vm-default-images-ubuntu",image="ubuntu",namespace="cozy-public",verdict="stuck"} 1
# HELP csi_clone_image_golden_info One series per golden that is not a Talos flavor's (a vm-default-images DataVolume, any other DataVolume of a golden namespace) while a disk clones it, with its image (vm-default-images.cozystack.io/name, else its name), resolved StorageClass and CDI phase.
# TYPE csi_clone_image_golden_info gauge
csi_clone_image_golden_info{golden="vm-default-images-ubuntu",image="ubuntu",namespace="cozy-public",phase="Succeeded",storage_class="replicated"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "csi_clone_image_disks", "csi_clone_image_golden_info"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "csi_clone_golden_info"); n != 1 {
		t.Fatalf("%d golden_info series: an image golden must not join the Talos catalog's", n)
	}
}

// Clones in flight: a count per golden and phase, and the oldest's age
// measured at scrape time, so it grows between two scrapes of one snapshot.
func TestInFlightSeriesAgeAtScrapeTime(t *testing.T) {
	s := leaderSnapshot()
	golden := types.NamespacedName{Namespace: "cozy-public", Name: "talos-worker-" + sid + "-v1.13.2"}
	requested := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	s.InFlight = []ledger.InFlightCount{
		{InFlightKey: ledger.InFlightKey{Golden: golden, Phase: record.PhaseCreateVolume}, Count: 3, Oldest: requested},
		{InFlightKey: ledger.InFlightKey{Golden: golden, Phase: record.PhasePlanning}, Count: 1, Oldest: requested.Add(5 * time.Minute)}}
	c := NewCloneCollector(snapshotSource{s})
	defer func(old func() time.Time) { scrapeClock = old }(scrapeClock)
	for _, after := range []time.Duration{9 * time.Minute, 11 * time.Minute} {
		scrapeClock = func() time.Time { return requested.Add(after) }
		want := fmt.Sprintf(`
# HELP csi_clone_in_flight Clone disks CDI has neither finished nor failed, per golden and phase (golden-import, planning, provisioning, create-volume, expand, bind, finishing).
# TYPE csi_clone_in_flight gauge
csi_clone_in_flight{golden="%[1]s",namespace="cozy-public",phase="create-volume"} 3
csi_clone_in_flight{golden="%[1]s",namespace="cozy-public",phase="planning"} 1
# HELP csi_clone_in_flight_oldest_seconds Seconds since the oldest clone in flight of a golden in a phase was requested (the later of the disk's creation and its golden's import finishing), at scrape time.
# TYPE csi_clone_in_flight_oldest_seconds gauge
csi_clone_in_flight_oldest_seconds{golden="%[1]s",namespace="cozy-public",phase="create-volume"} %[2]g
csi_clone_in_flight_oldest_seconds{golden="%[1]s",namespace="cozy-public",phase="planning"} %[3]g
`, golden.Name, after.Seconds(), (after - 5*time.Minute).Seconds())
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "csi_clone_in_flight", "csi_clone_in_flight_oldest_seconds"); err != nil {
			t.Fatalf("%v after the oldest request: %v", after, err)
		}
	}
}

// The ledger's time per phase becomes csi_clone_phase_duration_seconds,
// beside (never inside) csi_clone_duration_seconds.
func TestPhaseDurationSeries(t *testing.T) {
	s := leaderSnapshot()
	s.Durations[ledger.PhaseKey(record.PhaseCreateVolume, record.VerdictCSIClone, "replicated")] =
		ledger.DurationTotals{Count: 2, Sum: 7, Buckets: map[string]uint64{"5": 2}}
	c := NewCloneCollector(snapshotSource{s})
	if n := testutil.CollectAndCount(c, "csi_clone_duration_seconds"); n != 1 {
		t.Fatalf("%d clone-duration histograms, want the csi-clone one alone", n)
	}
	if n := testutil.CollectAndCount(c, "csi_clone_phase_duration_seconds"); n != 1 {
		t.Fatalf("%d phase histograms, want 1", n)
	}
	out, err := scrape(t, c)
	if err != nil {
		t.Fatal(err)
	}
	want := `csi_clone_phase_duration_seconds_count{phase="create-volume",storage_class="replicated",verdict="csi-clone"} 2`
	if !strings.Contains(string(out), want) {
		t.Fatalf("scrape lacks %s:\n%s", want, out)
	}
}
