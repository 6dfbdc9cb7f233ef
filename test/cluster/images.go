package cluster

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Cozystack's other goldens: the vm-default-images package imports one
// DataVolume per image into cozy-public, and every tenant vm-disk with
// source.image clones it (packages/system/vm-default-images/templates/dv.yaml,
// packages/apps/vm-disk/templates/dv.yaml).
const (
	AnnVMImageName = "vm-default-images.cozystack.io/name"
	// LabelInstance is Helm's release label, which vm-disk's template sets.
	LabelInstance = "app.kubernetes.io/instance"
)

var dataSourceGVR = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "datasources"}

// VMImageGoldenName is the name vm-default-images gives an image's golden.
func VMImageGoldenName(image string) string { return "vm-default-images-" + image }

// VMImage describes one golden of the vm-default-images package.
type VMImage struct {
	Image, StorageClass, Size string
}

// CreateVMImage creates cozy-public/vm-default-images-<image> as the package
// renders it, with the volume mode and access modes set (no defaulting
// webhook runs here). It imports any image the loopback Factory serves: the
// bytes do not matter.
func (c *Cluster) CreateVMImage(ctx context.Context, img VMImage) (*cdiv1.DataVolume, error) {
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: NamespaceGolden, Name: VMImageGoldenName(img.Image),
			Labels: map[string]string{"app.kubernetes.io/managed-by": "cozystack"},
			Annotations: map[string]string{
				AnnVMImageName: img.Image,
				"vm-default-images.cozystack.io/os-family":         "linux",
				"vm-default-images.cozystack.io/os-name":           img.Image,
				"vm-default-images.cozystack.io/architecture":      "amd64",
				"cdi.kubevirt.io/storage.bind.immediate.requested": "true",
				"cdi.kubevirt.io/storage.usePopulator":             "true",
			},
		},
		Spec: cdiv1.DataVolumeSpec{
			ContentType: cdiv1.DataVolumeKubeVirt,
			Source:      &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: c.Factory.URL(strings.Repeat("e5", 32), "v1.13.2")}},
			Storage:     blockStorage(img.StorageClass, img.Size),
		},
	}
	return c.CreateDataVolume(ctx, dv)
}

// VMDisk describes a tenant disk cloned from a vm-default-images golden.
type VMDisk struct {
	Namespace, Name string
	// Image names the golden (vm-default-images-<Image> in cozy-public).
	Image string
	// DataSource, if set, is "<namespace>/<name>" of a DataSource the disk
	// names instead of the golden, with no label either: the disk reaches
	// its golden only through spec.sourceRef.
	DataSource string
	// Snapshot, if set, is "<namespace>/<name>" of a golden VolumeSnapshot
	// the disk restores: through source.snapshot, or through DataSource
	// when that names it. The disk carries no label either.
	Snapshot           string
	StorageClass, Size string
	// Annotations are added to the DataVolume's (CDI's per-disk ones).
	Annotations map[string]string
}

// CreateVMDisk creates the disk as vm-disk renders it (named after its
// release, labelled with it, source.pvc of the image's golden), or, with a
// DataSource, as KubeVirt's boot sources are cloned. The clone token is the
// one the cdi-apiserver webhook would add.
func (c *Cluster) CreateVMDisk(ctx context.Context, d VMDisk) (*cdiv1.DataVolume, error) {
	dv, err := c.VMDiskDataVolume(ctx, d)
	if err != nil {
		return nil, err
	}
	return c.CreateDataVolume(ctx, dv)
}

// VMDiskDataVolume is the DataVolume CreateVMDisk creates, for a test that
// submits it itself (through the admission guard, as a dry run).
func (c *Cluster) VMDiskDataVolume(ctx context.Context, d VMDisk) (*cdiv1.DataVolume, error) {
	golden := VMImageGoldenName(d.Image)
	resource, srcNS, srcName := TokenForPVC, NamespaceGolden, golden
	snapNS, snapName, fromSnapshot := strings.Cut(d.Snapshot, "/")
	if fromSnapshot {
		resource, srcNS, srcName = TokenForSnapshot, snapNS, snapName
	}
	tok, err := c.CloneTokenFor(ctx, resource, srcNS, srcName, d.Namespace, d.Name)
	if err != nil {
		return nil, err
	}
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name, Annotations: map[string]string{AnnCloneToken: tok}},
		Spec:       cdiv1.DataVolumeSpec{Storage: blockStorage(d.StorageClass, d.Size)},
	}
	for k, v := range d.Annotations {
		dv.Annotations[k] = v
	}
	if ns, name, ok := strings.Cut(d.DataSource, "/"); ok {
		dv.Spec.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &ns, Name: name}
	} else if fromSnapshot {
		dv.Spec.Source = &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: snapNS, Name: snapName}}
	} else {
		dv.Labels = map[string]string{LabelInstance: d.Name}
		dv.Spec.ContentType = cdiv1.DataVolumeKubeVirt
		dv.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: NamespaceGolden, Name: golden}}
	}
	dv.APIVersion, dv.Kind = "cdi.kubevirt.io/v1beta1", "DataVolume"
	return dv, nil
}

// PublishDataSource publishes PVC pvcNS/pvcName as the boot source ns/name,
// as KubeVirt's DataImportCron or an administrator does.
func (c *Cluster) PublishDataSource(ctx context.Context, ns, name, pvcNS, pvcName string) error {
	return c.publishDataSource(ctx, ns, name, cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: pvcNS, Name: pvcName}})
}

// PublishSnapshotDataSource publishes VolumeSnapshot snapNS/snapName as the
// boot source ns/name, as a DataImportCron of sourceFormat snapshot does.
func (c *Cluster) PublishSnapshotDataSource(ctx context.Context, ns, name, snapNS, snapName string) error {
	return c.publishDataSource(ctx, ns, name, cdiv1.DataSourceSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: snapNS, Name: snapName}})
}

func (c *Cluster) publishDataSource(ctx context.Context, ns, name string, src cdiv1.DataSourceSource) error {
	ds := &cdiv1.DataSource{
		TypeMeta:   metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataSource"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       cdiv1.DataSourceSpec{Source: src},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ds)
	if err != nil {
		return err
	}
	_, err = c.Dynamic.Resource(dataSourceGVR).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	return err
}
