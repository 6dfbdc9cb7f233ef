package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	clonerfleet "github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// shippedSidecar is the csi-clone-sidecar container of deploy/generic: its
// flags, but the sockets and the metrics endpoint, which the stack sets, and
// the environment the downward API gives it from its resources.
func shippedSidecar() (args, env []string, err error) {
	raw, err := os.ReadFile("deploy/generic/sidecar/patch.yaml")
	if err != nil {
		return nil, nil, fmt.Errorf("run from the repository's root: %w", err)
	}
	var d struct {
		Spec struct {
			Template struct {
				Spec corev1.PodSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &d); err != nil {
		return nil, nil, err
	}
	for _, ctr := range d.Spec.Template.Spec.Containers {
		if ctr.Name != "csi-clone-sidecar" {
			continue
		}
		for _, a := range ctr.Args {
			switch name, _, _ := strings.Cut(a, "="); name {
			case "--csi-address", "--listen-address", "--http-endpoint":
				continue
			}
			args = append(args, strings.ReplaceAll(a, "$(POD_NAMESPACE)", cluster.NamespaceCSI))
		}
		for _, e := range ctr.Env {
			if f := e.ValueFrom; f != nil && f.ResourceFieldRef != nil {
				list := ctr.Resources.Limits
				kind, name, _ := strings.Cut(f.ResourceFieldRef.Resource, ".")
				if kind == "requests" {
					list = ctr.Resources.Requests
				}
				if q, set := list[corev1.ResourceName(name)]; set {
					env = append(env, e.Name+"="+strconv.FormatInt(q.Value(), 10))
				}
			}
		}
	}
	if len(args) == 0 {
		return nil, nil, fmt.Errorf("deploy/generic/sidecar/patch.yaml has no csi-clone-sidecar args")
	}
	return args, env, nil
}

// verdictClock records when each PVC first carried a verdict.
type verdictClock struct {
	mu         sync.Mutex
	bad        map[string]bool
	seen       map[string]time.Time
	firstBad   time.Time
	start      time.Time
	want       int
	allWritten chan struct{}
	lastChange time.Time // of any PVC, by anyone
}

func (v *verdictClock) observe(obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lastChange = time.Now()
	if pvc.Annotations[clonerfleet.AnnCloneVerdict] == "" || v.start.IsZero() {
		return
	}
	key := pvc.Namespace + "/" + pvc.Name
	if _, done := v.seen[key]; done {
		return
	}
	now := time.Now()
	v.seen[key] = now
	if v.bad[key] && v.firstBad.IsZero() {
		v.firstBad = now
	}
	if len(v.seen) == v.want {
		close(v.allWritten)
	}
}

// begin starts the clock for one sidecar's run: nothing seen yet.
func (v *verdictClock) begin() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seen, v.firstBad, v.start = map[string]time.Time{}, time.Time{}, time.Now()
	v.allWritten = make(chan struct{})
}

// stop makes the clock ignore PVC changes until the next begin.
func (v *verdictClock) stop() {
	v.mu.Lock()
	v.start = time.Time{}
	v.mu.Unlock()
}

// watchClaims starts the clock's PVC informer.
func watchClaims(ctx context.Context, f *fleet, o options) (*verdictClock, error) {
	clock := &verdictClock{bad: f.bad, want: o.disks}
	fac := informers.NewSharedInformerFactory(f.kube, 0)
	inf := fac.Core().V1().PersistentVolumeClaims().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: clock.observe, UpdateFunc: func(_, n any) { clock.observe(n) }}); err != nil {
		return nil, err
	}
	fac.Start(ctx.Done())
	fac.WaitForCacheSync(ctx.Done())
	return clock, nil
}

// measure starts the sidecar binary bin on the settled fleet, waits for
// every verdict and for steady state, prints what it cost and stops it.
func measure(ctx context.Context, c *cluster.Cluster, f *fleet, clock *verdictClock, o options, bin string, args, env []string) (figures, error) {
	fig := figures{binary: bin}
	period, err := resyncPeriod(args)
	if err != nil {
		return fig, err
	}
	// Start on a settled cluster: kube-controller-manager writes each new
	// PVC's status at its own rate limit long after the fleet is created.
	clock.waitQuiet(30*time.Second, o.timeout)
	fmt.Printf("sidecar: %s %s %s\n", strings.Join(env, " "), bin, strings.Join(args, " "))
	c.UseSidecarBinary(bin)
	clock.begin()
	defer clock.stop()
	start := clock.start
	if err := c.StartSidecar(nil); err != nil {
		return fig, err
	}
	defer func() {
		if err := c.StopSidecar(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the sidecar: %v\n", err)
		}
	}()
	pid := c.Pid("csi-clone-sidecar")
	rss := &rssSampler{pid: pid}
	if o.profile != "" {
		// The heap as of the collection before each new peak: what the
		// peak is made of (a forced collection would change the run).
		// Quiet: the endpoint may not serve yet at the first peaks.
		rss.onPeak = func() { _ = fetchProfile(c, filepath.Join(o.profile, "heap-peak.pb.gz"), "heap") }
	}
	sampling, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go rss.run(sampling)
	if o.profile != "" {
		go profileBurst(c, o.profile, clock.allWritten)
	}
	select {
	case <-clock.allWritten:
	case <-time.After(o.timeout):
		clock.mu.Lock()
		n := len(clock.seen)
		clock.mu.Unlock()
		return fig, fmt.Errorf("only %d of %d verdicts after %s (logs: %s)", n, o.disks, o.timeout, c.LogPath("csi-clone-sidecar"))
	case <-ctx.Done():
		return fig, ctx.Err()
	}
	tAll := time.Now()
	fig.cpuAll = cpuSeconds(pid)
	// The log holds every process the stack started; this one's lines
	// are those from its start on.
	synced := logTime(c.LogPath("csi-clone-sidecar"), "Verdict caches synced", start)
	// Steady state: let the echo of the verdict writes pass (after each
	// patch kube-controller-manager rewrites the PVC's status conditions, at
	// its own rate limit), then measure.
	quiet := clock.waitQuiet(30*time.Second, o.timeout)
	fmt.Printf("PVCs unchanged for 30 s from %.0f s after the last verdict (kube-controller-manager's echo of the patches)\n", quiet.Sub(tAll).Seconds())
	saveProfile(c, o.profile, "heap.pb.gz", "heap?gc=1")
	saveProfile(c, o.profile, "heap.txt", "heap?debug=1")
	tSteady, tEnd, steady, err := measureSteady(ctx, c, o, pid, synced, period)
	if err != nil {
		return fig, err
	}
	fig.steadyPerMinute = steady.perMinute + steady.spread()
	fig.betweenPasses, fig.fullPass = steady.perMinute, steady.perPass

	fmt.Printf("\n== csi-clone-sidecar at %d disks / %d namespaces / %d flavors (%d bad): %s ==\n", o.disks, o.namespaces, o.goldens, len(f.bad), bin)
	if !synced.IsZero() {
		fig.syncAfterStart = synced.Sub(start).Seconds()
		fig.firstBad, fig.allVerdicts = clock.firstBad.Sub(synced).Seconds(), tAll.Sub(synced).Seconds()
		fmt.Printf("informers synced (and lease held)   %6.1f s after start\n", fig.syncAfterStart)
		fmt.Printf("first bad verdict written           %6.1f s after sync\n", fig.firstBad)
		fmt.Printf("every verdict written               %6.1f s after sync (%.1f s after start)\n", fig.allVerdicts, tAll.Sub(start).Seconds())
	}
	fmt.Printf("CPU until every verdict             %6.1f s\n", fig.cpuAll)
	steady.print(tEnd.Sub(tSteady))
	peak, peakAnon, peakAt := rss.peak()
	fig.peakRSS, fig.peakAnon = float64(peak)/(1<<20), float64(peakAnon)/(1<<20)
	fmt.Printf("peak RSS                            %6.1f MiB (VmHWM %.1f MiB; RSS now %.1f MiB), %.1f s after sync\n", fig.peakRSS,
		float64(procKB(pid, "VmHWM"))/1024, float64(procKB(pid, "VmRSS"))/1024, peakAt.Sub(synced).Seconds())
	fmt.Printf("peak anonymous RSS                  %6.1f MiB (RssAnon; now %.1f MiB, and %.1f MiB of the executable's file pages)\n", fig.peakAnon,
		float64(procKB(pid, "RssAnon"))/1024, float64(procKB(pid, "RssFile"))/1024)
	printMetrics(c)
	printLedger(ctx, f)
	return fig, printRequests(c, start, tAll, tSteady, tEnd)
}

// waitQuiet waits until no PVC has changed for d (at most limit) and
// returns when the last change was.
func (v *verdictClock) waitQuiet(d, limit time.Duration) time.Time {
	deadline := time.Now().Add(limit)
	for {
		v.mu.Lock()
		last := v.lastChange
		v.mu.Unlock()
		if time.Since(last) >= d || time.Now().After(deadline) {
			return last
		}
		time.Sleep(time.Second)
	}
}

// saveProfile writes one of the sidecar's pprof profiles into dir (no-op
// without -profile).
func saveProfile(c *cluster.Cluster, dir, file, query string) {
	if dir == "" {
		return
	}
	path := filepath.Join(dir, file)
	if err := fetchProfile(c, path, query); err != nil {
		fmt.Printf("profile %s: %v\n", file, err)
		return
	}
	fmt.Printf("profile written: %s (go tool pprof -top %s)\n", path, path)
}

// profileBurst writes the sidecar's CPU profile from the moment its pprof
// endpoint answers (the informers' initial lists) until every verdict is
// written (cpu-burst-NN.pb.gz): what the time to all verdicts costs in CPU.
// The profile is taken in 20 s parts, merged by go tool pprof when given
// all of cpu-burst-*.pb.gz; the last part may run past the last verdict.
func profileBurst(c *cluster.Cluster, dir string, done <-chan struct{}) {
	for part := 0; ; part++ {
		select {
		case <-done:
			return
		default:
		}
		path := filepath.Join(dir, fmt.Sprintf("cpu-burst-%02d.pb.gz", part))
		if err := fetchProfile(c, path, "profile?seconds=20"); err != nil {
			part-- // not serving yet
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func fetchProfile(c *cluster.Cluster, path, query string) error {
	resp, err := http.Get("http://" + c.SidecarMetrics + "/debug/pprof/" + query)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// rssSampler keeps the sidecar's highest RSS and when it was reached.
type rssSampler struct {
	pid int
	// onPeak, if set, runs when the RSS passes the last peak it ran at by
	// peakStep.
	onPeak func()
	mu     sync.Mutex
	max    int64
	maxAt  time.Time
	// maxAnon is the peak of the anonymous part alone (RssAnon): the
	// heap, stacks and runtime. The rest of RSS is the executable's clean
	// file pages, shared with the page cache and reclaimable; how many of
	// them are mapped depends on the kernel's page-cache folios more than
	// on the process (31-39 MiB for the same idle binary on this kernel).
	maxAnon int64
}

const peakStep = 4 << 20

func (r *rssSampler) run(ctx context.Context) {
	var reported int64
	for ctx.Err() == nil {
		rss, anon := procKB(r.pid, "VmRSS")*1024, procKB(r.pid, "RssAnon")*1024
		r.mu.Lock()
		if rss > r.max {
			r.max, r.maxAt = rss, time.Now()
		}
		r.maxAnon = max(r.maxAnon, anon)
		r.mu.Unlock()
		if r.onPeak != nil && rss >= reported+peakStep {
			reported = rss
			r.onPeak()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *rssSampler) peak() (rss, anon int64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max, r.maxAnon, r.maxAt
}

// procKB reads one "Key: N kB" line of /proc/<pid>/status.
func procKB(pid int, key string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

// cpuSeconds is the process's user + system time (/proc/<pid>/stat, in
// clock ticks of 1/100 s).
func cpuSeconds(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (ut + st) / 100
}

// logTime is the time of the first klog line containing what, at or
// after from (to the microsecond klog writes).
func logTime(path, what string, from time.Time) time.Time {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	now := time.Now()
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, what) || len(line) < 21 {
			continue
		}
		// klog: Lmmdd hh:mm:ss.uuuuuu
		t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
		if err != nil {
			continue
		}
		if t = t.AddDate(now.Year(), 0, 0); !t.Before(from.Truncate(time.Microsecond)) {
			return t
		}
	}
	return time.Time{}
}

func printMetrics(c *cluster.Cluster) {
	var took []time.Duration
	series := 0
	for range 21 {
		t := time.Now()
		resp, err := http.Get("http://" + c.SidecarMetrics + "/metrics")
		if err != nil {
			fmt.Printf("/metrics: %v\n", err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took = append(took, time.Since(t))
		series = 0
		for _, l := range strings.Split(string(body), "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				series++
			}
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	fmt.Printf("/metrics                            %6.1f ms median, %d series\n", float64(took[len(took)/2].Microseconds())/1000, series)
}

func printLedger(ctx context.Context, f *fleet) {
	total, largest, objects := 0, 0, 0
	for _, name := range ledger.LedgerObjectNames(config.DefaultLedgerName) {
		cm, err := f.kube.CoreV1().ConfigMaps(cluster.NamespaceCSI).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			fmt.Printf("ledger: %v\n", err)
			return
		}
		n := 0
		for k, v := range cm.Data {
			n += len(k) + len(v)
		}
		total, largest, objects = total+n, max(largest, n), objects+1
	}
	fmt.Printf("ledger                              %d bytes in %d objects, largest %d bytes\n", total, objects, largest)
}

// printRequests counts the sidecar's API requests by verb and resource, from
// its start to the last verdict and over the steady-state window.
func printRequests(c *cluster.Cluster, start, tAll, s0, s1 time.Time) error {
	reqs, err := c.SidecarRequests()
	if err != nil {
		return err
	}
	startup, steady := map[string]int{}, map[string]int{}
	for _, r := range reqs {
		key := r.Verb + " " + r.Resource
		if r.Subresource != "" {
			key += "/" + r.Subresource
		}
		switch {
		case r.Time.Before(start):
		case !r.Time.After(tAll):
			startup[key]++
		case r.Time.After(s0) && !r.Time.After(s1):
			steady[key]++
		}
	}
	fmt.Printf("API requests, start to last verdict (%s):\n", tAll.Sub(start).Round(time.Second))
	printCounts(startup)
	fmt.Printf("API requests in steady state (%s):\n", s1.Sub(s0).Round(time.Second))
	printCounts(steady)
	return nil
}

func printCounts(m map[string]int) {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		fmt.Println("  none")
	}
	for _, k := range keys {
		fmt.Printf("  %-40s %6d\n", k, m[k])
	}
}
