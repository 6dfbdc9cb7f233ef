package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The soak: many worker clones of one golden, created in waves, while
// csi-clone-sidecar is SIGKILLed again and again, kube-apiserver is down for
// a minute, the driver crashes mid-call and the verdict leader of two
// replicas is killed. Afterwards every disk must have the verdict and
// findings its pool gives without faults (checked first on a calm wave), the
// fetch counters must be what that model says, no relayed call may have
// failed except those the injected faults cut, and nothing may be left
// behind.
//
// Knobs (environment): CSI_CLONE_SOAK_DISKS (default 40; the figure
// is 200), CSI_CLONE_SOAK_WAVE (disks per wave, default 10),
// CSI_CLONE_SOAK_SEED (default: the clock; printed), CSI_CLONE_SOAK_KILLS
// (sidecar SIGKILLs, default 10), CSI_CLONE_SOAK_OUTAGE (API server down,
// default 60s). `make soak` runs it with 200 disks in waves of 20.

var (
	flavorSoakCalm = strings.Repeat("a7", 32)
	flavorSoak     = strings.Repeat("b8", 32)
)

// soakPool is one pool of worker disks and what every disk of it must
// become: each takes another path through CDI and the driver.
type soakPool struct {
	name, class, size, verdict string
	reasons                    []string
}

var soakPools = []soakPool{
	// CSI clone, then ControllerExpandVolume to the larger size.
	{"kubernetes-md", "replicated", "20Gi", record.VerdictCSIClone, nil},
	// CSI clone at the golden's size: nothing to expand.
	{"kubernetes-eq", "replicated", "6Gi", record.VerdictCSIClone, nil},
	// Another class of the driver: a cross-class CSI clone, flagged.
	{"kubernetes-other", "replicated-b", "20Gi", record.VerdictCSIClone, []string{record.ReasonClassMismatch}},
	// No expansion allowed: CDI copies host-assisted.
	{"kubernetes-fixed", "replicated-fixed", "20Gi", record.VerdictHostAssisted,
		[]string{record.ReasonHostAssisted, record.ReasonClassMismatch}},
}

// soakConfig is one soak's size and randomness.
type soakConfig struct {
	disks, wave, kills int
	outage             time.Duration
	seed               uint64
}

func soakConfigFromEnv(t *testing.T) soakConfig {
	t.Helper()
	cfg := soakConfig{disks: 40, wave: 10, kills: 10, outage: 60 * time.Second, seed: uint64(time.Now().UnixNano())}
	for _, v := range []struct {
		env string
		dst *int
	}{{"CSI_CLONE_SOAK_DISKS", &cfg.disks}, {"CSI_CLONE_SOAK_WAVE", &cfg.wave}, {"CSI_CLONE_SOAK_KILLS", &cfg.kills}} {
		if s := os.Getenv(v.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive integer", v.env, s)
			}
			*v.dst = n
		}
	}
	if s := os.Getenv("CSI_CLONE_SOAK_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CSI_CLONE_SOAK_SEED=%q: want an unsigned integer", s)
		}
		cfg.seed = n
	}
	if s := os.Getenv("CSI_CLONE_SOAK_OUTAGE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("CSI_CLONE_SOAK_OUTAGE=%q: want a positive duration", s)
		}
		cfg.outage = d
	}
	return cfg
}

// TestSoak: see the top of this file. At its default 40 disks it takes
// about 5½ minutes on 2 cores, so `make test` runs it; `make soak` runs the
// 200 of the issue.
func TestSoak(t *testing.T) {
	cfg := soakConfigFromEnv(t)
	t.Logf("soak: %d disks in waves of %d, %d sidecar kills, API server down %s, seed %d (CSI_CLONE_SOAK_SEED=%d repeats the fault plan)",
		cfg.disks, cfg.wave, cfg.kills, cfg.outage, cfg.seed, cfg.seed)
	checkNoLeaks(t)
	c := cluster.Start(t, soakOptions(cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	for _, f := range []string{flavorSoakCalm, flavorSoak} {
		createGolden(t, ctx, c, cluster.Golden{SchematicID: f, Version: talosVersion, StorageClass: "replicated"})
	}
	for _, f := range []string{flavorSoakCalm, flavorSoak} {
		waitPhase(t, ctx, c, cluster.NamespaceGolden, cluster.GoldenName(f, talosVersion), cdiv1.Succeeded)
	}
	if err := c.CreateNamespace(ctx, verdictTenant); err != nil {
		t.Fatal(err)
	}
	rep := &soakReport{cfg: cfg}
	inj := newInjector(t, c, cfg.outage)

	// The no-fault run: one disk per pool, twice, proves the pool model.
	t0 := time.Now()
	calm := soakDisks("calm", flavorSoakCalm, 2*len(soakPools))
	runWave(t, ctx, c, calm, nil, rep, inj)
	checkSoakVerdicts(t, ctx, c, calm, 4*time.Minute)
	checkSoakCounters(t, ctx, c, flavorSoakCalm, calm)
	rep.calm = time.Since(t0)
	rep.waves = nil
	checkRelayedCalls(t, c, nil, rep)

	// The soak.
	t0 = time.Now()
	disks := soakDisks("soak", flavorSoak, cfg.disks)
	waves := splitWaves(disks, cfg.wave)
	plan := planFaults(cfg, len(waves))
	for i, w := range waves {
		runWave(t, ctx, c, w, plan[i], rep, inj)
	}
	rep.soak = time.Since(t0)
	checkSoakVerdicts(t, ctx, c, disks, 10*time.Minute)
	checkSoakCounters(t, ctx, c, flavorSoak, disks)
	rep.settled = time.Since(t0)
	inj.check(t, plan)
	checkRelayedCalls(t, c, inj.windows, rep)
	checkRelayPairs(t, ctx, c)
	rep.print(t, inj)
}

// soakOptions: two sidecar replicas, elected as deployed; a slow
// CreateVolume, so that calls are in flight when a fault strikes; the CSI
// sidecars and the driver log every call (the failed-call accounting); pools
// large enough for the soak's disks.
func soakOptions(cfg soakConfig) cluster.Options {
	classes := []cluster.StorageClass{
		{Name: "replicated", Pool: "replicated"},
		{Name: "replicated-fixed", Pool: "fixed", NoExpansion: true},
		{Name: "replicated-b", Pool: "b"},
	}
	args := []string{"--delay=CreateVolume=1s", "--v=5"}
	for _, sc := range classes {
		args = append(args, fmt.Sprintf("--capacity=%s=%d", sc.Pool, soakPoolBytes(cfg)))
	}
	return cluster.Options{
		StorageClasses:  classes,
		DriverArgs:      args,
		CSISidecarArgs:  []string{"--v=5"},
		SidecarArgs:     []string{"--leader-election=true", "--resync-period=2s"},
		SidecarReplicas: 2,
	}
}

// soakPoolBytes is what each pool of the test driver must hold: every volume
// the soak keeps (disks, calm disks, goldens) at the largest size it asks
// for, twice over for what a wave in flight holds besides. The driver's
// default (1 TiB a pool) is full at about 150 disks: `make soak`'s first run
// at 200 stalled in its eighth wave, ControllerExpandVolume answering
// OutOfRange, csi-resizer marking the resize infeasible and CDI waiting on it
// for ever. Volumes are sparse files: this is bookkeeping, not disk space.
func soakPoolBytes(cfg soakConfig) int64 {
	var largest resource.Quantity // the goldens' 6Gi is a pool's size too (kubernetes-eq)
	for _, p := range soakPools {
		if q := resource.MustParse(p.size); q.Cmp(largest) > 0 {
			largest = q
		}
	}
	volumes := int64(cfg.disks + 2*len(soakPools) + 2)
	return 2 * volumes * largest.Value()
}

// soakDisk is one worker disk of the soak.
type soakDisk struct {
	name, flavor string
	pool         soakPool
}

// soakDisks spreads n disks over the pools in turn.
func soakDisks(prefix, flavor string, n int) []soakDisk {
	out := make([]soakDisk, n)
	for i := range out {
		out[i] = soakDisk{name: fmt.Sprintf("%s-%03d", prefix, i), flavor: flavor, pool: soakPools[i%len(soakPools)]}
	}
	return out
}

func splitWaves(disks []soakDisk, size int) [][]soakDisk {
	var out [][]soakDisk
	for len(disks) > 0 {
		n := min(size, len(disks))
		out = append(out, disks[:n])
		disks = disks[n:]
	}
	return out
}

// runWave creates a wave's DataVolumes together, injects the wave's faults
// at their offsets, and waits until every DataVolume of the wave succeeded.
func runWave(t *testing.T, ctx context.Context, c *cluster.Cluster, w []soakDisk, faults []fault, rep *soakReport, inj *injector) {
	t.Helper()
	ws := make([]workerCase, len(w))
	for i, d := range w {
		ws[i] = workerCase{name: d.name, pool: d.pool.name, flavor: d.flavor, class: d.pool.class, size: d.pool.size}
	}
	start := time.Now()
	createWorkersTogether(t, ctx, c, ws)
	for _, f := range faults {
		if d := time.Until(start.Add(f.at)); d > 0 {
			time.Sleep(d)
		}
		inj.inject(ctx, f)
	}
	waitWaveSucceeded(t, ctx, c, w)
	took := time.Since(start)
	rep.waves = append(rep.waves, took)
	t.Logf("wave of %d (%s…): all succeeded %s after creation, faults %v", len(w), w[0].name, took.Round(100*time.Millisecond), faults)
}

// waitWaveSucceeded polls the wave's DataVolumes, through API outages and
// restarts, until all succeeded; a failed one ends the test.
func waitWaveSucceeded(t *testing.T, ctx context.Context, c *cluster.Cluster, w []soakDisk) {
	t.Helper()
	want := map[string]bool{}
	for _, d := range w {
		want[d.name] = true
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Dynamic.Resource(fleet.DataVolumeGVR).Namespace(verdictTenant).List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false, nil // the API server may be down on purpose
		}
		phases := map[string]int{}
		done := 0
		for _, u := range l.Items {
			if !want[u.GetName()] {
				continue
			}
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			phases[phase]++
			if phase == string(cdiv1.Succeeded) {
				done++
			}
			if phase == string(cdiv1.Failed) {
				return false, fmt.Errorf("%s failed: %v", u.GetName(), u.Object["status"])
			}
		}
		last = fmt.Sprint(phases)
		return done == len(w), nil
	})
	if err != nil {
		t.Fatalf("wave %s…: not every DataVolume succeeded: %v (phases %s)", w[0].name, err, last)
	}
}

// checkSoakVerdicts: every disk gets its pool's verdict and findings,
// exactly one Warning per finding, whatever the faults did.
func checkSoakVerdicts(t *testing.T, ctx context.Context, c *cluster.Cluster, disks []soakDisk, timeout time.Duration) {
	t.Helper()
	sources := map[string]int{}
	for _, d := range disks {
		rec := waitVerdict(t, ctx, c, verdictTenant, d.name, d.pool.verdict, timeout)
		assertReasons(t, d.name, rec, d.pool.reasons)
		assertWarnings(t, ctx, c, d.name, d.pool.reasons)
		sources[rec.Source]++
	}
	t.Logf("%d disks (%s…) have their pool's verdict; evidence from %v", len(disks), disks[0].name, sources)
}
