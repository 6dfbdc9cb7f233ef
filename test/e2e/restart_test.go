package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// Flavors of the restart test: one pool cloned with the sidecar left alone
// (the baseline), one whose clones are cut through by a SIGKILL.
var (
	flavorCalm   = strings.Repeat("e5", 32)
	flavorKilled = strings.Repeat("f6", 32)
)

const (
	restartDisks  = 10
	restartResync = 2 * time.Second
)

// TestSidecarKilledMidClone kills csi-clone-sidecar with SIGKILL while ten
// clones of one golden are in flight and restarts it as the kubelet would.
// Every disk must still get its verdict, from the tap where an observation
// survived (persisted before the kill, or made again after the restart) and
// from CDI's annotations where it was lost; and the ledger's counters must
// equal those of ten clones run without the kill, in the same cluster.
func TestSidecarKilledMidClone(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		// A slow CreateVolume keeps several clones in flight at the kill.
		DriverArgs: []string{"--delay=CreateVolume=2s"},
		// As deployed: elected (the restarted process keeps its identity,
		// the pod's hostname); --stuck-after stays at its default, a clone
		// the kill delays by seconds is not stuck.
		SidecarArgs: []string{"--leader-election=true", "--resync-period=" + restartResync.String()},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	for _, f := range []string{flavorCalm, flavorKilled} {
		createGolden(t, ctx, c, cluster.Golden{SchematicID: f, Version: talosVersion, StorageClass: "replicated"})
	}
	for _, f := range []string{flavorCalm, flavorKilled} {
		waitPhase(t, ctx, c, cluster.NamespaceGolden, cluster.GoldenName(f, talosVersion), cdiv1.Succeeded)
	}
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}

	// The baseline: ten clones, nothing killed.
	calm := restartWorkers("calm", flavorCalm)
	createWorkersTogether(t, ctx, c, calm)
	for _, w := range calm {
		rec := waitVerdict(t, ctx, c, verdictTenant, w.name, record.VerdictCSIClone, 4*time.Minute)
		if rec.Source != record.SourceCSITap {
			t.Errorf("%s (no kill): verdict from %s, want %s", w.name, rec.Source, record.SourceCSITap)
		}
		assertReasons(t, w.name, rec, nil)
		assertWarnings(t, ctx, c, w.name, nil)
	}
	calmCounters := settledCounters(t, ctx, c, flavorCalm)
	calmGolden := map[string]string{"golden": cluster.GoldenName(flavorCalm, talosVersion)}
	peakBefore, _ := scrapeSidecar(t, c).value("csi_clone_concurrent_clones_peak", calmGolden)
	if peakBefore < 2 || peakBefore > restartDisks {
		t.Errorf("peak of the calm pool's clones at once %v, want between 2 and %d (created together)", peakBefore, restartDisks)
	}
	durationsBefore, _ := scrapeSidecar(t, c).value("csi_clone_duration_seconds", map[string]string{"verdict": record.VerdictCSIClone})
	if durationsBefore != restartDisks {
		t.Errorf("clone durations observed without the kill: %v, want %d", durationsBefore, restartDisks)
	}

	// Ten more, and the kill right after the first of them is provisioned.
	killed := restartWorkers("killed", flavorKilled)
	tail := newObsTail(t, c.ObservationsLog)
	killedGolden, _ := goldenVolume(t, ctx, c, flavorKilled)
	createWorkersTogether(t, ctx, c, killed)
	atKill := killAfterFirstAnswer(t, ctx, c, tail, killedGolden)
	timelinesAtKill := readTimelines(t, ctx, c, killed)
	restartAt := time.Now()
	if err := c.RestartSidecar(); err != nil {
		t.Fatal(err)
	}
	t.Logf("sidecar restarted %s after the kill", restartAt.Sub(atKill.at).Round(time.Millisecond))

	sources := checkVerdictsAfterRestart(t, ctx, c, killed, atKill, restartAt)
	checkTimelinesKept(t, timelinesAtKill, readTimelines(t, ctx, c, killed))
	if peakAfter, _ := scrapeSidecar(t, c).value("csi_clone_concurrent_clones_peak", calmGolden); peakAfter != peakBefore {
		t.Errorf("peak of the calm pool's clones at once %v after the restart, %v before", peakAfter, peakBefore)
	}

	killedCounters := settledCounters(t, ctx, c, flavorKilled)
	if fmt.Sprint(killedCounters) != fmt.Sprint(calmCounters) {
		t.Errorf("counters after the kill differ from those of the run without it:\nkilled %v\ncalm   %v", killedCounters, calmCounters)
	}
	// The restarted sidecar took the ledger over: what it counted before the
	// kill it neither forgot nor counted again.
	if again := flavorCounters(scrapeSidecar(t, c), flavorCalm); fmt.Sprint(again) != fmt.Sprint(calmCounters) {
		t.Errorf("the calm pool's counters changed across the restart:\nnow    %v\nbefore %v", again, calmCounters)
	}
	// A clone's duration is known only from the tap: disks judged from
	// CDI's annotations are not timed, none is timed twice.
	durationsAfter, _ := scrapeSidecar(t, c).value("csi_clone_duration_seconds", map[string]string{"verdict": record.VerdictCSIClone})
	if tapped := float64(sources[record.SourceCSITap]); durationsAfter-durationsBefore != tapped {
		t.Errorf("clone durations observed for the killed pool: %v, want %v (one per disk judged from the tap)", durationsAfter-durationsBefore, tapped)
	}
}

// readTimelines reads the timeline of each worker's persisted record (zero
// for a disk with none yet).
func readTimelines(t *testing.T, ctx context.Context, c *cluster.Cluster, ws []workerCase) map[string]record.Timeline {
	t.Helper()
	out := map[string]record.Timeline{}
	for _, w := range ws {
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims(verdictTenant).Get(ctx, w.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := record.ReadRecord(pvc); err == nil && rec != nil {
			out[w.name] = rec.Timeline
		}
	}
	return out
}

// checkTimelinesKept: every point a disk's timeline had at the kill is the
// same after the restart (the timeline is dated from objects and the tap,
// never from when a process looked).
func checkTimelinesKept(t *testing.T, before, after map[string]record.Timeline) {
	t.Helper()
	points := func(tl record.Timeline) map[string]time.Time {
		return map[string]time.Time{"requested": tl.Requested, "claimed": tl.Claimed, "firstCreateVolume": tl.FirstCreateVolume,
			"volumeCreated": tl.VolumeCreated, "expandRequested": tl.ExpandRequested, "expanded": tl.Expanded, "bound": tl.Bound,
			"ready": tl.Ready}
	}
	compared := 0
	for name, tl := range before {
		now := points(after[name])
		for point, at := range points(tl) {
			if at.IsZero() {
				continue
			}
			compared++
			if !now[point].Equal(at) {
				t.Errorf("%s: timeline's %s was %v at the kill, %v after the restart", name, point, at, now[point])
			}
		}
		// What the driver refused is the tap's evidence, kept on the PV.
		if a := after[name]; tl.CreateVolumeAttempts > 0 && (a.CreateVolumeAttempts != tl.CreateVolumeAttempts ||
			!reflect.DeepEqual(a.Refusals, tl.Refusals) || !reflect.DeepEqual(a.ExpandRefusals, tl.ExpandRefusals)) {
			t.Errorf("%s: attempts and refusals were %d %v %v at the kill, %d %v %v after the restart", name,
				tl.CreateVolumeAttempts, tl.Refusals, tl.ExpandRefusals, a.CreateVolumeAttempts, a.Refusals, a.ExpandRefusals)
		}
	}
	t.Logf("%d timeline points known at the kill, all kept across the restart", compared)
	if compared == 0 {
		t.Error("no disk had a timeline point at the kill: the check shows nothing")
	}
}

func restartWorkers(prefix, flavor string) []workerCase {
	out := make([]workerCase, restartDisks)
	for i := range out {
		out[i] = workerCase{name: fmt.Sprintf("%s-%02d", prefix, i), pool: "kubernetes-" + prefix, flavor: flavor,
			class: "replicated", size: "20Gi", verdict: record.VerdictCSIClone}
	}
	return out
}

// createWorkersTogether creates the worker DataVolumes concurrently, as a
// pool's machine deployment does when it scales up.
func createWorkersTogether(t *testing.T, ctx context.Context, c *cluster.Cluster, ws []workerCase) {
	t.Helper()
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			_, errs[i] = c.CreateWorkerDisk(ctx, cluster.Worker{Namespace: verdictTenant, Name: w.name, Pool: w.pool,
				Golden: cluster.GoldenName(w.flavor, talosVersion), StorageClass: w.class, Size: w.size})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// killState is what the cluster looked like right after the kill, before
// anything was restarted: nothing writes evidence then.
type killState struct {
	at      time.Time
	trigger string          // the clone volume whose answer was the last relayed
	bound   map[string]bool // worker PVCs already Bound
	// evidenced holds the volume handles whose PV already carried the tap's
	// record of their CreateVolume; existed every clone volume's handle.
	evidenced, existed map[string]bool
}

// killAfterFirstAnswer SIGKILLs the sidecar at the worst moment for its
// evidence: it freezes the sidecar as soon as the tap logs the first
// successful CreateVolume of a clone of the golden (the relay decodes after
// forwarding, so the provisioner has the answer), waits until the
// provisioner has made that volume's PV, and kills it: that clone's
// observation dies unrecorded, while the other clones are still in flight.
func killAfterFirstAnswer(t *testing.T, ctx context.Context, c *cluster.Cluster, tail *obsTail, goldenHandle string) killState {
	t.Helper()
	var trigger string
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		obs, err := tail.next()
		if o, ok := findCall(obs, sidecar.MethodCreateVolume, func(o sidecar.Observation) bool {
			return o.Request.SourceVolumeID == goldenHandle
		}); ok {
			trigger = o.Response.VolumeID
			return true, c.FreezeSidecar()
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("no clone's CreateVolume answered to kill the sidecar after: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		return err == nil && slices.ContainsFunc(pvs.Items, func(pv corev1.PersistentVolume) bool {
			return pv.Spec.CSI != nil && pv.Spec.CSI.VolumeHandle == trigger
		}), err
	}); err != nil {
		t.Fatalf("the provisioner made no PV for %s: %v", trigger, err)
	}
	st := killState{at: time.Now(), trigger: trigger}
	if err := c.KillSidecar(); err != nil {
		t.Fatal(err)
	}
	st.record(t, ctx, c)
	t.Logf("SIGKILLed the sidecar once clone volume %s had its PV (evidence on it: %v)", trigger, st.evidenced[trigger])
	if st.evidenced[trigger] {
		t.Errorf("the sidecar recorded %s's CreateVolume on its PV before it was frozen: the kill lost nothing", trigger)
	}
	return st
}

// record reads which worker claims were bound and which volumes had a PV
// carrying the tap's record of their CreateVolume.
func (st *killState) record(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	st.bound, st.evidenced, st.existed = map[string]bool{}, map[string]bool{}, map[string]bool{}
	pvcs, err := c.Client.CoreV1().PersistentVolumeClaims(verdictTenant).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pvc := range pvcs.Items {
		st.bound[pvc.Name] = pvc.Status.Phase == corev1.ClaimBound
	}
	pvList, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pv := range pvList.Items {
		if pv.Spec.CSI == nil {
			continue
		}
		h := pv.Spec.CSI.VolumeHandle
		st.existed[h] = true
		var ev fleet.VolumeEvidence
		if raw := pv.Annotations[fleet.AnnCSIEvidence]; raw != "" {
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				t.Fatalf("PV %s: unreadable %s: %v", pv.Name, fleet.AnnCSIEvidence, err)
			}
		}
		st.evidenced[h] = !ev.Created.IsZero()
	}
}

// obsTail reads the observations the sidecar appends to its log from an
// offset on, whole lines only.
type obsTail struct {
	path    string
	off     int64
	partial []byte
}

// newObsTail starts at the log's current end.
func newObsTail(t *testing.T, path string) *obsTail {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return &obsTail{path: path, off: st.Size()}
}

func (o *obsTail) next() ([]sidecar.Observation, error) {
	f, err := os.Open(o.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, o.off, 1<<30))
	if err != nil {
		return nil, err
	}
	o.off += int64(len(b))
	o.partial = append(o.partial, b...)
	var out []sidecar.Observation
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			return out, nil
		}
		var ob sidecar.Observation
		if err := json.Unmarshal(o.partial[:i], &ob); err != nil {
			return out, fmt.Errorf("%s: %w", o.path, err)
		}
		out = append(out, ob)
		o.partial = o.partial[i+1:]
	}
}

// checkVerdictsAfterRestart waits for every killed-pool disk's verdict and
// checks where it came from against what survived the kill: the tap's record
// if it was on the PV before the kill or the restarted sidecar saw the
// CreateVolume (the CSI sidecars retry what the kill interrupted), else
// CDI's annotations. It returns how many verdicts came from each source.
func checkVerdictsAfterRestart(t *testing.T, ctx context.Context, c *cluster.Cluster, ws []workerCase, st killState, restartAt time.Time) map[string]int {
	t.Helper()
	goldenHandle, _ := goldenVolume(t, ctx, c, flavorKilled)
	sources := map[string]int{}
	var lines []string
	var unprovisioned int
	for _, w := range ws {
		rec := waitVerdict(t, ctx, c, verdictTenant, w.name, record.VerdictCSIClone, 4*time.Minute)
		assertReasons(t, w.name, rec, nil)
		assertWarnings(t, ctx, c, w.name, nil)
		obs, err := c.Observations()
		if err != nil {
			t.Fatal(err)
		}
		_, seenAgain := findCall(obs, sidecar.MethodCreateVolume, func(o sidecar.Observation) bool {
			return o.Response.VolumeID == rec.Volume && !o.Start.Before(restartAt)
		})
		want, why := record.SourceCDI, "observation lost in the kill"
		switch {
		case st.evidenced[rec.Volume]:
			want, why = record.SourceCSITap, "evidence on the PV before the kill"
		case seenAgain:
			want, why = record.SourceCSITap, "CreateVolume seen again after the restart"
		}
		if rec.Source != want {
			t.Errorf("%s: verdict from %s, want %s (%s): %+v", w.name, rec.Source, want, why, rec)
		}
		// No PV at the kill: only the restarted provisioner, through the
		// restarted relay, can have got its CreateVolume's answer.
		if !st.existed[rec.Volume] {
			unprovisioned++
			if !seenAgain {
				t.Errorf("%s: volume %s had no PV at the kill, yet no CreateVolume of it was observed after the restart", w.name, rec.Volume)
			}
		}
		if rec.Source == record.SourceCSITap && rec.ContentSource != "volume:"+goldenHandle {
			t.Errorf("%s: content source %s, want the golden's volume %s", w.name, rec.ContentSource, goldenHandle)
		}
		if rec.CDICloneType != cluster.StrategyCSIClone {
			t.Errorf("%s: CDI's cloneType %q, want csi-clone", w.name, rec.CDICloneType)
		}
		sources[rec.Source]++
		lines = append(lines, fmt.Sprintf("%s: %s (%s; PV at the kill %v, bound at the kill %v)",
			w.name, rec.Source, why, st.existed[rec.Volume], st.bound[w.name]))
	}
	sort.Strings(lines)
	t.Logf("verdict sources after the restart: %v\n\t%s", sources, strings.Join(lines, "\n\t"))
	checkMidFlight(t, ws, st, unprovisioned)
	return sources
}

// checkMidFlight proves the kill cut through the clones: a clone volume had
// just been provisioned, and some disks were neither bound nor provisioned.
func checkMidFlight(t *testing.T, ws []workerCase, st killState, unprovisioned int) {
	t.Helper()
	var bound []string
	for _, w := range ws {
		if st.bound[w.name] {
			bound = append(bound, w.name)
		}
	}
	t.Logf("at the kill: %d of %d disks bound %v, %d had no volume yet", len(bound), len(ws), bound, unprovisioned)
	if len(bound) == len(ws) {
		t.Errorf("every disk was already bound at the kill: it did not happen mid-flight")
	}
	if unprovisioned == 0 {
		t.Errorf("every disk's volume existed at the kill: no clone was left in flight")
	}
}

// goldenVolume is a flavor's golden volume handle and capacity in bytes.
func goldenVolume(t *testing.T, ctx context.Context, c *cluster.Cluster, flavor string) (string, int64) {
	t.Helper()
	pvc, pv, err := c.WaitPVCBound(ctx, cluster.NamespaceGolden, cluster.GoldenName(flavor, talosVersion), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	return pv.Spec.CSI.VolumeHandle, capacity.Value()
}

// flavorCounters are a flavor's series of the verdict metrics, by name.
func flavorCounters(s scrape, flavor string) map[string]float64 {
	l := map[string]string{"schematic_id": flavor, "version": talosVersion}
	out := map[string]float64{}
	out["fetches avoided"], _ = s.value("csi_clone_factory_fetches_avoided_total", l)
	out["bytes avoided"], _ = s.value("csi_clone_factory_bytes_avoided_total", l)
	for _, kind := range []string{ledger.FetchGoldenImport, ledger.FetchWorkerImport} {
		out["fetches "+kind], _ = s.value("csi_clone_factory_fetches_total", with(l, "kind", kind))
	}
	out["consumers"], _ = s.value("csi_clone_golden_consumers", l)
	out["bad disks"], _ = s.value("csi_clone_bad_disks", l)
	if mf := s["csi_clone_worker_disks"]; mf != nil {
		for _, m := range mf.Metric {
			if !hasLabels(m, l) {
				continue
			}
			for _, lp := range m.Label {
				if lp.GetName() == "verdict" && m.Gauge.GetValue() != 0 {
					out["disks "+lp.GetValue()] += m.Gauge.GetValue()
				}
			}
		}
	}
	return out
}

// expectedCounters derives a flavor's counters from the cluster: one fetch
// avoided per worker disk CDI finished from its golden, each worth the
// golden volume's capacity; the golden imports the Factory served; every
// disk a csi-clone by its persisted verdict; nothing bad.
func expectedCounters(t *testing.T, ctx context.Context, c *cluster.Cluster, flavor string) map[string]float64 {
	t.Helper()
	golden := cluster.GoldenName(flavor, talosVersion)
	_, capacity := goldenVolume(t, ctx, c, flavor)
	dvs, err := c.Dynamic.Resource(fleet.DataVolumeGVR).Namespace(verdictTenant).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var consumers, finished, cloned float64
	for _, u := range dvs.Items {
		if u.GetAnnotations()[cluster.AnnGolden] != golden {
			continue
		}
		consumers++
		if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase == string(cdiv1.Succeeded) {
			finished++
		}
		if rec := readRecord(t, ctx, c, verdictTenant, u.GetName()); rec != nil && rec.Verdict == record.VerdictCSIClone {
			cloned++
		}
	}
	return map[string]float64{
		"fetches avoided":                     finished,
		"bytes avoided":                       finished * float64(capacity),
		"fetches " + ledger.FetchGoldenImport: float64(c.Factory.Fetches(flavor, talosVersion)),
		"fetches " + ledger.FetchWorkerImport: 0,
		"consumers":                           consumers,
		"bad disks":                           0,
		"disks " + record.VerdictCSIClone:     cloned,
	}
}

// settledCounters waits until a flavor's counters are what the cluster says
// they must be, lets a few more verdict passes run, and checks that nothing
// was counted again.
func settledCounters(t *testing.T, ctx context.Context, c *cluster.Cluster, flavor string) map[string]float64 {
	t.Helper()
	want := expectedCounters(t, ctx, c, flavor)
	if want["fetches avoided"] != restartDisks || want["fetches "+ledger.FetchGoldenImport] != 1 {
		t.Fatalf("flavor %s: the cluster shows %v, want %d finished clones of one imported golden", flavor[:4], want, restartDisks)
	}
	waitMetrics(t, ctx, c, func(s scrape) error {
		if got := flavorCounters(s, flavor); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("flavor %s: counters %v, want %v", flavor[:4], got, want)
		}
		return nil
	})
	got := flavorCounters(afterMorePasses(t, ctx, 3, func() (scrape, error) { return fetchScrape(c) }), flavor)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("flavor %s: counters moved after settling: %v, want %v", flavor[:4], got, want)
	}
	t.Logf("flavor %s counters: %v", flavor[:4], got)
	return got
}
