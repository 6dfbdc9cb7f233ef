// Package pools is the scenario of `make demo`: its one golden flavor, its
// StorageClasses and its worker pools, each taking another path from the
// golden. test/demo plays it and prints what happened; test/e2e plays the
// same pools and asserts on them (the prediction made before each pool's
// first disk, 0 wrong), so the demo and its proof cannot drift apart.
package pools

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The one flavor of the demo: the Image Factory's schematic of a Talos image
// without extensions, and a Talos version of the shape the platform uses.
const (
	SchematicID  = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	TalosVersion = "v1.13.2"
	GoldenClass  = "replicated"
	GoldenSize   = "6Gi"
)

// Volumes are sparse files of the test driver, so the platform's real sizes
// (6Gi golden, 20Gi workers) cost no time or disk.

// Pool is one worker pool of the demo: its disks and what it exercises.
type Pool struct {
	Namespace, Name string
	Disks           int
	Class           string // "" leaves it to the cluster's default
	Size            string
	HTTP            bool   // imports from the Factory instead of cloning the golden
	What            string // printed by the demo before the run
}

// All are the demo's pools, in the order it creates them.
var All = []Pool{
	{"tenant-alpha", "kubernetes-alpha-md0", 8, GoldenClass, "20Gi", false,
		"golden's class, larger: CSI clone, then expand"},
	{"tenant-beta", "kubernetes-beta-md0", 4, GoldenClass, GoldenSize, false,
		"golden's class and size: CSI clone, nothing to expand"},
	{"tenant-beta", "kubernetes-beta-md1", 2, "", "20Gi", false,
		"no class: the default virtualization class (replicated) wins over the Kubernetes default (replicated-b)"},
	{"tenant-gamma", "kubernetes-gamma-md0", 2, "replicated-fixed", "20Gi", false,
		"class without allowVolumeExpansion, larger target: CDI falls back to a host-assisted copy"},
	{"tenant-gamma", "kubernetes-gamma-md1", 2, "replicated-b", "20Gi", false,
		"another class (pool) of the same driver: CDI asks the driver for a cross-class clone"},
	{"tenant-delta", "kubernetes-delta-md0", 2, GoldenClass, "20Gi", true,
		"no golden: source.http from the Factory URL of the flavor, as before the feature"},
}

// StorageClasses are three pools of one driver: the goldens' class (also the
// virtualization default), one without expansion, and another pool that is
// the Kubernetes default.
func StorageClasses() []cluster.StorageClass {
	return []cluster.StorageClass{
		{Name: GoldenClass, DefaultVirt: true},
		{Name: "replicated-fixed", Pool: "fixed", NoExpansion: true},
		{Name: "replicated-b", Pool: "b", Default: true},
	}
}

// Golden is the demo's golden DataVolume.
func Golden() cluster.Golden {
	return cluster.Golden{SchematicID: SchematicID, Version: TalosVersion, StorageClass: GoldenClass, Size: GoldenSize}
}

// GoldenName is the name of the demo's golden.
func GoldenName() string { return cluster.GoldenName(SchematicID, TalosVersion) }

// DiskCount is the number of worker disks of every pool.
func DiskCount() int {
	n := 0
	for _, p := range All {
		n += p.Disks
	}
	return n
}

// DiskName is the name of the pool's i-th worker disk (from 0).
func (p Pool) DiskName(i int) string { return fmt.Sprintf("%s-%02d-system", p.Name, i+1) }

// Create creates the pool's namespace and its worker disks: clones of the
// golden, or Factory imports for an HTTP pool.
func (p Pool) Create(ctx context.Context, c *cluster.Cluster) error {
	if err := c.CreateNamespace(ctx, p.Namespace); err != nil {
		return err
	}
	for i := range p.Disks {
		var err error
		if p.HTTP {
			err = p.createHTTPDisk(ctx, c, p.DiskName(i))
		} else {
			_, err = c.CreateWorkerDisk(ctx, cluster.Worker{Namespace: p.Namespace, Name: p.DiskName(i),
				Golden: GoldenName(), Pool: p.Name, StorageClass: p.Class, Size: p.Size})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// createHTTPDisk creates the worker disk of a pool that has not opted in: it
// imports its image from the flavor's Factory URL, as every worker did before
// goldens existed. No defaulting webhook runs here: access and volume mode
// are set as the webhook would.
func (p Pool) createHTTPDisk(ctx context.Context, c *cluster.Cluster, name string) error {
	block := corev1.PersistentVolumeBlock
	storage := &cdiv1.StorageSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		VolumeMode:  &block,
		Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(p.Size)},
		},
	}
	if p.Class != "" {
		storage.StorageClassName = &p.Class
	}
	dv := &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name, Annotations: map[string]string{cluster.AnnPool: p.Name}},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: c.Factory.URL(SchematicID, TalosVersion)}},
			Storage: storage,
		},
	}
	_, err := c.CreateDataVolume(ctx, dv)
	return err
}
