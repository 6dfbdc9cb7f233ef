package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// What the soak checks besides verdicts: counters against the pool model,
// the relayed calls that failed, and the relay's connections at the end.

// checkSoakCounters waits until a flavor's counters, scraped from the
// verdict leader, are what its disks make them in a run without faults:
// one fetch avoided per disk, each the golden volume's capacity, the one
// golden import, every disk under its pool's verdict, one bad-disk series
// per pool and finding; then lets verdict passes run and checks that
// nothing was counted again.
func checkSoakCounters(t *testing.T, ctx context.Context, c *cluster.Cluster, flavor string, disks []soakDisk) {
	t.Helper()
	_, capacity := goldenVolume(t, ctx, c, flavor)
	want := soakModelCounters(disks, capacity)
	want["fetches "+ledger.FetchGoldenImport] = float64(c.Factory.Fetches(flavor, talosVersion))
	var got map[string]float64
	waitMetrics(t, ctx, c, func(scrape) error {
		s, err := leaderScrape(ctx, c)
		if err != nil {
			return err
		}
		if got = soakCounters(s, flavor); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("flavor %s: counters\n got %v\nwant %v", flavor[:4], got, want)
		}
		return nil
	})
	s := afterMorePasses(t, ctx, 3, func() (scrape, error) { return leaderScrape(ctx, c) })
	if again := soakCounters(s, flavor); fmt.Sprint(again) != fmt.Sprint(want) {
		t.Errorf("flavor %s: counters moved after settling:\n got %v\nwant %v", flavor[:4], again, want)
	}
	t.Logf("flavor %s counters as without faults: %v", flavor[:4], got)
}

// soakModelCounters are the counters the pool model gives (the golden
// import excepted: the Factory counts it).
func soakModelCounters(disks []soakDisk, capacity int64) map[string]float64 {
	n := float64(len(disks))
	out := map[string]float64{
		"fetches avoided": n, "bytes avoided": n * float64(capacity), "consumers": n,
		"fetches " + ledger.FetchWorkerImport: 0,
	}
	for _, d := range disks {
		out["disks "+d.pool.verdict]++
		for _, r := range d.pool.reasons {
			out["bad "+d.pool.name+" "+r]++
		}
	}
	return out
}

// soakCounters reads the same figures from a scrape.
func soakCounters(s scrape, flavor string) map[string]float64 {
	l := map[string]string{"schematic_id": flavor, "version": talosVersion}
	out := map[string]float64{}
	out["fetches avoided"], _ = s.value("csi_clone_factory_fetches_avoided_total", l)
	out["bytes avoided"], _ = s.value("csi_clone_factory_bytes_avoided_total", l)
	out["consumers"], _ = s.value("csi_clone_golden_consumers", l)
	for _, kind := range []string{ledger.FetchGoldenImport, ledger.FetchWorkerImport} {
		out["fetches "+kind], _ = s.value("csi_clone_factory_fetches_total", with(l, "kind", kind))
	}
	for _, fam := range []struct{ name, prefix, label string }{
		{"csi_clone_worker_disks", "disks ", "verdict"}, {"csi_clone_bad_disks", "bad ", "reason"},
	} {
		mf := s[fam.name]
		if mf == nil {
			continue
		}
		for _, m := range mf.Metric {
			if !hasLabels(m, l) || m.Gauge.GetValue() == 0 {
				continue
			}
			key := fam.prefix
			for _, lp := range m.Label {
				if lp.GetName() == "pool" {
					key += lp.GetValue() + " "
				}
			}
			for _, lp := range m.Label {
				if lp.GetName() == fam.label {
					out[key+lp.GetValue()] += m.Gauge.GetValue()
				}
			}
		}
	}
	return out
}

// leaderScrape scrapes the replica that holds the verdict Lease: verdict
// series come only from the leader.
func leaderScrape(ctx context.Context, c *cluster.Cluster) (scrape, error) {
	id, err := c.LeaderIdentity(ctx)
	if err != nil {
		return nil, err
	}
	r := c.ReplicaByIdentity(id)
	if r == nil {
		return nil, fmt.Errorf("lease held by %q, no replica of this stack", id)
	}
	return fetchScrapeFrom(r.Metrics)
}

// A klog line: severity, MMDD, time, pid, source, message.
var reKlog = regexp.MustCompile(`^([IWEF])(\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ [^\]]+\] (.*)$`)

var (
	// csi-lib-utils' LogGRPC, at --v=5: every call's outcome.
	reGRPCError     = regexp.MustCompile(`^"GRPC response" .*err="rpc error: code = (\w+) desc = (.*)"$`)
	reDriverFailure = regexp.MustCompile(`"CSI call" method="(\w+)".* code="(\w+)".* message="(.*)"$`)
)

// klogTime reads a klog timestamp (local time, no year).
func klogTime(s string) (time.Time, bool) {
	now := time.Now()
	ts, err := time.ParseInLocation("2006 0102 15:04:05.000000", strconv.Itoa(now.Year())+" "+s, time.Local)
	if err != nil {
		return ts, false
	}
	if ts.After(now.Add(24 * time.Hour)) { // the run crossed New Year
		ts = ts.AddDate(-1, 0, 0)
	}
	return ts, true
}

// csiFailure is one CSI call a kubernetes-csi sidecar saw fail, or one
// connection it lost.
type csiFailure struct {
	at              time.Time
	who, code, desc string
	cause           string // "driver", a fault kind, or "" (unexplained)
	connectionLoss  bool
}

// checkRelayedCalls reads every failure the kubernetes-csi sidecars logged
// (--v=5: every call's error; and their exits on a lost connection) and
// explains each: the driver answered so (its log has that code and
// message), or an injected fault that drops connections was under way
// (the CSI sidecars' retries). Anything else failed because of the relay.
func checkRelayedCalls(t *testing.T, c *cluster.Cluster, windows []faultWindow, rep *soakReport) {
	t.Helper()
	driverErrs, err := driverFailures(filepath.Join(c.Dir, "logs", "csi-test-driver.log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := askDriverDirectly(c.DriverSocket, driverErrs); err != nil {
		t.Fatal(err)
	}
	var fails []csiFailure
	for _, who := range []string{"csi-provisioner", "csi-resizer", "csi-snapshotter"} {
		f, err := csiSidecarFailures(filepath.Join(c.Dir, "logs", who+".log"), who)
		if err != nil {
			t.Fatal(err)
		}
		fails = append(fails, f...)
	}
	rep.causes = map[string]int{}
	for i := range fails {
		f := &fails[i]
		if !f.connectionLoss && driverErrs[f.code+" "+f.desc] {
			f.cause = "driver"
		}
		for _, w := range windows {
			if f.cause == "" && !f.at.Before(w.from.Add(-time.Second)) && !f.at.After(w.to.Add(5*time.Second)) {
				f.cause = string(w.kind)
			}
		}
		rep.causes[f.cause]++
		if f.cause == "" {
			t.Errorf("%s: a relayed call failed with no driver error and no fault under way, at %s: %s %s",
				f.who, f.at.Format("15:04:05.000"), f.code, f.desc)
		}
	}
	t.Logf("relayed call failures seen by the CSI sidecars, by cause: %v", rep.causes)
}

// driverFailures are the code+message pairs the driver answered with.
func driverFailures(log string) (map[string]bool, error) {
	b, err := os.ReadFile(log)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := reDriverFailure.FindStringSubmatch(line); m != nil && m[2] != "OK" {
			out[m[2]+" "+unquoteKlog(m[3])] = true
		}
	}
	return out, nil
}

// askDriverDirectly adds to driverErrs what the driver's gRPC server
// answers by itself, before its handlers (and so its log): csi-snapshotter
// asks for the GroupController service, which the test driver does not
// serve. Asked here on the driver's own socket, without the relay.
func askDriverDirectly(socket string, driverErrs map[string]bool) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = csi.NewGroupControllerClient(conn).GroupControllerGetCapabilities(ctx, &csi.GroupControllerGetCapabilitiesRequest{})
	if st := status.Convert(err); err != nil {
		driverErrs[st.Code().String()+" "+st.Message()] = true
	}
	return nil
}

// unquoteKlog undoes klog's quoting of a string value.
func unquoteKlog(s string) string {
	if u, err := strconv.Unquote(`"` + s + `"`); err == nil {
		return u
	}
	return s
}

// csiSidecarFailures reads one kubernetes-csi sidecar's log.
func csiSidecarFailures(log, who string) ([]csiFailure, error) {
	b, err := os.ReadFile(log)
	if err != nil {
		return nil, err
	}
	var out []csiFailure
	for _, line := range strings.Split(string(b), "\n") {
		m := reKlog.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, ok := klogTime(m[2])
		if !ok {
			continue
		}
		if g := reGRPCError.FindStringSubmatch(m[3]); g != nil {
			out = append(out, csiFailure{at: at, who: who, code: g[1], desc: unquoteKlog(g[2])})
		} else if strings.HasPrefix(m[3], `"Lost connection"`) {
			out = append(out, csiFailure{at: at, who: who, code: "connection", desc: m[3], connectionLoss: true})
		}
	}
	return out, nil
}

// soakReport gathers the figures the soak prints at the end.
type soakReport struct {
	cfg                 soakConfig
	calm, soak, settled time.Duration
	waves               []time.Duration
	causes              map[string]int
}

func (r *soakReport) print(t *testing.T, in *injector) {
	t.Helper()
	ws := make([]string, len(r.waves))
	for i, w := range r.waves {
		ws[i] = w.Round(time.Second).String()
	}
	keys := make([]string, 0, len(r.causes))
	for k := range r.causes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var causes []string
	for _, k := range keys {
		causes = append(causes, fmt.Sprintf("%s=%d", cmpOr(k, "unexplained"), r.causes[k]))
	}
	t.Logf(`soak summary (seed %d):
	disks %d in waves of %d; calm wave (8 disks) with checks %s
	soak: waves done in %s (%s per clone), every verdict and counter settled %s after the first wave
	wave times: %s
	faults: %v; driver killed with CreateVolume in flight: %v
	leader hand-over: %s killed, %s leading %s later; restarted after the API outage: %v
	relayed call failures seen by the CSI sidecars, by cause: %s`,
		r.cfg.seed, r.cfg.disks, r.cfg.wave, r.calm.Round(time.Second),
		r.soak.Round(time.Second), (r.soak / time.Duration(r.cfg.disks)).Round(10*time.Millisecond), r.settled.Round(time.Second),
		strings.Join(ws, " "), in.counts, in.cut,
		in.leaders[0], in.leaders[1], in.handover.Round(100*time.Millisecond), in.outageRe,
		strings.Join(causes, " "))
}
