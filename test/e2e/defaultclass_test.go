package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// TestEmptyClassFallsBackToTheKubernetesDefault: with no virtualization
// default class, a worker disk with no class is resolved to the Kubernetes
// default (here the golden's class), so it is a csi-clone without a class
// mismatch; the other class of the driver is not picked.
func TestEmptyClassFallsBackToTheKubernetesDefault(t *testing.T) {
	c := verdictCluster(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{
			{Name: "replicated", Default: true}, // the golden's class, the Kubernetes default
			{Name: "replicated-b", Pool: "b"},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	goldenAndTenant(t, ctx, c)
	w := workerCase{"empty-k8s", "kubernetes-empty", flavorA, "", "20Gi", record.VerdictCSIClone, nil}
	createWorker(t, ctx, c, w)
	rec := waitVerdict(t, ctx, c, verdictTenant, w.name, w.verdict, 3*time.Minute)
	if rec.Class != "replicated" || rec.GoldenClass != "replicated" {
		t.Errorf("classes resolved to %q (disk) and %q (golden), want the Kubernetes default replicated for both", rec.Class, rec.GoldenClass)
	}
	assertReasons(t, w.name, rec, nil)
	assertWarnings(t, ctx, c, w.name, nil)
}
