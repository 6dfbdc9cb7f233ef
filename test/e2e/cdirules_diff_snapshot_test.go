package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// Snapshot sources of the CDI differential: in a chunk whose configuration
// has VolumeSnapshotClasses, arrangements also clone VolumeSnapshots
// (spec.source.snapshot), which CDI v1.65 judges by other rules than a
// claim (cdirules.CloneFromSnapshotWithClaim): snapshots of a Block and a
// Filesystem claim (their contents record the source's volume mode), a
// pre-provisioned content that records none (read as Filesystem), one whose
// VolumeSnapshot names no VolumeSnapshotClass, a snapshot of the other
// test driver's volume (a content of another driver than the pool's class),
// and a snapshot that does not exist. In every other chunk the Block
// snapshot's content allows a volume mode change
// (snapshot.storage.kubernetes.io/allow-volume-mode-change).

// diffSnap makes a diffSource a VolumeSnapshot of the chunk's namespace.
type diffSnap struct {
	// of is the claim it snapshots, class its VolumeSnapshotClass (dynamic
	// snapshots).
	of, class string
	// static: a pre-provisioned content of staticOf's snapshot handle, of
	// its driver, recording no source volume mode; unnamedClass: its
	// VolumeSnapshot names no VolumeSnapshotClass.
	static       bool
	staticOf     string
	unnamedClass bool
	// missing: no such VolumeSnapshot is made.
	missing bool
}

// diffSnapshotSources are a chunk's snapshot sources under its
// VolumeSnapshotClasses state.
func diffSnapshotSources(state string) []diffSource {
	if state == diffSnapshotsNone {
		return nil
	}
	// bytes: each is of a 10Gi claim, its restore size (the sizes the
	// arrangements draw are around it).
	const bytes = 10 << 30
	out := []diffSource{
		{name: "snap-block", mode: cdirules.Block, bytes: bytes, snap: &diffSnap{of: "src-block-pvc", class: "cdirules-main"}},
		{name: "snap-fs", mode: cdirules.Filesystem, bytes: bytes, snap: &diffSnap{of: "src-fs-pvc", class: "cdirules-main"}},
		{name: "snap-unrecorded", mode: cdirules.Filesystem, bytes: bytes, snap: &diffSnap{static: true, staticOf: "snap-block", class: "cdirules-main"}},
		{name: "snap-unnamed", mode: cdirules.Block, bytes: bytes, snap: &diffSnap{static: true, staticOf: "snap-fs", unnamedClass: true}},
		{name: "snap-missing", mode: cdirules.Block, bytes: bytes, snap: &diffSnap{missing: true}},
	}
	if state == diffSnapshotsBoth {
		out = append(out, diffSource{name: "snap-other", mode: cdirules.Block, bytes: bytes, snap: &diffSnap{of: "src-other", class: "cdirules-other"}})
	}
	return out
}

// weightedSnapshotSources lists the snapshots an arrangement draws from:
// the ones of a claim (the common case, where the restore size, the
// content's driver and volume mode decide) twice.
func weightedSnapshotSources(snaps []diffSource) []diffSource {
	out := append([]diffSource(nil), snaps...)
	for _, s := range snaps {
		if s.snap.of != "" {
			out = append(out, s)
		}
	}
	return out
}

// createDiffSnapshots makes the chunk's snapshot sources (the other
// driver's claim first), waits until each is ready, and returns them with
// the golden each is read as.
func createDiffSnapshots(t *testing.T, ctx context.Context, c *cluster.Cluster, ns string, chunk int, state string) ([]diffSource, map[string]predict.Golden) {
	t.Helper()
	snaps := diffSnapshotSources(state)
	if state == diffSnapshotsBoth {
		createDiffSource(t, ctx, c, ns, diffSource{name: "src-other", mode: cdirules.Block, bytes: 10 << 30, class: otherClass})
	}
	handles := map[string]string{}
	for _, pass := range []bool{false, true} { // dynamic ones first: the static ones reuse their handles
		for _, s := range snaps {
			if s.snap.missing || s.snap.static != pass {
				continue
			}
			createDiffSnapshot(t, ctx, c, ns, s, handles)
			content := waitDiffSnapshotReady(t, ctx, c, ns, s.name)
			handles[s.name] = content
			if s.name == "snap-block" && chunk%2 == 1 {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, fleet.AnnAllowVolumeModeChange)
				if _, err := c.Dynamic.Resource(volumeSnapshotContentGVR).Patch(ctx, content, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	goldens := map[string]predict.Golden{}
	for _, s := range snaps {
		snap, err := readDiffSnapshot(ctx, c, ns, s.name)
		if err != nil {
			t.Fatal(err)
		}
		goldens[s.name] = predict.Golden{Namespace: ns, Name: s.name, Class: "replicated", Phase: "Succeeded", Driver: snap.Driver,
			VolumeMode: snap.SourceVolumeMode, CapacityBytes: snap.RestoreBytes, RequestedBytes: snap.RestoreBytes, Snapshot: &snap}
	}
	return snaps, goldens
}

var volumeSnapshotContentGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}

// createDiffSnapshot makes one VolumeSnapshot: of a claim, or bound to a
// pre-provisioned content of a dynamic one's handle (Retain: deleting it
// leaves the driver's snapshot to the dynamic one).
func createDiffSnapshot(t *testing.T, ctx context.Context, c *cluster.Cluster, ns string, s diffSource, contents map[string]string) {
	t.Helper()
	spec := map[string]any{"source": map[string]any{"persistentVolumeClaimName": s.snap.of}}
	if !s.snap.unnamedClass {
		spec["volumeSnapshotClassName"] = s.snap.class
	}
	if s.snap.static {
		dynamic, err := c.Dynamic.Resource(volumeSnapshotContentGVR).Get(ctx, contents[s.snap.staticOf], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		handle, _, _ := unstructured.NestedString(dynamic.Object, "status", "snapshotHandle")
		driver, _, _ := unstructured.NestedString(dynamic.Object, "spec", "driver")
		name := ns + "-" + s.name
		content := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{"deletionPolicy": "Retain", "driver": driver, "source": map[string]any{"snapshotHandle": handle},
				"volumeSnapshotRef": map[string]any{"name": s.name, "namespace": ns}}}}
		if !s.snap.unnamedClass {
			content.Object["spec"].(map[string]any)["volumeSnapshotClassName"] = s.snap.class
		}
		if _, err := c.Dynamic.Resource(volumeSnapshotContentGVR).Create(ctx, content, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		spec["source"] = map[string]any{"volumeSnapshotContentName": name}
	}
	vs := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": s.name, "namespace": ns}, "spec": spec}}
	if _, err := c.Dynamic.Resource(cluster.VolumeSnapshotGVR).Namespace(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitDiffSnapshotReady waits until a VolumeSnapshot is ready to use and
// returns its content's name.
func waitDiffSnapshotReady(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name string) string {
	t.Helper()
	var content, last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		vs, err := c.Dynamic.Resource(cluster.VolumeSnapshotGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(vs.Object, "status", "readyToUse")
		content, _, _ = unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
		last = fmt.Sprint(vs.Object["status"])
		return ready && content != "", nil
	})
	if err != nil {
		t.Fatalf("%s/%s never became ready: %v; status %s", ns, name, err, last)
	}
	return content
}

// readDiffSnapshot reads a VolumeSnapshot and its bound content from the
// API as the sidecar reads a golden one (fleet.ReadSnapshot), so the
// differential holds the sidecar's reading against CDI's; a missing one
// is cdirules.Snapshot{}.
func readDiffSnapshot(ctx context.Context, c *cluster.Cluster, ns, name string) (cdirules.Snapshot, error) {
	vs, err := c.Dynamic.Resource(cluster.VolumeSnapshotGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fleet.ReadSnapshot(nil, nil)
	}
	if err != nil {
		return cdirules.Snapshot{}, err
	}
	var contentErr error
	s, err := fleet.ReadSnapshot(vs, func(name string) (*unstructured.Unstructured, bool) {
		content, err := c.Dynamic.Resource(volumeSnapshotContentGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			contentErr = err
		}
		return content, err == nil
	})
	if err == nil {
		err = contentErr
	}
	return s, err
}

// snapshotShaped makes half the arrangements of a snapshot source a pool's
// disk restored from it (poolShaped, no per-disk annotation: mostly a
// storage-layer restore, which the guard's invariant needs a third of the
// arrangements to be), and gives others the annotation
// cdi.kubevirt.io/cloneType: snapshot one time in four, where the
// external-provisioner's own checks (another driver, another volume mode
// unless the content allows it) and PrepClaim's resize decide.
func snapshotShaped(rng *rand.Rand, a *diffArrangement) {
	if a.src.snap == nil {
		return
	}
	if rng.IntN(2) == 0 {
		poolShaped(rng, a)
		a.target.PerDisk = cdirules.PerDisk{}
		a.shape = "snapshot restore"
		return
	}
	if a.target.PerDisk.CloneType == nil && rng.IntN(4) == 0 {
		snapshot := cdirules.StrategySnapshot
		a.target.PerDisk.CloneType = &snapshot
	}
}

// diffGoldenSnapshot is the name of a chunk's VolumeSnapshot of the
// catalog's golden, in the golden namespace: a snapshot golden, whose
// restores the guard judges (its keys are publish.SnapshotGoldenKey's).
func diffGoldenSnapshot(batch string) string { return "golden-snap-" + batch }

// createDiffGoldenSnapshot snapshots the catalog's golden claim in the
// golden namespace, as an operator publishes a golden VolumeSnapshot, waits
// until it is ready, and returns it as a source with the golden the sidecar
// reads it as (fleet.ReadSnapshot; its class is the claim's it was cut
// from, the catalog golden's).
func createDiffGoldenSnapshot(t *testing.T, ctx context.Context, c *cluster.Cluster, batch string, golden diffSource) (diffSource, predict.Golden) {
	t.Helper()
	s := diffSource{name: diffGoldenSnapshot(batch), mode: golden.mode, bytes: golden.bytes, golden: true,
		snap: &diffSnap{of: golden.name, class: "cdirules-main"}}
	createDiffSnapshot(t, ctx, c, cluster.NamespaceGolden, s, nil)
	waitDiffSnapshotReady(t, ctx, c, cluster.NamespaceGolden, s.name)
	snap, err := readDiffSnapshot(ctx, c, cluster.NamespaceGolden, s.name)
	if err != nil {
		t.Fatal(err)
	}
	return s, predict.Golden{Namespace: cluster.NamespaceGolden, Name: s.name, Class: "replicated", Phase: "Succeeded", Driver: snap.Driver,
		VolumeMode: snap.SourceVolumeMode, CapacityBytes: snap.RestoreBytes, RequestedBytes: snap.RestoreBytes, Snapshot: &snap}
}

// deleteDiffGoldenSnapshot deletes a chunk's golden VolumeSnapshot, if it
// made one.
func deleteDiffGoldenSnapshot(t *testing.T, ctx context.Context, c *cluster.Cluster, batch string) {
	t.Helper()
	err := c.Dynamic.Resource(cluster.VolumeSnapshotGVR).Namespace(cluster.NamespaceGolden).Delete(ctx, diffGoldenSnapshot(batch), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
