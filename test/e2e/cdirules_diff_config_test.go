package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The cluster-wide inputs of CDI's rules the differential test varies, one
// configuration per chunk of arrangements: the CDI override, each class's
// StorageProfile spec.cloneStrategy, spec.claimPropertySets and
// minimumSupportedPvcSize annotation, each StorageClass's
// cdi.kubevirt.io/clone-strategy annotation, CDIConfig
// spec.filesystemOverhead (global and per class) and which
// VolumeSnapshotClasses exist. Values are dealt over chunks and classes
// from seeded shuffles (genConfigs), so a few chunks exercise every value
// (the run prints the counts).

// diffClasses are the classes a configuration sets, in a fixed order.
var diffClasses = []string{"replicated", "replicated-fixed", "replicated-b", otherClass, diffNoCSIClass}

var (
	diffOverrides          = []string{"", "csi-clone", "", "snapshot", "", "copy"}
	diffProfileStrategies  = []string{"", "csi-clone", "snapshot", "copy", "fast", "csi-clone", ""}
	diffClassStrategies    = []string{"", "copy", "snapshot", "csi-clone", "fast", ""}
	diffPropertySetLayouts = []string{"", "block-fs", "fs-block", "fs", "block", "block-rwx-fs"}
	diffMinimums           = []string{"", "10752Mi", "", "16Gi"}
	diffGlobalOverheads    = []string{"", "0.1"}
	diffClassOverheads     = []string{"", "0", "0.2"}
)

// diffPropertySets are the StorageProfile spec.claimPropertySets layouts,
// by name: the sets' volume modes, each set ReadWriteOnce but a Block set
// of an "rwx" layout, ReadWriteMany as CDI derives LINSTOR's (the test
// driver, like LINSTOR, serves ReadWriteMany for Block volumes only).
var diffPropertySets = map[string][]string{
	"block-fs":     {cdirules.Block, cdirules.Filesystem},
	"fs-block":     {cdirules.Filesystem, cdirules.Block},
	"fs":           {cdirules.Filesystem},
	"block":        {cdirules.Block},
	"block-rwx-fs": {cdirules.Block, cdirules.Filesystem},
}

// diffSetAccessMode is the access mode of a set of volume mode mode in
// the layout.
func diffSetAccessMode(layout, mode string) corev1.PersistentVolumeAccessMode {
	if strings.Contains(layout, "rwx") && mode == cdirules.Block {
		return corev1.ReadWriteMany
	}
	return corev1.ReadWriteOnce
}

// Which VolumeSnapshotClasses exist: none, one of the golden's driver, one of
// each driver. They only ever appear (none, then main, then both over a
// run's chunks): deleting one would strand the snapshots of running clones.
const (
	diffSnapshotsNone = "none"
	diffSnapshotsMain = "main"
	diffSnapshotsBoth = "both"
)

// diffConfig is one chunk's configuration; maps are by class, "" unset.
type diffConfig struct {
	override       string
	strategy       map[string]string
	annotation     map[string]string
	propertySets   map[string]string
	minimum        map[string]string
	globalOverhead string
	overhead       map[string]string
	snapshots      string
}

// genConfigs draws a run's configurations, one per chunk. Each value is
// dealt from seeded shuffles of rounds of its values over the chunks (the
// override, the global overhead) or the (chunk, class) slots, so each value
// is exercised in proportion; and in
// each chunk one class (in turn) has neither a profile strategy nor a class
// annotation, the case of most clusters, where CDI derives the strategy
// from its capabilities table and the VolumeSnapshotClasses.
func genConfigs(rng *rand.Rand, chunks int) []diffConfig {
	slots := chunks * len(diffClasses)
	// deal shuffles each round of the values: every len(vals) consecutive
	// slots hold each value.
	deal := func(vals []string, n int) []string {
		var deck []string
		for len(deck) < n {
			round := append([]string(nil), vals...)
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
			deck = append(deck, round...)
		}
		return deck
	}
	overrides, globals := deal(diffOverrides, chunks), deal(diffGlobalOverheads, chunks)
	strategy, annotation := deal(diffProfileStrategies, slots), deal(diffClassStrategies, slots)
	sets, minimum, overhead := deal(diffPropertySetLayouts, slots), deal(diffMinimums, slots), deal(diffClassOverheads, slots)
	out := make([]diffConfig, chunks)
	for i := range out {
		c := diffConfig{override: overrides[i], globalOverhead: globals[i], snapshots: diffSnapshotsNone,
			strategy: map[string]string{}, annotation: map[string]string{}, propertySets: map[string]string{},
			minimum: map[string]string{}, overhead: map[string]string{}}
		for j, class := range diffClasses {
			s := i*len(diffClasses) + j
			c.strategy[class], c.annotation[class], c.propertySets[class] = strategy[s], annotation[s], sets[s]
			c.minimum[class], c.overhead[class] = minimum[s], overhead[s]
			if j == i%len(diffClasses) {
				c.strategy[class], c.annotation[class] = "", ""
			}
		}
		switch {
		case 3*i >= 2*chunks:
			c.snapshots = diffSnapshotsBoth
		case 3*i >= chunks:
			c.snapshots = diffSnapshotsMain
		}
		out[i] = c
	}
	return out
}

// overheadOf is the filesystem overhead the configuration sets for a class
// (a class it does not name: the global one), for the generator's sizes.
func (c diffConfig) overheadOf(class string) float64 {
	v := c.overhead[class]
	if v == "" {
		v = c.globalOverhead
	}
	if v == "" {
		return cdirules.DefaultOverhead
	}
	f, _ := strconv.ParseFloat(v, 64)
	return f
}

// diffDims are the configuration's values that bear on a disk of class
// class, by dimension, for the coverage counts.
func (c diffConfig) dims(class string) map[string]string {
	or := func(v, none string) string {
		if v == "" {
			return none
		}
		return v
	}
	return map[string]string{
		"override":                   or(c.override, "none"),
		"profile spec.cloneStrategy": or(c.strategy[class], "none"),
		"class clone-strategy":       or(c.annotation[class], "none"),
		"claimPropertySets":          or(c.propertySets[class], "none"),
		"minimumSupportedPvcSize":    or(c.minimum[class], "none"),
		"overhead (global)":          or(c.globalOverhead, "default"),
		"overhead (class)":           or(c.overhead[class], "global"),
		"VolumeSnapshotClasses":      c.snapshots,
	}
}

// applyDiffConfig writes a configuration and waits until CDI's
// StorageProfiles and CDIConfig show its claimPropertySets and overheads
// (checkDiffProfiles then waits for their strategies). derived are the
// claimPropertySets' volume modes CDI derives for each class without any
// in the profile's spec (diffDerivedPropertySets).
func applyDiffConfig(t *testing.T, ctx context.Context, c *cluster.Cluster, cfg diffConfig, derived map[string][]string) {
	t.Helper()
	ensureDiffSnapshotClasses(t, ctx, c, cfg.snapshots)
	override := "null"
	if cfg.override != "" {
		override = jsonString(cfg.override)
	}
	mergePatch(t, ctx, c, cluster.CDIGVR, "cdi", `{"spec":{"cloneStrategyOverride":`+override+`}}`)
	for _, class := range diffClasses {
		mergePatch(t, ctx, c, diffClassGVR, class, `{"metadata":{"annotations":{`+
			jsonString(cdirules.AnnCloneStrategy)+`:`+jsonOrNull(cfg.annotation[class])+`}}}`)
		sets := "null"
		if layout := cfg.propertySets[class]; layout != "" {
			var out []cdiv1.ClaimPropertySet
			for _, m := range diffPropertySets[layout] {
				vm := corev1.PersistentVolumeMode(m)
				out = append(out, cdiv1.ClaimPropertySet{AccessModes: []corev1.PersistentVolumeAccessMode{diffSetAccessMode(layout, m)}, VolumeMode: &vm})
			}
			b, _ := json.Marshal(out)
			sets = string(b)
		}
		mergePatch(t, ctx, c, cluster.StorageProfileGVR, class, `{"metadata":{"annotations":{`+jsonString(cdirules.AnnMinimumSize)+`:`+
			jsonOrNull(cfg.minimum[class])+`}},"spec":{"cloneStrategy":`+jsonOrNull(cfg.strategy[class])+`,"claimPropertySets":`+sets+`}}`)
	}
	perClass := map[string]string{}
	for class, v := range cfg.overhead {
		if v != "" {
			perClass[class] = v
		}
	}
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"filesystemOverhead": map[string]any{
		"global": nullIfEmpty(cfg.globalOverhead), "storageClass": perClass}}})
	// A merge patch keeps map keys it does not name: clear the map first.
	mergePatch(t, ctx, c, cluster.CDIConfigGVR, "config", `{"spec":{"filesystemOverhead":null}}`)
	mergePatch(t, ctx, c, cluster.CDIConfigGVR, "config", string(b))
	waitDiffConfig(t, ctx, c, cfg, derived)
}

var diffClassGVR = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func jsonOrNull(s string) string {
	if s == "" {
		return "null"
	}
	return jsonString(s)
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func mergePatch(t *testing.T, ctx context.Context, c *cluster.Cluster, gvr schema.GroupVersionResource, name, patch string) {
	t.Helper()
	// An object another controller makes (CDI's StorageProfile of a new
	// class) may not exist yet: wait for it.
	var last error
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = c.Dynamic.Resource(gvr).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return !apierrors.IsNotFound(last), nil
	})
	if last != nil {
		t.Fatalf("patch %s %s with %s: %v", gvr.Resource, name, patch, last)
	}
}

// diffSnapshotClassDrivers are the VolumeSnapshotClasses of each state.
var diffSnapshotClassDrivers = map[string]map[string]string{
	diffSnapshotsNone: {},
	diffSnapshotsMain: {"cdirules-main": cluster.DefaultDriverName},
	diffSnapshotsBoth: {"cdirules-main": cluster.DefaultDriverName, "cdirules-other": otherDriver},
}

// ensureDiffSnapshotClasses creates the state's VolumeSnapshotClasses that
// do not exist yet.
func ensureDiffSnapshotClasses(t *testing.T, ctx context.Context, c *cluster.Cluster, state string) {
	t.Helper()
	for name, driver := range diffSnapshotClassDrivers[state] {
		vsc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
			"metadata": map[string]any{"name": name}, "driver": driver, "deletionPolicy": "Delete"}}
		_, err := c.Dynamic.Resource(cluster.VolumeSnapshotClassGVR).Create(ctx, vsc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// waitDiffConfig waits until CDI's config controller has the overheads in
// CDIConfig status and its StorageProfile controller the claimPropertySets
// in each profile's status.
func waitDiffConfig(t *testing.T, ctx context.Context, c *cluster.Cluster, cfg diffConfig, derived map[string][]string) {
	t.Helper()
	global := cfg.globalOverhead
	if global == "" {
		global = "0.06"
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := c.Dynamic.Resource(cluster.CDIConfigGVR).Get(ctx, "config", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		status, _, _ := unstructured.NestedStringMap(u.Object, "status", "filesystemOverhead", "storageClass")
		g, _, _ := unstructured.NestedString(u.Object, "status", "filesystemOverhead", "global")
		last = fmt.Sprintf("CDIConfig status global %q, per class %v", g, status)
		if g != global {
			return false, nil
		}
		for _, class := range diffClasses {
			want := cfg.overhead[class]
			if want == "" {
				want = global
			}
			if status[class] != want {
				return false, nil
			}
		}
		for _, class := range diffClasses {
			modes, err := profileSetModes(ctx, c, class)
			if err != nil {
				return false, err
			}
			want := diffPropertySets[cfg.propertySets[class]]
			if cfg.propertySets[class] == "" {
				want = derived[class]
			}
			if !reflect.DeepEqual(modes, want) {
				last = fmt.Sprintf("StorageProfile %s status.claimPropertySets modes %v, want %v", class, modes, want)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("CDI never showed the configuration %+v: %v; last seen: %s", cfg, err, last)
	}
}

// profileSetModes are the volume modes of a StorageProfile's
// status.claimPropertySets, in order.
func profileSetModes(ctx context.Context, c *cluster.Cluster, class string) ([]string, error) {
	sp, err := c.Dynamic.Resource(cluster.StorageProfileGVR).Get(ctx, class, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	got, _, _ := unstructured.NestedSlice(sp.Object, "status", "claimPropertySets")
	var modes []string
	for _, s := range got {
		m, _, _ := unstructured.NestedString(s.(map[string]any), "volumeMode")
		modes = append(modes, m)
	}
	return modes, nil
}

// diffDerivedPropertySets reads, before any configuration, the
// claimPropertySets CDI derives for each class from its capabilities table
// (storageprofile-controller.go reconcilePropertySets: LINSTOR's are in it).
func diffDerivedPropertySets(t *testing.T, ctx context.Context, c *cluster.Cluster) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, class := range diffClasses {
		modes, err := profileSetModes(ctx, c, class)
		if err != nil {
			t.Fatal(err)
		}
		out[class] = modes
	}
	return out
}

// checkDiffProfiles holds the model of CDI's StorageProfile controller
// (cdirules.ProfileStrategy: reconcileCloneStrategy; cdirules.SnapshotClassFor:
// GetVolumeSnapshotClass) against each profile's status, waiting up to
// diffProfileWait for CDI to reconcile. It returns the number of profiles
// the model got wrong, and for each break the number it would have.
func checkDiffProfiles(t *testing.T, ctx context.Context, c *cluster.Cluster, brk string, byBreak map[string]int) (mismatches int) {
	t.Helper()
	var in predict.Inputs
	for _, class := range diffClasses {
		var got, want diffProfile
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, diffProfileWait, true, func(ctx context.Context) (bool, error) {
			in = liveInputs(t, ctx, c)
			got = observedProfile(in, class)
			want = modelProfile(in, class, "")
			return got == want, nil
		})
		if err != nil && !wait.Interrupted(err) {
			t.Fatal(err)
		}
		for _, b := range diffBreakNames {
			if modelProfile(breakInputs(b, in), class, b) != got {
				byBreak[b]++
			}
		}
		if brk != "" {
			want = modelProfile(breakInputs(brk, in), class, brk)
		}
		if got != want {
			mismatches++
			t.Errorf("StorageProfile %s: CDI's status is %+v, the model says %+v", class, got, want)
		}
	}
	return mismatches
}

// diffProfileWait bounds the wait for CDI to reconcile a profile as the
// model says; past it, the model is wrong.
const diffProfileWait = 30 * time.Second

// diffProfile is what CDI's StorageProfile controller decides for a class.
type diffProfile struct {
	strategy      string
	hasStrategy   bool
	snapshotClass string
}

func observedProfile(in predict.Inputs, class string) diffProfile {
	var p diffProfile
	for _, sp := range in.Profiles {
		if sp.Name != class {
			continue
		}
		if sp.Status.CloneStrategy != nil {
			p.strategy, p.hasStrategy = string(*sp.Status.CloneStrategy), true
		}
		if sp.Status.SnapshotClass != nil {
			p.snapshotClass = *sp.Status.SnapshotClass
		}
	}
	return p
}

// modelProfile is what the model says CDI's StorageProfile controller
// writes for class (the test driver and the other one are not in CDI's
// capabilities table: nothing is advised). Break derivedcopy hides the
// VolumeSnapshotClasses from reconcileCloneStrategy.
func modelProfile(in predict.Inputs, class, brk string) diffProfile {
	var sc = classByName(in, class)
	var sp *cdiv1.StorageProfile
	for _, p := range in.Profiles {
		if p.Name == class {
			sp = p
		}
	}
	if sc == nil || sp == nil {
		return diffProfile{}
	}
	var named string
	if sp.Spec.SnapshotClass != nil {
		named = *sp.Spec.SnapshotClass
	}
	snap, found, _ := cdirules.SnapshotClassFor(in.SnapshotClasses, sc.Provisioner, named)
	if !found {
		snap = ""
	}
	var spec *string
	if sp.Spec.CloneStrategy != nil {
		s := string(*sp.Spec.CloneStrategy)
		spec = &s
	}
	return diffProfile{strategy: cdirules.ProfileStrategy(sc, spec, "", found && brk != "derivedcopy"), hasStrategy: true, snapshotClass: snap}
}

func classByName(in predict.Inputs, name string) *storagev1.StorageClass {
	for _, sc := range in.Classes {
		if sc.Name == name {
			return sc
		}
	}
	return nil
}

// diffBreaks are the deliberate perturbations of the model's inputs
// (CDIRULES_BREAK), one per family of CDI's rules; a run counts, for each,
// the arrangements it would have got wrong, which shows the test sees that
// family. The set is closed: an unknown name fails the test.
var diffBreaks = map[string]func(*predict.Inputs){
	// Claim rendering: CDIConfig's filesystem overhead is 0.
	"overhead": func(in *predict.Inputs) {
		for _, cfg := range in.CDIConfigs {
			cfg.Status.FilesystemOverhead = &cdiv1.FilesystemOverhead{Global: "0"}
		}
	},
	// Claim rendering and validation: no minimum supported size.
	"minsize": func(in *predict.Inputs) {
		for _, sp := range in.Profiles {
			delete(sp.Annotations, cdirules.AnnMinimumSize)
		}
	},
	// Volume mode from the profile: each claimPropertySet's mode swapped.
	"volumemode": func(in *predict.Inputs) {
		for _, sp := range in.Profiles {
			for i, s := range sp.Status.ClaimPropertySets {
				if s.VolumeMode == nil {
					continue
				}
				m := corev1.PersistentVolumeBlock
				if *s.VolumeMode == m {
					m = corev1.PersistentVolumeFilesystem
				}
				sp.Status.ClaimPropertySets[i].VolumeMode = &m
			}
		}
	},
	// Access modes from the profile: every claimPropertySet ReadWriteOnce
	// (CDI derives ReadWriteMany first for LINSTOR's Block volumes).
	"accessmodes": func(in *predict.Inputs) {
		for _, sp := range in.Profiles {
			for i := range sp.Status.ClaimPropertySets {
				sp.Status.ClaimPropertySets[i].AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
			}
		}
	},
	// The planner's snapshot class: none exists.
	"snapshotclass": func(in *predict.Inputs) { in.SnapshotClasses = nil },
	// The planner's strategy: the profiles' status.cloneStrategy unread.
	"strategy": func(in *predict.Inputs) {
		for _, sp := range in.Profiles {
			sp.Status.CloneStrategy = nil
		}
	},
	// The planner's strategy: the CDI override unread.
	"override": func(in *predict.Inputs) {
		for _, cr := range in.CDIs {
			cr.Spec.CloneStrategyOverride = nil
		}
	},
	// The planner's fallbacks: every class allows volume expansion.
	"expansion": func(in *predict.Inputs) {
		yes := true
		for _, sc := range in.Classes {
			sc.AllowVolumeExpansion = &yes
		}
	},
	// The StorageProfile controller's derived strategy ignores the
	// VolumeSnapshotClasses (modelProfile).
	"derivedcopy": func(*predict.Inputs) {},
}

// diffDiskBreaks are the deliberate perturbations of one disk's own
// inputs, one per per-disk rule (cdirules.PerDisk, the golden's recorded
// image size).
var diffDiskBreaks = map[string]func(*predict.Golden, *predict.Target){
	// The clone populator's obeyed cloneType (getCloneStrategy): unread.
	"clonetype": func(_ *predict.Golden, t *predict.Target) { t.PerDisk.CloneType = nil },
	// shouldUseCDIPopulator's annotation: unread.
	"usepopulator": func(_ *predict.Golden, t *predict.Target) { t.PerDisk.UsePopulator = nil },
	// validateSourcePVC's permissiveClone: unread.
	"permissive": func(_ *predict.Golden, t *predict.Target) { t.PerDisk.Permissive = false },
	// detectCloneSize's recorded image size: unread (taken to fill the
	// golden).
	"imagesize": func(g *predict.Golden, _ *predict.Target) { g.VirtualSize = 0 },
	// A golden VolumeSnapshot (cdirules.CloneFromSnapshotWithClaim), one
	// break per rule: validateSnapshotClone's and detectCloneSize's restore
	// size (doubled), ValidateSnapshotCloneProvisioners' content driver
	// (swapped), SameVolumeMode's content source volume mode (unread),
	// IsSnapshotValidForClone's class name (taken as set),
	// validateCloneAndSourceSnapshot's missing snapshot (taken as there).
	"restoresize": breakSnapshot(func(s *cdirules.Snapshot) { s.RestoreBytes *= 2 }),
	"snapshotdriver": breakSnapshot(func(s *cdirules.Snapshot) {
		s.Driver = map[bool]string{true: otherDriver, false: cluster.DefaultDriverName}[s.Driver != otherDriver]
	}),
	"sourcemode": breakSnapshot(func(s *cdirules.Snapshot) { s.SourceVolumeMode = "" }),
	"snapshotclassname": breakSnapshot(func(s *cdirules.Snapshot) {
		if s.SnapshotClass == "" {
			s.SnapshotClass = "cdirules-main"
		}
	}),
	"snapshotexists": breakSnapshot(func(s *cdirules.Snapshot) { s.Exists = true }),
	// populateSourceIfSourceRef's empty source namespace, read as the
	// DataSource's (viaGolden).
	"datasourcenamespace": func(*predict.Golden, *predict.Target) {},
}

// breakSnapshot applies f to a copy of a golden VolumeSnapshot (the
// truth's stays as read).
func breakSnapshot(f func(*cdirules.Snapshot)) func(*predict.Golden, *predict.Target) {
	return func(g *predict.Golden, _ *predict.Target) {
		if g.Snapshot == nil {
			return
		}
		s := *g.Snapshot
		f(&s)
		g.Snapshot = &s
	}
}

// breakDisk is the golden and target with disk break b applied.
func breakDisk(b string, g predict.Golden, t predict.Target) (predict.Golden, predict.Target) {
	if f := diffDiskBreaks[b]; f != nil {
		f(&g, &t)
	}
	return g, t
}

// diffBreakNames lists diffBreaks and diffDiskBreaks sorted.
var diffBreakNames = func() []string {
	var out []string
	for b := range diffBreaks {
		out = append(out, b)
	}
	for b := range diffDiskBreaks {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}()

// diffBreak reads CDIRULES_BREAK: "" or a name of diffBreaks.
func diffBreak(t *testing.T, v string) string {
	t.Helper()
	_, inputs := diffBreaks[v]
	if _, disk := diffDiskBreaks[v]; v != "" && !inputs && !disk {
		t.Fatalf("CDIRULES_BREAK=%q is not a break; one of %s", v, strings.Join(diffBreakNames, ", "))
	}
	return v
}

// breakInputs is a deep copy of in with break b applied ("" none).
func breakInputs(b string, in predict.Inputs) predict.Inputs {
	out := in
	out.Classes, out.Profiles, out.CDIs, out.CDIConfigs = nil, nil, nil, nil
	for _, x := range in.Classes {
		out.Classes = append(out.Classes, x.DeepCopy())
	}
	for _, x := range in.Profiles {
		out.Profiles = append(out.Profiles, x.DeepCopy())
	}
	for _, x := range in.CDIs {
		out.CDIs = append(out.CDIs, x.DeepCopy())
	}
	for _, x := range in.CDIConfigs {
		out.CDIConfigs = append(out.CDIConfigs, x.DeepCopy())
	}
	out.SnapshotClasses = append([]predict.SnapshotClass(nil), in.SnapshotClasses...)
	if f := diffBreaks[b]; f != nil {
		f(&out)
	}
	return out
}

// diffCoverage counts, per dimension, how many arrangements each value
// bore on.
type diffCoverage map[string]map[string]int

func (c diffCoverage) add(dims map[string]string) {
	for d, v := range dims {
		if c[d] == nil {
			c[d] = map[string]int{}
		}
		c[d][v]++
	}
}

func (c diffCoverage) String() string {
	var dims []string
	for d := range c {
		dims = append(dims, d)
	}
	sort.Strings(dims)
	var b strings.Builder
	for _, d := range dims {
		var vals []string
		for v := range c[d] {
			vals = append(vals, v)
		}
		sort.Strings(vals)
		fmt.Fprintf(&b, "\n  %s:", d)
		for _, v := range vals {
			fmt.Fprintf(&b, " %s=%d", v, c[d][v])
		}
	}
	return b.String()
}
