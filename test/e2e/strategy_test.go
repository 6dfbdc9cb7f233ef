package e2e

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// TestSnapshotStrategy clones a worker disk with the StorageProfile's
// snapshot strategy: CreateSnapshot of the golden's volume, CreateVolume from
// that snapshot, then the expand to the pool's diskSize.
func TestSnapshotStrategy(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{CloneStrategy: cluster.StrategySnapshot})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	golden := cluster.GoldenName(goodSchematic, talosVersion)
	if _, err := c.CreateGolden(ctx, cluster.Golden{SchematicID: goodSchematic, Version: talosVersion, StorageClass: "replicated"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, golden, cdiv1.Succeeded, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	_, goldenPV, err := c.WaitPVCBound(ctx, cluster.NamespaceGolden, golden, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespace(ctx, tenantNS); err != nil {
		t.Fatal(err)
	}
	w := cluster.Worker{Namespace: tenantNS, Name: "md0-disk-a", Golden: golden, Pool: poolClone, StorageClass: "replicated", Size: diskSize}
	if _, err := c.CreateWorkerDisk(ctx, w); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitDataVolumePhase(ctx, tenantNS, w.Name, cdiv1.Succeeded, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	pvc, pv, err := c.WaitPVCBound(ctx, tenantNS, w.Name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := pvc.Annotations["cdi.kubevirt.io/cloneType"]; got != cluster.StrategySnapshot {
		t.Errorf("cloneType %q, want snapshot", got)
	}
	obs, err := c.Observations()
	if err != nil {
		t.Fatal(err)
	}
	snap, ok := findCall(obs, sidecar.MethodCreateSnapshot, func(o sidecar.Observation) bool {
		return o.Request.SourceVolumeID == goldenPV.Spec.CSI.VolumeHandle
	})
	if !ok {
		t.Fatalf("no successful CreateSnapshot of the golden's volume %s observed", goldenPV.Spec.CSI.VolumeHandle)
	}
	handle := pv.Spec.CSI.VolumeHandle
	create, ok := findCall(obs, sidecar.MethodCreateVolume, func(o sidecar.Observation) bool { return o.Response.VolumeID == handle })
	if !ok {
		t.Fatalf("no successful CreateVolume of %s observed", handle)
	}
	if create.Request.SourceSnapshotID != snap.Response.SnapshotID {
		t.Errorf("volume %s restored from snapshot %q, want the golden's snapshot %q", handle, create.Request.SourceSnapshotID, snap.Response.SnapshotID)
	}
	want := resource.MustParse(diskSize)
	if _, ok := findCall(obs, sidecar.MethodControllerExpandVolume, func(o sidecar.Observation) bool {
		return o.Request.VolumeID == handle && o.Request.RequiredBytes == want.Value()
	}); !ok {
		t.Errorf("no successful ControllerExpandVolume of %s to %s observed", handle, diskSize)
	}
	if err := holdsImage(c.VolumeFile(handle), c.Factory.Image(goodSchematic, talosVersion)); err != nil {
		t.Error(err)
	}
}
