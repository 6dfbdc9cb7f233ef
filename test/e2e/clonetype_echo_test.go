package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// TestCDIsOwnCloneTypeIsNoPerDiskInput: cdi-controller v1.65 writes its
// decisions onto a DataVolume with the keys a user sets to force them: the
// strategy it chose as cdi.kubevirt.io/cloneType, and
// cdi.kubevirt.io/storage.usePopulator. The DataVolume reader (cloner/fleet
// cache.go isCDIsOwn) tells the two apart by the managedFields the real
// apiserver records: CDI's own are dropped, so a disk read after CDI chose
// is predicted as one read before; a user's are kept. Checked on the
// objects CDI leaves behind.
func TestCDIsOwnCloneTypeIsNoPerDiskInput(t *testing.T) {
	c := verdictCluster(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	goldenAndTenant(t, ctx, c)
	disks := map[string]map[string]string{
		"echo-plain":     nil,
		"echo-annotated": {cdirules.AnnCloneType: cdirules.StrategyCSIClone},
	}
	for name, ann := range disks {
		if _, err := c.CreateWorkerDisk(ctx, cluster.Worker{Namespace: verdictTenant, Name: name, Pool: "kubernetes-echo",
			Golden: cluster.GoldenName(flavorA, talosVersion), StorageClass: "replicated", Size: "20Gi", Annotations: ann}); err != nil {
			t.Fatal(err)
		}
	}
	for name, ann := range disks {
		waitPhase(t, ctx, c, verdictTenant, name, cdiv1.Succeeded)
		u, err := c.Dynamic.Resource(fleet.DataVolumeGVR).Namespace(verdictTenant).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live, ok := u.GetAnnotations()[cdirules.AnnCloneType]
		if !ok || live != cdirules.StrategyCSIClone {
			t.Fatalf("%s: CDI left cloneType %q on the DataVolume, want %q (the premise of this rule)", name, live, cdirules.StrategyCSIClone)
		}
		if _, ok := u.GetAnnotations()[cdirules.AnnUsePopulator]; !ok {
			t.Fatalf("%s: CDI left no usePopulator on the DataVolume (the premise of this rule)", name)
		}
		read := fleet.ReadDataVolume(u).Annotations
		for _, key := range []string{cdirules.AnnCloneType, cdirules.AnnUsePopulator} {
			_, userSet := ann[key]
			if _, kept := read[key]; kept != userSet {
				t.Errorf("%s: %s kept as a per-disk input %v, want %v; managedFields:\n%v", name, key, kept, userSet, u.GetManagedFields())
			}
		}
	}
}
