package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The differential test holds cloner/cdirules (through cloner/predict, what
// the sidecar predicts for a disk) against the real cdi-controller, the way
// the tap is held against x/net's encoder: seeded arrangements of source
// claims, DataVolume spec kinds, volume modes, access modes, sizes (none,
// within the filesystem overhead of the source, smaller, larger), target
// classes (the source's, another of the driver, one without expansion,
// another driver's, one without a CSIDriver object, a missing one, the
// empty class), under a configuration per chunk (cdirules_diff_config_test.go:
// the CDI override, StorageProfile strategies incl. an unknown one, class
// clone-strategy annotations, claimPropertySets, minimum supported sizes,
// global and per-class filesystem overheads, VolumeSnapshotClasses), from
// claims and from VolumeSnapshots (cdirules_diff_snapshot_test.go), named
// directly or through a DataSource (cdirules_diff_datasource_test.go). Each
// DataVolume is created on the loopback stack and what CDI did (cloneType,
// fallback reason, CloneValidationFailed, CloneWithoutSource, a render
// error, a clone error) must be what the prediction says; each
// StorageProfile's strategy and snapshot class must be what the model of
// CDI's profile controller says.
//
//	CDIRULES_ARRANGEMENTS=1000 CDIRULES_SEED=42 go test -run '^TestCDIRulesMatchCDIController$' ./test/e2e/
//
// CDIRULES_BREAK=<break> predicts from deliberately wrong inputs (diffBreaks:
// overhead, minsize, volumemode, snapshotclass, strategy, override,
// expansion, derivedcopy, accessmodes; diffDiskBreaks: clonetype, usepopulator,
// permissive, imagesize, and for snapshot sources and DataSources
// restoresize, snapshotdriver, sourcemode, snapshotclassname,
// snapshotexists, datasourcenamespace): the test must then report
// mismatches. Every run also counts the mismatches each break would have.

const (
	diffDefaultArrangements = 240
	diffNoCSIClass          = "no-csi"
	diffNoCSIProvisioner    = "example.com/no-csi-driver"
)

// diffSource is one source claim of a batch.
type diffSource struct {
	name string
	mode string
	// bytes is the claim's request: a spec.pvc golden's, or a spec.storage
	// Filesystem golden's (the overhead added).
	bytes int64
	// golden: the catalog's golden DataVolume's claim, in the golden
	// namespace (else a claim of the batch's namespace).
	golden bool
	// imageBytes > 0: the claim is annotated as CDI annotates an imported
	// one (content type kubevirt, the image's virtual size recorded at its
	// capacity), as vm-default-images' goldens are.
	imageBytes int64
	// class is the claim's StorageClass ("": the golden's, replicated).
	class string
	// snap: the source is a VolumeSnapshot (cdirules_diff_snapshot_test.go).
	snap *diffSnap
}

func (s diffSource) namespace(batch string) string {
	if s.golden {
		return cluster.NamespaceGolden
	}
	return batch
}

// diffArrangement is one worker DataVolume.
type diffArrangement struct {
	name   string
	src    diffSource
	target predict.Target
	// classSet: the DataVolume names target.Class; else it names none.
	classSet bool
	// via: the DataVolume reaches its source through a DataSource
	// (cdirules_diff_datasource_test.go).
	via *diffVia
	// shape is the generator's shape for it (genArrangement), counted with
	// the storage-layer clones it makes so the weights can be read.
	shape string
}

func diffEnvInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func TestCDIRulesMatchCDIController(t *testing.T) {
	checkNoLeaks(t)
	seed := diffEnvInt(t, "CDIRULES_SEED", time.Now().UnixNano())
	total := int(diffEnvInt(t, "CDIRULES_ARRANGEMENTS", diffDefaultArrangements))
	t.Logf("differential test against cdi-controller: seed %d, %d arrangements (CDIRULES_SEED, CDIRULES_ARRANGEMENTS)", seed, total)
	brk := diffBreak(t, os.Getenv("CDIRULES_BREAK"))
	c := cluster.Start(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{
			{Name: "replicated", DefaultVirt: true},
			{Name: "replicated-fixed", Pool: "fixed", NoExpansion: true},
			{Name: "replicated-b", Pool: "b", Default: true},
		},
		SidecarArgs: []string{"--resync-period=2s", "--admission-params=true"},
		// A chunk's volumes are deleted once decided, but the driver frees
		// a volume only when csi-provisioner gets to its DeleteVolume, and
		// 30 arrangements' sources and clones come near the default 1TiB
		// pools (sparse files: bookkeeping only).
		DriverArgs: []string{"--capacity=replicated=32Ti", "--capacity=fixed=32Ti", "--capacity=b=32Ti"},
	})
	// A chunk takes 25s on a quiet machine and 70-100s on a loaded one
	// (1,000 arrangements took 38 minutes under a load average of 12-24;
	// each chunk now also waits until its claims are deleted).
	ctx, cancel := context.WithTimeout(context.Background(), max(38*time.Minute, time.Duration(total)*5*time.Second))
	defer cancel()
	if err := c.StartOtherDriver(ctx, otherDriver, cluster.StorageClass{Name: otherClass}); err != nil {
		t.Fatal(err)
	}
	noCSI := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
		"metadata": map[string]any{"name": diffNoCSIClass}, "provisioner": diffNoCSIProvisioner, "allowVolumeExpansion": true}}
	classes := schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}
	if _, err := c.Dynamic.Resource(classes).Create(ctx, noCSI, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespace(ctx, diffDataSourceNamespace); err != nil {
		t.Fatal(err)
	}
	r := &diffRun{brk: brk, golden: setUpDiffGuard(t, ctx, c), guard: newAdmissionClient(t, c),
		byBreak: map[string]int{}, coverage: diffCoverage{}}
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	derived := diffDerivedPropertySets(t, ctx, c)
	configs := genConfigs(rng, (total+diffChunk-1)/diffChunk)
	for i, cfg := range configs {
		applyDiffConfig(t, ctx, c, cfg, derived)
		r.mismatches += checkDiffProfiles(t, ctx, c, r.brk, r.byBreak)
		ns := fmt.Sprintf("cdirules-%d", i)
		r.runChunk(t, ctx, c, ns, i, cfg, min(diffChunk, total-i*diffChunk), rng)
		emptyDiffChunk(t, ctx, c, ns, r.golden.name)
		deleteDiffGoldenSnapshot(t, ctx, c, ns)
	}
	t.Logf("seed %d: coverage (arrangements per value of each input):%s", seed, r.coverage)
	var caught []string
	for _, b := range diffBreakNames {
		caught = append(caught, fmt.Sprintf("%s=%d", b, r.byBreak[b]))
	}
	t.Logf("seed %d: mismatches each break would have (CDIRULES_BREAK): %s", seed, strings.Join(caught, " "))
	t.Logf("seed %d: %d arrangements checked (%d also by the guard in Deny, %d of them through a DataSource, %d restoring a golden VolumeSnapshot and %d warned about access modes; %d cloned at the storage layer), %d mismatches",
		seed, r.checked, r.guarded, r.guardedVia, r.guardedSnapshot, r.warned, r.storageLayer, r.mismatches)
	if r.mismatches > 0 || r.checked != total {
		t.Fatalf("seed %d: %d of %d arrangements differ from cdi-controller (%d checked)", seed, r.mismatches, total, r.checked)
	}
	if total < diffDefaultArrangements {
		return
	}
	// The guard's invariant (Deny never refuses a storage-layer clone)
	// needs many of them to be tested.
	if 3*r.storageLayer < r.checked {
		t.Errorf("seed %d: only %d of %d arrangements end in a storage-layer clone; the generator must weight them to a third", seed, r.storageLayer, r.checked)
	}
	for _, b := range diffBreakNames {
		if r.byBreak[b] == 0 {
			t.Errorf("seed %d: break %s changes no outcome in %d arrangements: the generator does not exercise its rules", seed, b, total)
		}
	}
}

// emptyDiffChunk deletes a decided chunk's DataVolumes, claims, pods and
// snapshots and waits until CDI has cleaned up what it made for them in
// the golden namespace (its tmp-pvcs; clone-populator's cleanup on the
// target claim's deletion). Left behind, a refused tmp-pvc keeps
// csi-provisioner retrying it, and a few hundred of them starved later
// chunks' clones (seed 1206 stopped in chunk 32 on "CDI never decided").
// No namespace controller runs in the loopback cluster: the namespace is
// only marked for deletion.
func emptyDiffChunk(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, golden string) {
	t.Helper()
	all, bg := metav1.ListOptions{}, metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &bg}
	emptyDiffDataSources(t, ctx, c, ns)
	for _, gvr := range []schema.GroupVersionResource{cluster.DataVolumeGVR, cluster.VolumeSnapshotGVR, fleet.DataSourceGVR,
		{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "persistentvolumeclaims"}} {
		if err := c.Dynamic.Resource(gvr).Namespace(ns).DeleteCollection(ctx, del, all); err != nil {
			t.Fatalf("emptying %s: %s: %v", ns, gvr.Resource, err)
		}
	}
	var left []string
	start, reaped := time.Now(), false
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var now []string
		for _, n := range []string{ns, cluster.NamespaceGolden} {
			claims, err := c.Client.CoreV1().PersistentVolumeClaims(n).List(ctx, all)
			if err != nil {
				return false, err
			}
			for _, pvc := range claims.Items {
				if pvc.Name != golden || n != cluster.NamespaceGolden {
					now = append(now, describeLeftClaim(&pvc))
				}
			}
		}
		left = now
		if len(left) > 0 && !reaped && time.Since(start) > time.Minute {
			reaped = true
			reapCDILeftovers(t, ctx, c, ns)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s: claims left 3 minutes after the chunk's deletion: %v (%v)", ns, left, err)
	}
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// describeLeftClaim names a claim still there after its chunk's deletion
// with what keeps it: phase, deletion and finalizers.
func describeLeftClaim(pvc *corev1.PersistentVolumeClaim) string {
	deleting := ""
	if pvc.DeletionTimestamp != nil {
		deleting = " deleting"
	}
	return fmt.Sprintf("%s/%s (%s%s, finalizers %v)", pvc.Namespace, pvc.Name, pvc.Status.Phase, deleting, pvc.Finalizers)
}

// reapCDILeftovers deletes the claims CDI made in the golden namespace for
// the chunk's disks and has not cleaned up a minute after their deletion,
// as an operator would. cdi-controller v1.65 leaks the tmp-source-pvc of a
// host-assisted clone from a VolumeSnapshot when the target goes within a
// second or two of "Clone Complete" (seen in CI: the claim, Bound and
// unused, stayed for three minutes with cdi-controller idle).
func reapCDILeftovers(t *testing.T, ctx context.Context, c *cluster.Cluster, ns string) {
	t.Helper()
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("%s: listing CDI's leftovers: %v", ns, err)
		return
	}
	for _, pvc := range claims.Items {
		if !strings.HasPrefix(pvc.Annotations["cdi.kubevirt.io/events.source"], ns+"/") {
			continue
		}
		t.Logf("%s: deleting CDI's leftover %s a minute after the chunk's deletion", ns, describeLeftClaim(&pvc))
		err := c.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Delete(ctx, pvc.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("%s: deleting %s: %v", ns, pvc.Name, err)
		}
	}
}

// diffRun is a run's state and counts.
type diffRun struct {
	// brk is CDIRULES_BREAK ("" none).
	brk    string
	golden diffSource
	// mismatches, checked, guarded: arrangements differing from CDI,
	// compared, also shown to the guard; storageLayer: those CDI cloned at
	// the storage layer; warned: guarded ones warned about for a claim
	// without ReadWriteMany.
	mismatches, checked, guarded, storageLayer, warned int
	// guardedVia: guarded ones through a DataSource; guardedSnapshot:
	// restores of the golden VolumeSnapshot.
	guardedVia, guardedSnapshot int
	// guard asks the API server, keeping its warnings.
	guard *admissionClient
	// byBreak: arrangements and profiles each break would get wrong.
	byBreak  map[string]int
	coverage diffCoverage
}

// diffChunk is how many DataVolumes are created before their outcomes are
// read, in a namespace and a configuration of their own: CDI decides a
// chunk in seconds; hundreds at once queue behind each other.
const diffChunk = 30

// runChunk creates the chunk's sources and n arrangements in namespace ns
// and compares each with what CDI did.
func (r *diffRun) runChunk(t *testing.T, ctx context.Context, c *cluster.Cluster, ns string, chunk int, cfg diffConfig, n int, rng *rand.Rand) {
	t.Helper()
	if err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	fsStorage := cdirules.RequiredSpace(cdirules.DefaultOverhead, 10<<30)
	sources := []diffSource{{name: "src-block-pvc", mode: cdirules.Block, bytes: 10 << 30}, {name: "src-fs-pvc", mode: cdirules.Filesystem, bytes: 10 << 30},
		{name: "src-block-storage", mode: cdirules.Block, bytes: 10 << 30}, {name: "src-fs-storage", mode: cdirules.Filesystem, bytes: fsStorage},
		{name: "src-fs-image", mode: cdirules.Filesystem, bytes: 10 << 30, imageBytes: 8 << 30},
		{name: "src-block-image", mode: cdirules.Block, bytes: 10 << 30, imageBytes: 10 << 30}}
	for _, s := range sources {
		createDiffSource(t, ctx, c, ns, s)
	}
	in := liveInputs(t, ctx, c)
	truth := predict.NewState(in)
	state := predict.NewState(breakInputs(r.brk, in))
	broken := map[string]*predict.State{}
	for _, b := range diffBreakNames {
		broken[b] = predict.NewState(breakInputs(b, in))
	}
	goldens := map[string]predict.Golden{}
	for _, s := range sources {
		goldens[s.name] = sourceGolden(t, ctx, c, ns, s)
	}
	// The catalog's golden: its workers are also shown to the guard, once
	// its parameters follow the configuration.
	golden := r.golden
	goldens[golden.name] = sourceGolden(t, ctx, c, cluster.NamespaceGolden, golden)
	waitGuardParams(t, ctx, c, r.guard, truth, golden, goldens[golden.name])
	snaps, snapGoldens := createDiffSnapshots(t, ctx, c, ns, chunk, cfg.snapshots)
	for name, g := range snapGoldens {
		goldens[name] = g
	}
	sources = append(append(sources, golden, golden, golden), weightedSnapshotSources(snaps)...)
	// Shown to the guard: the catalog's golden, and where the configuration
	// has VolumeSnapshotClasses a golden VolumeSnapshot of it.
	guarded := map[string]bool{golden.name: true}
	if cfg.snapshots != diffSnapshotsNone {
		gs, g := createDiffGoldenSnapshot(t, ctx, c, ns, golden)
		goldens[gs.name], guarded[gs.name] = g, true
		sources = append(sources, gs, gs)
		waitGuardParams(t, ctx, c, r.guard, truth, gs, g)
	}
	arrs := make([]diffArrangement, n)
	viaSources := map[string]*cdiv1.DataSource{}
	for i := range arrs {
		arrs[i] = genArrangement(rng, i, sources, cfg)
		if arrs[i].via != nil {
			viaSources[arrs[i].name] = createDiffDataSource(t, ctx, c, ns, arrs[i])
		}
	}
	waitDiffDataSources(t, ctx, c, viaSources)
	waitDiffDataSourceParams(t, ctx, c, ns, arrs, viaSources, guarded)
	for _, a := range arrs {
		createDiffDataVolume(t, ctx, c, ns, a)
	}
	// The golden the sidecar finds for an arrangement (through its
	// DataSource, as the break brk reads it), and what it predicts CDI does.
	expect := func(a diffArrangement, brk string, s *predict.State) (predict.Prediction, string) {
		g, found := goldens[a.src.name], true
		if a.via != nil {
			g, found = viaGolden(a, ns, viaSources[a.name], goldens, brk)
		}
		target := a.target
		target.UnqualifiedSource = a.via != nil && a.via.unqualified && brk != "datasourcenamespace"
		bg, bt := breakDisk(brk, g, target)
		p := s.Predict(bg, bt)
		if !found {
			return p, "waits: source"
		}
		return p, expectedOutcome(p, bt)
	}
	for _, a := range arrs {
		got := observeCDI(t, ctx, c, ns, a.name)
		p, want := expect(a, r.brk, state)
		r.checked++
		r.coverage.add(a.dims(cfg, got))
		r.coverage.add(map[string]string{"route": a.route(ns)})
		if got == cdirules.StrategyCSIClone || got == cdirules.StrategySnapshot {
			r.storageLayer++
		}
		for _, b := range diffBreakNames {
			if _, w := expect(a, b, broken[b]); w != got {
				r.byBreak[b]++
			}
		}
		if want != got {
			r.mismatches++
			t.Errorf("%s/%s: source %s (%s, %d bytes), target %+v, configuration %v: predicted %s, CDI did %s",
				ns, a.name, a.src.name, a.src.mode, a.src.bytes, a.target, cfg.dims(a.target.Class), want, got)
		}
		claimModes, claimed := r.checkAccessModes(t, ctx, c, ns, a, cfg, state, broken)
		if !guarded[a.src.name] {
			continue
		}
		g := goldens[a.src.name]
		r.guarded++
		if a.via != nil {
			r.guardedVia++
		}
		if a.src.snap != nil {
			r.guardedSnapshot++
		}
		refused, warnings := guardRefuses(t, ctx, r.guard, ns, a)
		r.checkAccessModeWarning(t, ns, a, refused, warnings, claimModes, claimed)
		if want == "waits: source" || a.src.snap != nil && a.via != nil && a.via.unqualified {
			// Through a DataSource naming the golden without a namespace:
			// the disk's namespace holds no golden (a snapshot's empty
			// namespace stays empty: fleet.ClonedSnapshot), so nothing is
			// guarded.
			if refused {
				r.mismatches++
				t.Errorf("%s/%s: the guard refused a DataVolume whose DataSource resolves to no golden: %+v", ns, a.name, a.target)
			}
			continue
		}
		if refused && (got == cdirules.StrategyCSIClone || got == cdirules.StrategySnapshot) && a.target.Class == g.Class {
			r.mismatches++
			t.Errorf("%s/%s: the guard in Deny refused a DataVolume CDI clones at the storage layer on the golden's class (%s): %+v", ns, a.name, got, a.target)
		} else if refused != p.GuardRefuses(predict.GuardRules{}) {
			r.mismatches++
			t.Errorf("%s/%s: the guard refused=%v, the prediction is %s/%s, flags %v (CDI did %s): %+v", ns, a.name, refused, p.Path, p.Reason, p.Flags, got, a.target)
		}
	}
}

// checkAccessModes compares the access modes of the claim CDI made for the
// arrangement (when it made one) with those the model renders
// (cdirules.RenderClaim: the DataVolume's, else the class's
// StorageProfile's); each break that renders others counts.
func (r *diffRun) checkAccessModes(t *testing.T, ctx context.Context, c *cluster.Cluster, ns string, a diffArrangement, cfg diffConfig,
	state *predict.State, broken map[string]*predict.State) (claimModes []string, claimed bool) {
	t.Helper()
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, a.name, metav1.GetOptions{})
	if err != nil {
		return nil, false // CDI rendered no claim
	}
	var got []string
	for _, am := range pvc.Spec.AccessModes {
		got = append(got, string(am))
	}
	r.coverage.add(map[string]string{"claim accessModes": strings.Join(got, ",")})
	_, bt := breakDisk(r.brk, predict.Golden{}, a.target)
	if claim, err := state.Claim(bt); err != nil || !slices.Equal(claim.AccessModes, got) {
		r.mismatches++
		t.Errorf("%s/%s: target %+v, configuration %v: CDI's claim has access modes %v, the model renders %v (%v)",
			ns, a.name, a.target, cfg.dims(a.target.Class), got, claim.AccessModes, err)
	}
	for _, b := range diffBreakNames {
		_, bt := breakDisk(b, predict.Golden{}, a.target)
		if claim, err := broken[b].Claim(bt); err != nil || !slices.Equal(claim.AccessModes, got) {
			r.byBreak[b]++
		}
	}
	return got, true
}

// checkAccessModeWarning compares the worker access-mode warning the API
// server gave for the guarded arrangement with the claim CDI made for it:
// warned exactly when the claim lacks ReadWriteMany. Not compared: a
// DataVolume the guard refused (the request stops there) or one CDI made
// no claim for.
func (r *diffRun) checkAccessModeWarning(t *testing.T, ns string, a diffArrangement, refused bool, warnings, claimModes []string, claimed bool) {
	t.Helper()
	warned := slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "not ReadWriteMany") })
	if refused || !claimed {
		return
	}
	if warned {
		r.warned++
	}
	// Only a Talos flavor's golden DataVolume is a worker golden
	// (publish.AdmissionData's <golden>.worker): restores of a golden
	// VolumeSnapshot are never warned about.
	if want := predict.LacksReadWriteMany(claimModes) && a.src.snap == nil; warned != want {
		r.mismatches++
		t.Errorf("%s/%s: CDI's claim has access modes %v, the access-mode warning said %v (want warned=%v): %+v", ns, a.name, claimModes, warnings, want, a.target)
	}
}

// dims are the arrangement's own inputs, the configuration's for its
// class, and what CDI did, for the coverage counts.
func (a diffArrangement) dims(cfg diffConfig, got string) map[string]string {
	d := cfg.dims(a.target.Class)
	mode := a.target.VolumeMode
	if mode == "" {
		mode = "unset"
	}
	d["spec kind"], d["volumeMode"], d["source"] = string(a.target.Kind), mode, a.src.name
	d["class"] = a.target.Class
	if !a.classSet {
		d["class"] = "empty (" + a.target.Class + ")"
	}
	d["CDI did"] = got
	d["shape"] = a.shape
	if got == cdirules.StrategyCSIClone || got == cdirules.StrategySnapshot {
		d["shape, storage-layer clones"] = a.shape
	}
	pd := a.target.PerDisk
	d["cloneType"], d["usePopulator"] = "absent", "absent"
	if pd.CloneType != nil {
		d["cloneType"] = strconv.Quote(*pd.CloneType)
	}
	if pd.UsePopulator != nil {
		d["usePopulator"] = strconv.Quote(*pd.UsePopulator)
	}
	d["permissiveClone"] = strconv.FormatBool(pd.Permissive)
	d["contentType"] = a.target.ContentType
	if d["contentType"] == "" {
		d["contentType"] = "unset"
	}
	return d
}

// createDiffSource makes a bound source claim on the golden's class.
func createDiffSource(t *testing.T, ctx context.Context, c *cluster.Cluster, ns string, s diffSource) {
	t.Helper()
	mode := corev1.PersistentVolumeMode(s.mode)
	class := s.class
	if class == "" {
		class = "replicated"
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode: &mode, StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(s.bytes, resource.BinarySI)}}}}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sourceGolden waits for a source claim to bind and reads it as the
// planner does.
func sourceGolden(t *testing.T, ctx context.Context, c *cluster.Cluster, ns string, s diffSource) predict.Golden {
	t.Helper()
	var pvc *corev1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		pvc, err = c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, s.name, metav1.GetOptions{})
		return err == nil && pvc.Status.Phase == corev1.ClaimBound, nil
	})
	if err != nil {
		t.Fatalf("source %s never bound: %v", s.name, err)
	}
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	g := predict.Golden{Namespace: ns, Name: s.name, Class: "replicated", Phase: "Succeeded", Driver: cluster.DefaultDriverName,
		VolumeMode: s.mode, CapacityBytes: capacity.Value(), RequestedBytes: s.bytes}
	if s.imageBytes == 0 {
		return g
	}
	// As CDI's importer leaves an imported claim: content type kubevirt,
	// the image's virtual size valid at this capacity (pvc-clone-controller.go
	// getSizeFromAnnotations), so no size-detection pod is needed.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q,%q:%q}}}`, cdirules.AnnContentType, cdirules.ContentKubeVirt,
		cdirules.AnnVirtualSize, strconv.FormatInt(s.imageBytes, 10), cdirules.AnnSourceCapacity, capacity.String())
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, s.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	g.ContentType, g.VirtualSize = cdirules.ContentKubeVirt, s.imageBytes
	return g
}

// liveInputs are the prediction's inputs, the objects CDI reads.
func liveInputs(t *testing.T, ctx context.Context, c *cluster.Cluster) predict.Inputs {
	t.Helper()
	var in predict.Inputs
	classes, err := c.Client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range classes.Items {
		in.Classes = append(in.Classes, &classes.Items[i])
	}
	drivers, err := c.Client.StorageV1().CSIDrivers().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drivers.Items {
		in.CSIDrivers = append(in.CSIDrivers, d.Name)
	}
	in.Profiles = listAs[cdiv1.StorageProfile](t, ctx, c, cluster.StorageProfileGVR)
	in.CDIs = listAs[cdiv1.CDI](t, ctx, c, cluster.CDIGVR)
	in.CDIConfigs = listAs[cdiv1.CDIConfig](t, ctx, c, cluster.CDIConfigGVR)
	vscs, err := c.Dynamic.Resource(cluster.VolumeSnapshotClassGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vscs.Items {
		driver, _, _ := unstructured.NestedString(v.Object, "driver")
		in.SnapshotClasses = append(in.SnapshotClasses, predict.SnapshotClass{Name: v.GetName(), Driver: driver,
			Default: v.GetAnnotations()["snapshot.storage.k8s.io/is-default-class"] == "true"})
	}
	return in
}

func listAs[T any](t *testing.T, ctx context.Context, c *cluster.Cluster, gvr schema.GroupVersionResource) []*T {
	t.Helper()
	list, err := c.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*T, 0, len(list.Items))
	for _, u := range list.Items {
		obj := new(T)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
			t.Fatal(err)
		}
		out = append(out, obj)
	}
	return out
}

// genArrangement draws one worker DataVolume under a configuration.
func genArrangement(rng *rand.Rand, i int, sources []diffSource, cfg diffConfig) diffArrangement {
	// One in ten is a spec.storage Filesystem clone of a Filesystem source
	// onto a class of its driver, sized within the overhead of it: where the
	// class's overhead, minimum size and expansion decide between a clone,
	// NoVolumeExpansion and CloneValidationFailed.
	//
	// Seven in ten are shaped as a pool's disk (poolShaped), most of which
	// CDI clones at the storage layer unless the configuration says copy or
	// the volume modes differ, three in four of those without a cloneType
	// annotated csi-clone: a third or more of all end in a storage-layer
	// clone, which the guard's invariant is about (seed 2612, 1,000
	// arrangements, made 331 with six in ten pool-shaped, one in two of
	// them annotated, the catalog's golden drawn as two sources and one
	// DataSource route in four unqualified; seed 4 then showed 41 % of the
	// pool shapes and 9 % of the size edges cloned at the storage layer).
	//
	// Three in twenty are a spec.storage disk smaller than its source
	// (sizeEdge): where permissiveClone, set by hand or by CDI from the
	// golden's recorded image size, decides between a clone and a refusal.
	// The last one in twenty draws every input freely.
	shape := rng.IntN(20)
	boundary := shape < 2
	src := sources[rng.IntN(len(sources))]
	for boundary && (src.golden || src.snap != nil || src.mode != cdirules.Filesystem || src.imageBytes > 0) {
		src = sources[rng.IntN(len(sources))]
	}
	a := diffArrangement{name: fmt.Sprintf("dv-%03d", i), src: src}
	t := &a.target
	t.Kind = []cdirules.SpecKind{cdirules.KindPVC, cdirules.KindStorage}[rng.IntN(2)]
	t.VolumeMode = []string{"", cdirules.Block, cdirules.Filesystem}[rng.IntN(3)]
	if boundary {
		t.Kind, t.VolumeMode = cdirules.KindStorage, cdirules.Filesystem
	}
	if t.Kind == cdirules.KindPVC || rng.IntN(2) == 0 {
		t.AccessModes = []string{"ReadWriteOnce"}
	}
	classes := []string{"replicated", "replicated-fixed", "replicated-b", otherClass, diffNoCSIClass, "missing-class", ""}
	class := classes[rng.IntN(len(classes))]
	a.classSet = class != ""
	if class == "" {
		// What CDI resolves an empty class to (cdirules.FallbackClass).
		if t.Kind == cdirules.KindPVC {
			class = "replicated-b"
		} else {
			class = "replicated"
		}
	}
	t.Class = class
	if boundary {
		// The driver's classes, half of them the one without expansion.
		t.Class, a.classSet = []string{"replicated", "replicated-fixed", "replicated-fixed", "replicated-b"}[rng.IntN(4)], true
	} else if rng.IntN(12) == 0 {
		t.ContentType = cdirules.ContentArchive
		if !a.classSet {
			t.Class = "replicated-b" // the Kubernetes default
		}
	}
	// Sizes around the source's: none, the same, the largest image whose
	// Filesystem claim on the class fits the source, sizes between it and
	// the source's (where the class's overhead decides), smaller, larger.
	edge := cdirules.LargestImage(src.bytes, cfg.overheadOf(t.Class))
	between := (edge + src.bytes) / 2 / (1 << 20) * (1 << 20)
	sizes := []int64{0, 10 << 30, 19 << 29, 10<<30 + 1<<20, src.bytes, cdirules.RequiredSpace(cdirules.DefaultOverhead, src.bytes),
		edge, edge + 1<<20, between, src.bytes - 1<<20, 11 << 30, 2 << 30}
	t.Bytes = sizes[rng.IntN(len(sizes))]
	if boundary {
		t.Bytes = sizes[7+rng.IntN(3)] // edge + 1MiB, between, the source's - 1MiB
	}
	pool := shape >= 2 && shape <= 15
	if pool {
		poolShaped(rng, &a)
	}
	if t.Kind == cdirules.KindPVC && t.Bytes == 0 {
		t.Bytes = 20 << 30 // a claim without a size is not a valid PVC
	}
	if t.ContentType == "" && rng.IntN(3) == 0 {
		t.ContentType = cdirules.ContentKubeVirt // vm-disk's, written out
	}
	t.PerDisk = genPerDisk(rng)
	if pool && t.PerDisk.CloneType == nil && rng.IntN(4) != 0 {
		// The operator's csi-clone on a pool's disk, which CDI obeys where
		// it would copy: what the guard must never refuse.
		csiClone := cdirules.StrategyCSIClone
		t.PerDisk.CloneType = &csiClone
	}
	a.shape = "free"
	switch {
	case boundary:
		a.shape = "boundary"
	case pool:
		a.shape = "pool"
	case shape <= 18:
		a.shape = "size edge"
		sizeEdge(rng, &a, sources)
	}
	snapshotShaped(rng, &a)
	routeViaDataSource(rng, &a)
	return a
}

// sizeEdge makes an arrangement a spec.storage disk of the driver's class,
// sized between the image a source recorded and the source's request, or
// below both: CDI clones it only when the claim is permissive, by the
// annotation (half of them) or because detectCloneSize found the image
// fits (a Block target of a Filesystem image source).
func sizeEdge(rng *rand.Rand, a *diffArrangement, sources []diffSource) {
	withImage := rng.IntN(4) != 0
	for a.src.golden || a.src.snap != nil || a.src.mode != cdirules.Filesystem || withImage && a.src.imageBytes == 0 {
		a.src = sources[rng.IntN(len(sources))]
	}
	t := &a.target
	t.Kind, t.ContentType, t.Class, a.classSet = cdirules.KindStorage, "", "replicated", true
	t.VolumeMode = []string{cdirules.Block, cdirules.Filesystem}[rng.IntN(2)]
	if withImage && rng.IntN(2) == 0 {
		t.VolumeMode = cdirules.Block // where detectCloneSize reads the image's size
	}
	// 9Gi lies between the image (8Gi) and the largest image its source
	// could hold: only the recorded size makes that claim permissive.
	t.Bytes = []int64{9 << 30, 9 << 30, 19 << 29, a.src.bytes - 1<<20, 2 << 30}[rng.IntN(5)]
	// Sizes alone decide: no other per-disk annotation.
	t.PerDisk = cdirules.PerDisk{Permissive: rng.IntN(2) == 0}
}

// poolShaped makes an arrangement a pool's (or a vm-disk's) disk:
// spec.storage on a class of the source's driver, the source's volume mode
// or none, sizeless or the source's size.
func poolShaped(rng *rand.Rand, a *diffArrangement) {
	t := &a.target
	t.Kind, t.ContentType = cdirules.KindStorage, ""
	t.VolumeMode = []string{"", a.src.mode, a.src.mode, a.src.mode}[rng.IntN(4)]
	t.Class, a.classSet = []string{"replicated", "replicated", "replicated-b"}[rng.IntN(3)], true
	if rng.IntN(4) == 0 {
		t.Class, a.classSet = "replicated", false // the virtualization default
	}
	t.Bytes = []int64{0, 0, a.src.bytes}[rng.IntN(3)]
}

// genPerDisk draws the per-disk annotations CDI reads: cloneType (often
// csi-clone, the annotation that makes CDI clone where it would copy; the
// other strategies, a value CDI does not know and the empty one),
// usePopulator (true, false and values strconv.ParseBool refuses) and
// permissiveClone; most disks carry none.
func genPerDisk(rng *rand.Rand) cdirules.PerDisk {
	ann := map[string]string{}
	switch n := rng.IntN(24); {
	case n < 6:
		ann[cdirules.AnnCloneType] = cdirules.StrategyCSIClone
	case n < 8:
		ann[cdirules.AnnCloneType] = cdirules.StrategySnapshot
	case n < 9:
		ann[cdirules.AnnCloneType] = cdirules.StrategyCopy
	case n < 10:
		ann[cdirules.AnnCloneType] = []string{"fast", "", "CSI-Clone"}[rng.IntN(3)]
	}
	switch n := rng.IntN(24); {
	case n < 2:
		ann[cdirules.AnnUsePopulator] = []string{"false", "0", "False"}[rng.IntN(3)]
	case n < 4:
		ann[cdirules.AnnUsePopulator] = []string{"true", "1"}[rng.IntN(2)]
	case n < 5:
		ann[cdirules.AnnUsePopulator] = []string{"yes", "", "off"}[rng.IntN(3)]
	}
	if rng.IntN(10) == 0 {
		ann[cdirules.AnnPermissiveClone] = "true"
	}
	return cdirules.PerDiskOf(ann)
}

// createDiffDataVolume creates the arrangement's DataVolume; a clone of the
// catalog's golden carries a clone token (cross-namespace).
func createDiffDataVolume(t *testing.T, ctx context.Context, c *cluster.Cluster, ns string, a diffArrangement) {
	t.Helper()
	dv := diffDataVolume(a, ns, a.src.namespace(ns))
	if a.src.golden && (a.via == nil || !a.via.unqualified) {
		resource := cluster.TokenForPVC
		if a.src.snap != nil {
			resource = cluster.TokenForSnapshot
		}
		tok, err := c.CloneTokenFor(ctx, resource, cluster.NamespaceGolden, a.src.name, ns, a.name)
		if err != nil {
			t.Fatal(err)
		}
		if dv.Annotations == nil {
			dv.Annotations = map[string]string{}
		}
		dv.Annotations[cluster.AnnCloneToken] = tok
	}
	if _, err := c.CreateDataVolume(ctx, dv); err != nil {
		t.Fatalf("%s: %v", a.name, err)
	}
}

// diffDataVolume is the arrangement's DataVolume in ns, cloning its source
// in srcNS.
func diffDataVolume(a diffArrangement, ns, srcNS string) *cdiv1.DataVolume {
	tg := a.target
	var mode *corev1.PersistentVolumeMode
	if tg.VolumeMode != "" {
		m := corev1.PersistentVolumeMode(tg.VolumeMode)
		mode = &m
	}
	var ams []corev1.PersistentVolumeAccessMode
	for _, am := range tg.AccessModes {
		ams = append(ams, corev1.PersistentVolumeAccessMode(am))
	}
	res := corev1.VolumeResourceRequirements{}
	if tg.Bytes > 0 {
		res.Requests = corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(tg.Bytes, resource.BinarySI)}
	}
	var class *string
	if a.classSet {
		class = &tg.Class
	}
	dv := &cdiv1.DataVolume{TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: ns, Annotations: tg.PerDisk.Annotations()},
		Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: srcNS, Name: a.src.name}},
			ContentType: cdiv1.DataVolumeContentType(tg.ContentType)}}
	if a.src.snap != nil {
		dv.Spec.Source = &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: srcNS, Name: a.src.name}}
	}
	if a.via != nil {
		viaNS := a.via.namespace(ns)
		dv.Spec.Source = nil
		dv.Spec.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &viaNS, Name: a.via.name(ns, a)}
	}
	if tg.Kind == cdirules.KindPVC {
		dv.Spec.PVC = &corev1.PersistentVolumeClaimSpec{AccessModes: ams, VolumeMode: mode, StorageClassName: class, Resources: res}
	} else {
		dv.Spec.Storage = &cdiv1.StorageSpec{AccessModes: ams, VolumeMode: mode, StorageClassName: class, Resources: res}
	}
	return dv
}

// optimisticLockMessage ends the API server's Conflict error
// (k8s.io/apiserver registry/generic/registry/store.go
// OptimisticLockErrorMsg).
const optimisticLockMessage = "the object has been modified; please apply your changes to the latest version and try again"

// CDI's fallback messages (clone/planner.go) by reason.
var diffFallbacks = map[string]string{
	"No compatible volumesnapshotclass found":                                      cdirules.FallbackNoVolumeSnapshotClass,
	"The volume modes of source and target are incompatible":                       cdirules.FallbackIncompatibleVolumeModes,
	"No volume expansion is possible":                                              cdirules.FallbackNoVolumeExpansion,
	"Provisioners are incompatible":                                                cdirules.FallbackIncompatibleProvisioners,
	"The storageclass provisioner does not match the volumesnapshotcontent driver": cdirules.FallbackNoProvisionerMatch,
}

// observeCDI waits for CDI's decision on a DataVolume, from explicit
// signals only: a CloneValidationFailed or ErrClaimNotValid event on it,
// the legacy path's cloneType on it, or its claim's cloneType (past the
// Pending phase), fallback reason and clone error.
func observeCDI(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name string) string {
	t.Helper()
	var got, last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, last = decideCDI(ctx, c, ns, name)
		return got != "", nil
	})
	if err != nil {
		t.Fatalf("%s/%s: CDI never decided: %v; last seen: %s", ns, name, err, last)
	}
	return got
}

func decideCDI(ctx context.Context, c *cluster.Cluster, ns, name string) (decided, seen string) {
	events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return "", err.Error()
	}
	for _, e := range events.Items {
		switch e.Reason {
		case "CloneValidationFailed":
			return "validation", ""
		case "ErrClaimNotValid":
			return "render", ""
		case "CloneWithoutSource":
			return "waits: source", ""
		}
	}
	dv, err := c.Dynamic.Resource(cluster.DataVolumeGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err.Error()
	}
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if _, ok := dv.GetAnnotations()[cdirules.AnnUsePopulator]; ok && cdiLogged(c, ns, name, "strconv.ParseBool") {
			return "populator-error", ""
		}
		return "", "no claim: " + err.Error()
	}
	ann := pvc.Annotations
	seen = fmt.Sprint(ann)
	if _, via := dv.Object["spec"].(map[string]any)["sourceRef"]; via && (ann["cdi.kubevirt.io/clonePhase"] == "" || ann["cdi.kubevirt.io/clonePhase"] == "Pending") &&
		cdiLogged(c, ns, name, cdirules.ErrEmptySourceNamespace) {
		// The claim is made, its VolumeCloneSource never is: only
		// cdi-controller's log says why.
		return "error: " + cdirules.ErrEmptySourceNamespace, seen
	}
	if pvc.Spec.DataSourceRef == nil && dv.GetAnnotations()["cdi.kubevirt.io/cloneType"] == cdirules.StrategyCopy {
		return "legacy-copy", seen
	}
	phase, ct := ann["cdi.kubevirt.io/clonePhase"], ann["cdi.kubevirt.io/cloneType"]
	switch {
	case phase == "Error" && strings.Contains(ann["cdi.kubevirt.io/cloneError"], optimisticLockMessage):
		// A write that lost a race (apierrors.IsConflict): the populator
		// records every error of a reconcile as clonePhase Error
		// (populators/clone-populator.go updateClonePhaseError) and the
		// next reconcile overwrites it. Not a decision (seed 1212).
		return "", seen
	case phase == "Error" && strings.Contains(ann["cdi.kubevirt.io/cloneError"], "smaller than the source"):
		return "validation", seen
	case phase == "Error" && strings.Contains(ann["cdi.kubevirt.io/cloneError"], "volumesnapshotclass"):
		return "error: snapshot class", seen
	case phase == "Error" && strings.Contains(ann["cdi.kubevirt.io/cloneError"], "must support resize"):
		// PrepClaimPhase raising the tmp claim's request, refused by the
		// API server's resize admission on a class without expansion.
		return "error: resize forbidden", seen
	case phase == "Error":
		return "error: " + ann["cdi.kubevirt.io/cloneError"], seen
	case ct == "" || phase == "" || phase == "Pending" || !cdirules.KnownStrategy(ct):
		return "", seen
	case storageLayerPhases[phase] && ct != cdirules.StrategyCopy:
		// (A copy from a snapshot restores it in phase SnapshotClone too,
		// planHostAssistedFromSnapshot: decided by its fallback reason.)
		// A storage-layer clone is decided only once its claim is prepared
		// (PrepClaimPhase is where a resize the class refuses turns it into
		// an Error), or once a component after CDI refuses it for good.
		refused, events := refusedBelowCDI(ctx, c, dv.GetNamespace(), pvc)
		return refused, seen + "; events on its tmp objects: " + events
	case ann["cdi.kubevirt.io/cloneFallbackReason"] != "":
		return "copy/" + diffFallbacks[ann["cdi.kubevirt.io/cloneFallbackReason"]], seen
	}
	return ct, seen
}

// refusedBelowCDI reads the Warning events on the objects CDI's
// storage-layer plan makes for the claim (tmp-pvc-<uid>, tmp-snapshot-<uid>,
// in the source's namespace) for a refusal that does not pass: the
// external-provisioner's getPVCSource and getSnapshotSource (v6.4.0
// pkg/controller/controller.go) on another driver or volume mode, or a
// claim of the class no provisioner serves. Another warning is returned as
// it is, to be read as a mismatch. The external-provisioners' logs are read
// too: under load some of their events never reach the API server (seed 4,
// chunk 3: a tmp-pvc's ProvisioningFailed logged for minutes, the API
// holding only the PV controller's ExternalProvisioning event).
func refusedBelowCDI(ctx context.Context, c *cluster.Cluster, ns string, pvc *corev1.PersistentVolumeClaim) (refused, seen string) {
	srcNS := pvc.Annotations["cdi.kubevirt.io/dataSourceNamespace"]
	if srcNS == "" {
		srcNS = ns
	}
	uid := string(pvc.UID)
	for _, name := range []string{"tmp-pvc-" + uid, "tmp-snapshot-" + uid} {
		events, err := c.Client.CoreV1().Events(srcNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			seen += fmt.Sprintf("%s/%s: %v; ", srcNS, name, err)
			continue
		}
		seen += fmt.Sprintf("%s/%s: %d events; ", srcNS, name, len(events.Items))
		for _, e := range events.Items {
			if r := provisionerRefusal(e.Type, e.Reason, e.Message); r != "" {
				return r, seen
			}
		}
	}
	for _, log := range []string{"csi-provisioner", "csi-provisioner-" + otherDriver} {
		if r := provisionerLogged(c.LogPath(log), srcNS+"/tmp-pvc-"+uid); r != "" {
			return r, seen + log + "'s log: " + r
		}
	}
	return "", seen
}

// provisionerRefusal classifies an event on CDI's tmp objects ("" none).
func provisionerRefusal(kind, reason, message string) string {
	if reason == "ExternalProvisioning" && strings.Contains(message, "'"+diffNoCSIProvisioner+"'") {
		// The class's provisioner runs nowhere in the stack: the claim
		// waits for ever.
		return "stuck: driver"
	}
	if kind != corev1.EventTypeWarning {
		return ""
	}
	switch {
	case strings.Contains(message, "must have the same volume mode"),
		strings.Contains(message, "modifies the mode of the source volume"):
		return "stuck: volume mode"
	case strings.Contains(message, "claim in dataSource not bound or invalid"),
		strings.Contains(message, "is not handled by CSI driver of StorageClass"):
		return "stuck: driver"
	case reason == "ProvisioningFailed" || strings.HasPrefix(reason, "Snapshot"):
		return "stuck: " + reason + ": " + message
	}
	return ""
}

// provisionerLogged is the refusal for ever (another driver or volume
// mode) an external-provisioner logged ("Event occurred", klog) on object
// ns/name; "" none (a transient failure is not one).
func provisionerLogged(path, object string) string {
	log, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(log), "\n") {
		if !strings.Contains(line, `object="`+object+`"`) || !strings.Contains(line, "Event occurred") {
			continue
		}
		switch r := provisionerRefusal(logField(line, "type"), logField(line, "reason"), logField(line, "message")); r {
		case "stuck: " + cdirules.StuckDriver, "stuck: " + cdirules.StuckVolumeMode:
			return r
		}
	}
	return ""
}

// logField is a klog structured field's quoted value ("" absent).
func logField(line, key string) string {
	_, rest, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	v, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return ""
	}
	out, _ := strconv.Unquote(v)
	return out
}

// storageLayerPhases are the clone populator's phases before PrepClaim on
// the csi-clone and snapshot plans (pkg/controller/clone/planner.go,
// planCSIClone and planSnapshotFromPVC in CDI v1.65).
var storageLayerPhases = map[string]bool{"CSIClone": true, "Snapshot": true, "SnapshotClone": true}

// cdiLogged reports whether cdi-controller logged a reconcile error
// containing what for the DataVolume ns/name: the only trace of a sync that
// fails before CDI writes anything (shouldUseCDIPopulator on a usePopulator
// value it cannot parse).
func cdiLogged(c *cluster.Cluster, ns, name, what string) bool {
	log, err := os.ReadFile(c.LogPath("cdi-controller"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, what) && strings.Contains(line, `"`+name+`"`) && strings.Contains(line, `"`+ns+`"`) {
			return true
		}
	}
	return false
}

// expectedOutcome is what the prediction for target says CDI does, in
// decideCDI's words.
func expectedOutcome(p predict.Prediction, target predict.Target) string {
	populatorForced := target.PerDisk.UsePopulator != nil && strings.Contains(" 1 t T TRUE true True ", " "+*target.PerDisk.UsePopulator+" ")
	switch p.Reason {
	case predict.ReasonUsePopulatorInvalid:
		return "populator-error"
	case predict.ReasonPopulatorOff:
		return "legacy-copy"
	case predict.ReasonCloneTypeCopy:
		return cdirules.StrategyCopy
	case predict.ReasonCloneTypeNoExpansion:
		return "error: resize forbidden"
	case predict.ReasonCloneTypeRefused:
		if strings.Contains(p.Message, "whose "+cdirules.StuckVolumeMode+" ") {
			return "stuck: " + cdirules.StuckVolumeMode
		}
		return "stuck: " + cdirules.StuckDriver
	case predict.ReasonSnapshotClassNotFound:
		return "error: snapshot class"
	case predict.ReasonClassNotFound:
		if populatorForced {
			// The populator's claimReadyForPopulation finds no class.
			return "error: storage class " + target.Class + " not found"
		}
		// CDI finds no CSIDriver for a missing class: the legacy path, whose
		// claim never binds.
		return "legacy-copy"
	case predict.ReasonTargetTooSmall, predict.ReasonContentTypeMismatch, predict.ReasonSnapshotUnusable:
		return "validation"
	case predict.ReasonGoldenMissing:
		return "waits: source"
	case predict.ReasonSourceNamespaceUnset:
		return "error: " + cdirules.ErrEmptySourceNamespace
	case predict.ReasonClaimInvalid:
		return "render"
	case predict.ReasonUnknownStrategy:
		return "error: unknown strategy/source " + p.Strategy
	case predict.ReasonNoPopulator:
		return "legacy-copy"
	case predict.ReasonCopyStrategy, predict.ReasonDerivedCopy:
		return cdirules.StrategyCopy
	}
	switch p.Path {
	case predict.PathCSIClone:
		return cdirules.StrategyCSIClone
	case predict.PathSnapshotClone:
		return cdirules.StrategySnapshot
	case predict.PathHostAssisted:
		return "copy/" + cdiFallbackOf(p.Reason)
	}
	return "blocked/" + p.Reason
}

func cdiFallbackOf(reason string) string {
	switch reason {
	case predict.ReasonNoVolumeSnapshotClass:
		return cdirules.FallbackNoVolumeSnapshotClass
	case predict.ReasonIncompatibleProvisioners:
		return cdirules.FallbackIncompatibleProvisioners
	case predict.ReasonIncompatibleVolumeModes:
		return cdirules.FallbackIncompatibleVolumeModes
	case predict.ReasonNoVolumeExpansion:
		return cdirules.FallbackNoVolumeExpansion
	case predict.ReasonNoProvisionerMatch:
		return cdirules.FallbackNoProvisionerMatch
	}
	return reason
}

// diffGuardNamespace is where the guard, in Deny, is asked about each
// DataVolume of the catalog's golden (a dry run of the same DataVolume); the
// batch namespaces are not guarded, so CDI gets every DataVolume.
const diffGuardNamespace = "cdirules-guard"

var diffFlavor = strings.Repeat("d1", 32)

// setUpDiffGuard imports a golden of the catalog, applies the guard's
// policy with a Deny binding for diffGuardNamespace only, and returns the
// golden as a source.
func setUpDiffGuard(t *testing.T, ctx context.Context, c *cluster.Cluster) diffSource {
	t.Helper()
	name := cluster.GoldenName(diffFlavor, talosVersion)
	createGolden(t, ctx, c, cluster.Golden{SchematicID: diffFlavor, Version: talosVersion, StorageClass: "replicated"})
	waitPhase(t, ctx, c, cluster.NamespaceGolden, name, cdiv1.Succeeded)
	cache, err := os.MkdirTemp(c.Dir, "kubectl-cache-")
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"policy.yaml", "access-modes-policy.yaml"} {
		if out, err := kubectl(t, c, cache, "apply", "-f", deployDir+"/admission/warn/"+policy); err != nil {
			t.Fatalf("kubectl apply %s: %v\n%s", policy, err, out)
		}
	}
	if err := c.CreateNamespace(ctx, diffGuardNamespace); err != nil {
		t.Fatal(err)
	}
	// The guard in Deny, the access-mode warning as shipped (Warn).
	for policy, action := range map[string]string{admissionPolicy: "Deny", accessModesPolicy: "Warn"} {
		binding := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
			"metadata": map[string]any{"name": "cdirules-" + policy},
			"spec": map[string]any{"policyName": policy, "validationActions": []any{action},
				"paramRef":       map[string]any{"name": "csi-clone-sidecar-admission", "namespace": cluster.NamespaceCSI, "parameterNotFoundAction": "Deny"},
				"matchResources": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": diffGuardNamespace}}}}}}
		gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
		if _, err := c.Dynamic.Resource(gvr).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	return diffSource{name: name, mode: cdirules.Block, bytes: req.Value(), golden: true}
}

// waitGuardParams waits until the sidecar's parameters say, for the golden
// on every class, what the prediction from the live objects says (the
// parameters follow a batch's configuration).
func waitGuardParams(t *testing.T, ctx context.Context, c *cluster.Cluster, ac *admissionClient, s *predict.State, src diffSource, g predict.Golden) {
	t.Helper()
	key := g.Name
	if src.snap != nil {
		key = publish.SnapshotGoldenKey(g.Name)
	}
	want := map[string]string{}
	for _, class := range s.ClassNames() {
		r := s.Regions(g, predict.Target{Class: class, VolumeMode: cdirules.Block, AccessModes: []string{"ReadWriteOnce"}})
		want[key+".path."+class] = r.Larger.Path + "/" + r.Larger.Reason
	}
	waitParamsHold(t, ctx, c, want)
	var last string
	// The API server reads the parameters through an informer: wait until
	// its decisions on a larger disk on every class are the prediction's.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, class := range s.ClassNames() {
			a := diffArrangement{name: "probe", classSet: true, src: src,
				target: predict.Target{Class: class, Kind: cdirules.KindStorage, VolumeMode: cdirules.Block, AccessModes: []string{"ReadWriteOnce"}, Bytes: 40 << 30}}
			if refused, _, _ := askGuard(ctx, ac, diffGuardNamespace, a); refused != s.Predict(g, a.target).GuardRefuses(predict.GuardRules{}) {
				last = fmt.Sprintf("class %s: refused=%v", class, refused)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the API server never decided as the parameters say: %s", last)
	}
}

// guardRefuses asks the real kube-apiserver, with the policy in Deny, about
// the arrangement's DataVolume of namespace batch (a dry run of it in
// diffGuardNamespace, through the same DataSource), and returns its refusal
// and the warnings it gave. A refusal that is not the guard's is a test
// failure.
func guardRefuses(t *testing.T, ctx context.Context, ac *admissionClient, batch string, a diffArrangement) (bool, []string) {
	t.Helper()
	refused, warnings, err := askGuard(ctx, ac, batch, a)
	if err != nil {
		t.Fatalf("%s: %v", a.name, err)
	}
	return refused, warnings
}

func askGuard(ctx context.Context, ac *admissionClient, batch string, a diffArrangement) (refused bool, warnings []string, err error) {
	dv := diffDataVolume(a, batch, cluster.NamespaceGolden)
	dv.Namespace = diffGuardNamespace
	warnings, err = ac.createDataVolume(ctx, dv, false)
	switch {
	case err == nil:
		return false, warnings, nil
	case apierrors.IsInvalid(err) && strings.Contains(err.Error(), "csi-clone-sidecar:"):
		return true, warnings, nil
	}
	return false, warnings, fmt.Errorf("the API server refused the dry run for another reason: %w", err)
}
