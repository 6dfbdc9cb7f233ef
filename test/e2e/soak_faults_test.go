package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The soak's faults: what, in which wave, how long after the wave's
// DataVolumes were created.

type faultKind string

const (
	faultKillSidecar   faultKind = "kill-sidecar"   // SIGKILL of the replica the CSI sidecars dial, restarted at once
	faultAPIOutage     faultKind = "api-outage"     // kube-apiserver stopped, started again after the outage
	faultDriverRestart faultKind = "driver-restart" // the driver SIGKILLed while a CreateVolume is in flight, restarted
	faultLeaderKill    faultKind = "leader-kill"    // the verdict leader SIGKILLed, restarted once the other replica leads
)

type fault struct {
	kind faultKind
	at   time.Duration
}

func (f fault) String() string { return fmt.Sprintf("%s@%s", f.kind, f.at.Round(10*time.Millisecond)) }

// faultSpread is the latest offset of a fault into its wave: while the
// wave's clones are still being provisioned.
const faultSpread = 8 * time.Second

// planFaults places every fault in a random wave at a random offset, all
// drawn from the seed. The outage, the driver's and the leader's kill go to
// different waves while there are enough, and the driver's kill comes first
// in its wave, within driverSpread: a minute-long outage or a lease
// hand-over before it would leave no CreateVolume in flight to cut.
func planFaults(cfg soakConfig, waves int) [][]fault {
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed>>1|1))
	plan := make([][]fault, waves)
	single := rng.Perm(waves)
	for i, k := range []faultKind{faultDriverRestart, faultAPIOutage, faultLeaderKill} {
		spread := faultSpread
		if k == faultDriverRestart {
			spread = driverSpread
		}
		w := single[i%waves]
		plan[w] = append(plan[w], fault{kind: k, at: time.Duration(rng.Int64N(int64(spread)))})
	}
	for range cfg.kills {
		w := rng.IntN(waves)
		plan[w] = append(plan[w], fault{kind: faultKillSidecar, at: time.Duration(rng.Int64N(int64(faultSpread)))})
	}
	for _, p := range plan {
		slices.SortFunc(p, func(a, b fault) int {
			return cmp.Or(-cmp.Compare(rank(a), rank(b)), cmp.Compare(a.at, b.at))
		})
	}
	return plan
}

// rank puts the driver's kill first in its wave.
func rank(f fault) int {
	if f.kind == faultDriverRestart {
		return 1
	}
	return 0
}

// driverSpread is the latest offset of the driver's kill: early in the
// wave's CreateVolume calls.
const driverSpread = 2 * time.Second

// faultWindow is a span in which the injected fault could cut relayed
// calls: a dropped relay or driver connection.
type faultWindow struct {
	kind     faultKind
	from, to time.Time
}

// injector carries the faults out and keeps what they did.
type injector struct {
	c      *cluster.Cluster
	t      *testing.T
	outage time.Duration

	counts   map[faultKind]int
	windows  []faultWindow
	cut      []string      // CreateVolume calls in flight at the driver when it was killed
	handover time.Duration // from the leader's kill to another replica holding the lease
	leaders  [2]string     // the killed leader's replica, its successor
	outageRe []string      // components restarted after the outage
}

func newInjector(t *testing.T, c *cluster.Cluster, outage time.Duration) *injector {
	return &injector{c: c, t: t, outage: outage, counts: map[faultKind]int{}}
}

func (in *injector) inject(ctx context.Context, f fault) {
	in.t.Helper()
	from := time.Now()
	cuts := true
	var err error
	switch f.kind {
	case faultKillSidecar:
		if err = in.c.KillSidecar(); err == nil {
			err = in.c.RestartSidecar()
		}
	case faultAPIOutage:
		cuts = false // the relay does not depend on Kubernetes
		err = in.apiOutage()
	case faultDriverRestart:
		err = in.restartDriver(ctx)
	case faultLeaderKill:
		cuts, err = in.killLeader(ctx)
	}
	if err != nil {
		in.t.Fatalf("fault %s: %v", f, err)
	}
	in.counts[f.kind]++
	if cuts {
		in.windows = append(in.windows, faultWindow{kind: f.kind, from: from, to: time.Now()})
	}
}

// apiOutage stops kube-apiserver for the outage, starts it again and then,
// as the kubelet would, whatever exited meanwhile. A csi-clone-sidecar
// replica must not be among those: Kubernetes is not part of its data path.
func (in *injector) apiOutage() error {
	if err := in.c.StopAPIServer(); err != nil {
		return err
	}
	time.Sleep(in.outage)
	if err := in.c.StartAPIServer(); err != nil {
		return err
	}
	names, err := in.c.RestartExited()
	in.outageRe = names
	for _, r := range in.c.Replicas {
		if slices.Contains(names, r.Name) {
			in.t.Errorf("%s exited while kube-apiserver was down; log: %s", r.Name, in.c.Dir+"/logs/"+r.Name+".log")
		}
	}
	return err
}

// restartDriver waits until the driver has a CreateVolume in flight (its
// --delay holds each for a second), SIGKILLs it, and restarts it and the
// CSI sidecars. The calls it cut are kept, to be checked as retried.
func (in *injector) restartDriver(ctx context.Context) error {
	log := in.c.Dir + "/logs/csi-test-driver.log"
	var inFlight []string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		inFlight, err = driverCallsInFlight(log)
		return len(inFlight) > 0, err
	})
	if err != nil {
		return fmt.Errorf("no CreateVolume in flight at the driver to kill it during: %w", err)
	}
	if err := in.c.KillDriver(); err != nil {
		return err
	}
	// What the killed incarnation answered after the poll saw them open.
	still, err := driverCallsInFlight(log)
	if err != nil {
		return err
	}
	in.cut = still
	in.t.Logf("driver SIGKILLed with CreateVolume of %v in flight", still)
	return in.c.RestartDriver()
}

var (
	reDriverRequest = regexp.MustCompile(`"CSI request" method="CreateVolume" .*?(pvc-[0-9a-f-]{36})`)
	reDriverAnswer  = regexp.MustCompile(`"CSI call" method="CreateVolume" name="(pvc-[0-9a-f-]{36})"`)
)

// driverCallsInFlight reads the driver's log since its last start and
// returns the names of CreateVolume calls it took and has not answered.
func driverCallsInFlight(log string) ([]string, error) {
	b, err := os.ReadFile(log)
	if err != nil {
		return nil, err
	}
	s := string(b)
	if i := strings.LastIndex(s, "\n### "); i >= 0 {
		s = s[i:]
	}
	open := map[string]bool{}
	for _, m := range reDriverRequest.FindAllStringSubmatch(s, -1) {
		open[m[1]] = true
	}
	for _, m := range reDriverAnswer.FindAllStringSubmatch(s, -1) {
		delete(open, m[1])
	}
	out := make([]string, 0, len(open))
	for n := range open {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// killLeader SIGKILLs the replica holding the verdict Lease, waits until
// another replica holds it (the lease must expire: a killed process does
// not release it), and only then restarts the killed one, which would
// otherwise take its own lease back at once under the same identity. It
// reports whether the killed replica was the one relaying.
func (in *injector) killLeader(ctx context.Context) (bool, error) {
	old, err := in.c.LeaderIdentity(ctx)
	if err != nil {
		return false, err
	}
	r := in.c.ReplicaByIdentity(old)
	if r == nil {
		return false, fmt.Errorf("the lease is held by %q, no replica of this stack", old)
	}
	killed := time.Now()
	if err := in.c.KillReplica(r.Name); err != nil {
		return false, err
	}
	var now string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		now, _ = in.c.LeaderIdentity(ctx)
		return now != "" && now != old, nil
	})
	if err != nil {
		return false, fmt.Errorf("no other replica took the lease from %s: %w", old, err)
	}
	in.handover = time.Since(killed)
	in.leaders = [2]string{r.Name, in.c.ReplicaByIdentity(now).Name}
	in.t.Logf("leader %s SIGKILLed; %s leads %s later", r.Name, in.leaders[1], in.handover.Round(100*time.Millisecond))
	return r.Name == in.c.Replicas[0].Name, in.c.RestartReplica(r.Name)
}

// check: every planned fault happened, and the driver's kill did cut
// calls, each of which a CSI sidecar then retried to success.
func (in *injector) check(t *testing.T, plan [][]fault) {
	t.Helper()
	want := map[faultKind]int{}
	for _, w := range plan {
		for _, f := range w {
			want[f.kind]++
		}
	}
	if fmt.Sprint(in.counts) != fmt.Sprint(want) {
		t.Errorf("faults injected %v, planned %v", in.counts, want)
	}
	if want[faultDriverRestart] == 0 {
		return
	}
	if len(in.cut) == 0 {
		t.Errorf("the driver's kill cut no CreateVolume: it was not mid-call")
	}
	answered, err := driverAnswered(in.c.Dir + "/logs/csi-test-driver.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range in.cut {
		if !answered[n] {
			t.Errorf("CreateVolume of %s, cut by the driver's kill, was never answered OK afterwards", n)
		}
	}
}

// driverAnswered are the volume names whose CreateVolume the driver ever
// answered OK.
func driverAnswered(log string) (map[string]bool, error) {
	b, err := os.ReadFile(log)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := reDriverAnswer.FindStringSubmatch(line); m != nil && strings.Contains(line, `code="OK"`) {
			out[m[1]] = true
		}
	}
	return out, nil
}
