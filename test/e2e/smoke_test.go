// Package e2e runs the csi-clone-sidecar against a real loopback storage stack
// (test/cluster): real kube-apiserver, controllers, kubernetes-csi sidecars and
// cdi-controller, in a private network namespace.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// Flavors of the smoke test: one that imports, one whose Factory URL 404s,
// one whose declared checksum does not match what the Factory serves.
var (
	goodSchematic  = strings.Repeat("ab", 32)
	badSchematic   = strings.Repeat("cd", 32)
	wrongSumSchema = strings.Repeat("ef", 32) // served, but its checksum is wrong
)

const (
	talosVersion = "v1.13.2"
	tenantNS     = "tenant-smoke"
	poolClone    = "kubernetes-wimg-md0" // on the golden's class: csi-clone
	poolCopy     = "kubernetes-wimg-md1" // class without expansion: host-assisted copy
	diskSize     = "20Gi"
)

// TestSmoke imports one golden, clones three worker disks from it by CSI
// clone (then expand) and one by host-assisted copy, and watches a golden
// whose Factory URL fails keep retrying, and one whose checksum is wrong fail.
// It checks the storage layer's record (the sidecar's tap) against what
// Kubernetes shows.
func TestSmoke(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	c.Factory.Fail(badSchematic, talosVersion, 404)
	golden := cluster.GoldenName(goodSchematic, talosVersion)
	for _, g := range []cluster.Golden{
		{SchematicID: goodSchematic},
		{SchematicID: badSchematic},
		{SchematicID: wrongSumSchema, Checksum: c.Factory.Checksum(goodSchematic, talosVersion)},
	} {
		g.Version, g.StorageClass = talosVersion, "replicated"
		if _, err := c.CreateGolden(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, golden, cdiv1.Succeeded, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	_, goldenPV, err := c.WaitPVCBound(ctx, cluster.NamespaceGolden, golden, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	goldenHandle := goldenPV.Spec.CSI.VolumeHandle

	if err := c.CreateNamespace(ctx, tenantNS); err != nil {
		t.Fatal(err)
	}
	workers := map[string]string{ // DataVolume name -> pool
		"md0-disk-a": poolClone, "md0-disk-b": poolClone, "md0-disk-c": poolClone,
		"md1-disk-a": poolCopy,
	}
	for name, pool := range workers {
		class := "replicated"
		if pool == poolCopy {
			class = "replicated-fixed"
		}
		w := cluster.Worker{Namespace: tenantNS, Name: name, Golden: golden, Pool: pool, StorageClass: class, Size: diskSize}
		if _, err := c.CreateWorkerDisk(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	for name := range workers {
		if _, err := c.WaitDataVolumePhase(ctx, tenantNS, name, cdiv1.Succeeded, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	obs, err := c.Observations()
	if err != nil {
		t.Fatal(err)
	}
	for name, pool := range workers {
		checkSmokeDisk(t, ctx, c, obs, name, pool, goldenHandle)
	}
	if n := c.Factory.Fetches(goodSchematic, talosVersion); n != 1 {
		t.Errorf("golden image fetched %d times from the Factory, want 1", n)
	}

	checkFailingGoldens(t, ctx, c)
}

// checkSmokeDisk: a disk of the clone pool holds the image at its size, was
// created from the golden's volume and then expanded, as CDI recorded; a
// disk of the copy pool was created blank and copied.
func checkSmokeDisk(t *testing.T, ctx context.Context, c *cluster.Cluster, obs []sidecar.Observation, name, pool, goldenHandle string) {
	t.Helper()
	want := resource.MustParse(diskSize)
	pvc, pv, err := c.WaitPVCBound(ctx, tenantNS, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := pvc.Status.Capacity[corev1.ResourceStorage]; got.Cmp(want) != 0 {
		t.Errorf("%s: bound at %s, want %s", name, got.String(), diskSize)
	}
	handle := pv.Spec.CSI.VolumeHandle
	if err := holdsImage(c.VolumeFile(handle), c.Factory.Image(goodSchematic, talosVersion)); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	create, ok := findCall(obs, sidecar.MethodCreateVolume, func(o sidecar.Observation) bool { return o.Response.VolumeID == handle })
	if !ok {
		t.Errorf("%s: no successful CreateVolume of its volume %s observed", name, handle)
		return
	}
	cloneType := pvc.Annotations["cdi.kubevirt.io/cloneType"]
	if pool == poolCopy {
		if cloneType != "copy" {
			t.Errorf("%s: cloneType %q, want copy (host-assisted)", name, cloneType)
		}
		if create.Request.SourceVolumeID != "" || create.Request.SourceSnapshotID != "" {
			t.Errorf("%s: copied disk's volume was created from %q/%q, want blank", name, create.Request.SourceVolumeID, create.Request.SourceSnapshotID)
		}
		return
	}
	if cloneType != cluster.StrategyCSIClone {
		t.Errorf("%s: cloneType %q, want csi-clone", name, cloneType)
	}
	if create.Request.SourceVolumeID != goldenHandle {
		t.Errorf("%s: volume %s created from %q, want the golden's volume %s", name, handle, create.Request.SourceVolumeID, goldenHandle)
	}
	if _, ok := findCall(obs, sidecar.MethodControllerExpandVolume, func(o sidecar.Observation) bool {
		return o.Request.VolumeID == handle && o.Request.RequiredBytes == want.Value()
	}); !ok {
		t.Errorf("%s: no successful ControllerExpandVolume of %s to %s observed", name, handle, diskSize)
	}
}

// checkFailingGoldens: a golden whose Factory answers 404 is retried, never
// Succeeded; one whose checksum is wrong is Failed.
func checkFailingGoldens(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	// CDI retries a connection error for ever (only a checksum mismatch is
	// fatal). A restarted importer is Running again with an empty message
	// until its next 404, so wait for a retry that shows the 404.
	bad := cluster.GoldenName(badSchematic, talosVersion)
	_, err := c.WaitDataVolume(ctx, cluster.NamespaceGolden, bad, time.Minute, func(dv *cdiv1.DataVolume) (bool, error) {
		if dv.Status.Phase == cdiv1.Succeeded {
			return false, fmt.Errorf("failing golden %s is Succeeded", bad)
		}
		return dv.Status.RestartCount >= 1 && strings.Contains(runningMessage(dv), "404"), nil
	})
	if err != nil {
		t.Fatalf("failing golden: %v", err)
	}
	wrong := cluster.GoldenName(wrongSumSchema, talosVersion)
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, wrong, cdiv1.Failed, time.Minute); err != nil {
		t.Error(err)
	}
}

// findCall returns the first successful call of method that match accepts.
func findCall(obs []sidecar.Observation, method string, match func(sidecar.Observation) bool) (sidecar.Observation, bool) {
	for _, o := range obs {
		if o.Method == method && o.Code == 0 && match(o) {
			return o, true
		}
	}
	return sidecar.Observation{}, false
}

// holdsImage checks a volume's data starts with the golden's image bytes:
// they reached it by CSI clone in the driver or by the host-assisted copy.
func holdsImage(path string, image []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	got := make([]byte, len(image))
	if _, err := io.ReadFull(f, got); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if !bytes.Equal(got, image) {
		return fmt.Errorf("volume data %s does not start with the golden's image", path)
	}
	return nil
}

func runningMessage(dv *cdiv1.DataVolume) string {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeRunning {
			return c.Message
		}
	}
	return ""
}

// checkNoLeaks fails t if, once the test's cluster is torn down, anything it
// started is still there. Call it before cluster.Start: cleanups run last
// registered first, so this one runs after the teardown.
func checkNoLeaks(t *testing.T) {
	before, err := cluster.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		after, err := cluster.Snapshot()
		if err != nil {
			t.Error(err)
			return
		}
		if err := before.Leaked(after); err != nil {
			t.Error(err)
		}
	})
}
