// Package pools is the scenario of `make demo`: its golden flavor, its
// vm-default-images golden, its StorageClasses and its pools of disks, each
// taking another path from its golden. test/demo plays it and prints what happened; test/e2e plays the
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

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
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

// Pool is one pool of the demo's disks and what it exercises: a worker pool
// of the Talos golden, or tenant disks of the vm-default-images golden.
type Pool struct {
	Namespace, Name string
	Disks           int
	Class           string // "" leaves it to the cluster's default
	Size            string
	HTTP            bool   // imports from the Factory instead of cloning the golden
	What            string // printed by the demo before the run
	// Image: the pool is one tenant vm-disk named Name (a pool of its own,
	// by its release label) cloned from the image's vm-default-images
	// golden, with no worker annotation.
	Image string
	// DataSource: the Image disk names only the image's DataSource in
	// cozy-public (spec.sourceRef), and no release: pooled by its namespace.
	DataSource bool
	// Snapshot: the Image disk restores the VolumeSnapshot of the image's
	// golden (source.snapshot), and no release: pooled by its namespace.
	Snapshot bool
	// Bare: the Image disk is a PVC of the golden namespace that no
	// DataVolume makes, its dataSourceRef the image golden's claim: the
	// external-provisioner clones it, CDI plays no part.
	Bare bool
}

// All are the demo's pools, in the order it creates them.
var All = []Pool{
	{Namespace: "tenant-alpha", Name: "kubernetes-alpha-md0", Disks: 8, Class: GoldenClass, Size: "20Gi",
		What: "golden's class, larger: CSI clone, then expand"},
	{Namespace: "tenant-beta", Name: "kubernetes-beta-md0", Disks: 4, Class: GoldenClass, Size: GoldenSize,
		What: "golden's class and size: CSI clone, nothing to expand"},
	{Namespace: "tenant-beta", Name: "kubernetes-beta-md1", Disks: 2, Size: "20Gi",
		What: "no class: the default virtualization class (replicated) wins over the Kubernetes default (replicated-b)"},
	{Namespace: "tenant-gamma", Name: "kubernetes-gamma-md0", Disks: 2, Class: "replicated-fixed", Size: "20Gi",
		What: "class without allowVolumeExpansion, larger target: CDI falls back to a host-assisted copy"},
	{Namespace: "tenant-gamma", Name: "kubernetes-gamma-md1", Disks: 2, Class: "replicated-b", Size: "20Gi",
		What: "another class (pool) of the same driver: CDI asks the driver for a cross-class clone"},
	{Namespace: "tenant-delta", Name: "kubernetes-delta-md0", Disks: 2, Class: GoldenClass, Size: "20Gi", HTTP: true,
		What: "no golden: source.http from the Factory URL of the flavor, as before the feature"},
	{Namespace: "tenant-epsilon", Name: "vm-disk-web", Disks: 1, Class: GoldenClass, Size: "20Gi", Image: Image,
		What: "a vm-disk of the ubuntu image (vm-default-images golden): CSI clone, then expand"},
	{Namespace: "tenant-epsilon", Name: "vm-disk-fixed", Disks: 1, Class: "replicated-fixed", Size: "20Gi", Image: Image,
		What: "a vm-disk on the class without allowVolumeExpansion: a host-assisted copy"},
	{Namespace: "tenant-epsilon", Name: "boot-db", Disks: 1, Class: GoldenClass, Size: "20Gi", Image: Image, DataSource: true,
		What: "a disk naming only the DataSource cozy-public/ubuntu, no annotation: CSI clone"},
	{Namespace: "tenant-epsilon", Name: "restored-db", Disks: 1, Class: GoldenClass, Size: "20Gi", Image: Image, Snapshot: true,
		What: "a disk restoring the VolumeSnapshot cozy-public/" + ImageSnapshot + " of the golden: snapshot restore, then expand"},
	{Namespace: cluster.NamespaceGolden, Name: "ubuntu-copy", Disks: 1, Class: GoldenClass, Size: "20Gi", Image: Image, Bare: true,
		What: "a bare PVC whose dataSourceRef names the golden's claim, no DataVolume: the external-provisioner's CSI clone at full size"},
}

// Image is the demo's vm-default-images image: its golden and the
// DataSource of the same name in cozy-public that publishes it.
const Image = "ubuntu"

// VMImage is the demo's vm-default-images golden.
func VMImage() cluster.VMImage {
	return cluster.VMImage{Image: Image, StorageClass: GoldenClass, Size: "5Gi"}
}

// PublishImage publishes the image's golden as the DataSource
// cozy-public/<image>, as a boot source.
func PublishImage(ctx context.Context, c *cluster.Cluster) error {
	return c.PublishDataSource(ctx, cluster.NamespaceGolden, Image, cluster.NamespaceGolden, cluster.VMImageGoldenName(Image))
}

// ImageSnapshot is the VolumeSnapshot of the image's golden kept beside it,
// a golden of its own, as a DataImportCron of sourceFormat snapshot keeps.
const ImageSnapshot = Image + "-snapshot"

// SnapshotImage snapshots the imported image golden as ImageSnapshot and
// waits until the snapshot is ready.
func SnapshotImage(ctx context.Context, c *cluster.Cluster) error {
	_, err := c.SnapshotClaim(ctx, cluster.NamespaceGolden, ImageSnapshot, cluster.VMImageGoldenName(Image), "snapshots",
		map[string]any{fleet.AnnImageName: Image})
	return err
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

// DiskName is the name of the pool's i-th disk (from 0): a vm-disk is named
// after its release.
func (p Pool) DiskName(i int) string {
	if p.Image != "" {
		return p.Name
	}
	return fmt.Sprintf("%s-%02d-system", p.Name, i+1)
}

// Create creates the pool's namespace and its disks: clones of a golden, or
// Factory imports for an HTTP pool.
func (p Pool) Create(ctx context.Context, c *cluster.Cluster) error {
	if err := c.CreateNamespace(ctx, p.Namespace); err != nil {
		return err
	}
	for i := range p.Disks {
		var err error
		switch {
		case p.HTTP:
			err = p.createHTTPDisk(ctx, c, p.DiskName(i))
		case p.Bare:
			err = p.createBareClaim(ctx, c)
		case p.Image != "":
			err = p.createVMDisk(ctx, c)
		default:
			_, err = c.CreateWorkerDisk(ctx, cluster.Worker{Namespace: p.Namespace, Name: p.DiskName(i),
				Golden: GoldenName(), Pool: p.Name, StorageClass: p.Class, Size: p.Size})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// createVMDisk creates the pool's one tenant disk of its image's golden.
func (p Pool) createVMDisk(ctx context.Context, c *cluster.Cluster) error {
	d := cluster.VMDisk{Namespace: p.Namespace, Name: p.Name, Image: p.Image, StorageClass: p.Class, Size: p.Size}
	if p.DataSource {
		d.DataSource = cluster.NamespaceGolden + "/" + p.Image
	}
	if p.Snapshot {
		d.Snapshot = cluster.NamespaceGolden + "/" + ImageSnapshot
	}
	_, err := c.CreateVMDisk(ctx, d)
	return err
}

// createBareClaim creates the pool's one claim cloning its image golden's
// claim, of the golden's volume and access modes.
func (p Pool) createBareClaim(ctx context.Context, c *cluster.Cluster) error {
	golden, err := c.Client.CoreV1().PersistentVolumeClaims(cluster.NamespaceGolden).Get(ctx, cluster.VMImageGoldenName(p.Image), metav1.GetOptions{})
	if err != nil {
		return err
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &p.Class, VolumeMode: golden.Spec.VolumeMode,
			AccessModes:   golden.Spec.AccessModes,
			DataSourceRef: &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: golden.Name},
			Resources:     corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(p.Size)}}},
	}
	_, err = c.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	return err
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
