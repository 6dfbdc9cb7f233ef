package cluster

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// Annotations of the platform's golden worker image feature.
const (
	AnnSchematicID  = "kubernetes-worker-image.cozystack.io/schematic-id"
	AnnTalosVersion = "kubernetes-worker-image.cozystack.io/talos-version"
	AnnGolden       = "kubernetes-worker-image.cozystack.io/golden"
	AnnPool         = "kubernetes-worker-image.cozystack.io/pool"
	AnnCloneToken   = "cdi.kubevirt.io/storage.clone.token"
)

// Golden describes one golden DataVolume of the catalog.
type Golden struct {
	SchematicID, Version string
	// StorageClass of the golden (the platform puts it on a replicated one).
	StorageClass string
	// Size defaults to 6Gi.
	Size string
	// URL defaults to the cluster Factory's URL of the flavor.
	URL string
	// Checksum, if set, is spec.source.http.checksum ("sha256:<hex>").
	Checksum string
}

// GoldenName is the platform's name for a flavor's golden DataVolume.
func GoldenName(schematicID, version string) string {
	return fmt.Sprintf("talos-worker-%s-%s", schematicID, version)
}

// CreateGolden creates a golden DataVolume in cozy-public, shaped as the
// platform's catalog renders it, importing over HTTP from the Factory.
func (c *Cluster) CreateGolden(ctx context.Context, g Golden) (*cdiv1.DataVolume, error) {
	if g.Size == "" {
		g.Size = "6Gi"
	}
	if g.URL == "" {
		g.URL = c.Factory.URL(g.SchematicID, g.Version)
	}
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      GoldenName(g.SchematicID, g.Version),
			Namespace: NamespaceGolden,
			Annotations: map[string]string{
				AnnSchematicID:            g.SchematicID,
				AnnTalosVersion:           g.Version,
				"helm.sh/resource-policy": "keep",
				"cdi.kubevirt.io/storage.bind.immediate.requested": "true",
			},
		},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: g.URL, Checksum: g.Checksum}},
			Storage: blockStorage(g.StorageClass, g.Size),
		},
	}
	return c.CreateDataVolume(ctx, dv)
}

// Worker describes one worker disk DataVolume of an opted-in pool.
type Worker struct {
	Namespace, Name string
	// Golden is the golden DataVolume's name (in cozy-public).
	Golden string
	// Pool is the owning pool, e.g. "kubernetes-wimg-md0".
	Pool string
	// StorageClass and Size (the pool's diskSize) of the worker disk.
	StorageClass, Size string
	// TokenTarget is the DataVolume name the clone token is signed for
	// (default Name). Another name gives a well-signed token that CDI's
	// clone populator refuses ("invalid token"), as a token copied from
	// another disk's manifest would be.
	TokenTarget string
	// Annotations are added to the DataVolume's (per-disk CDI inputs).
	Annotations map[string]string
	// AccessModes are the disk's (default ReadWriteMany, what LINSTOR's
	// StorageProfile gives a worker pool's Block disk: worker VMs
	// live-migrate).
	AccessModes []corev1.PersistentVolumeAccessMode
	// FromProfile: the disk names neither access modes nor a volume mode,
	// as the platform's worker template; CDI takes both from the class's
	// StorageProfile.
	FromProfile bool
}

// CreateWorkerDisk creates a worker disk DataVolume cloned from its golden,
// with a cross-namespace clone token minted just before (tokens expire; the
// cdi-apiserver webhook that would add it does not run here). There is no
// defaulting webhook either, so volumeMode and accessModes are set (Block,
// ReadWriteMany unless w names others).
func (c *Cluster) CreateWorkerDisk(ctx context.Context, w Worker) (*cdiv1.DataVolume, error) {
	target := w.TokenTarget
	if target == "" {
		target = w.Name
	}
	tok, err := c.CloneToken(ctx, NamespaceGolden, w.Golden, w.Namespace, target)
	if err != nil {
		return nil, err
	}
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      w.Name,
			Namespace: w.Namespace,
			Annotations: map[string]string{
				AnnGolden:     w.Golden,
				AnnPool:       w.Pool,
				AnnCloneToken: tok,
			},
		},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: NamespaceGolden, Name: w.Golden}},
			Storage: blockStorage(w.StorageClass, w.Size),
		},
	}
	dv.Spec.Storage.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	if w.AccessModes != nil {
		dv.Spec.Storage.AccessModes = w.AccessModes
	}
	if w.FromProfile {
		dv.Spec.Storage.AccessModes, dv.Spec.Storage.VolumeMode = nil, nil
	}
	maps.Copy(dv.Annotations, w.Annotations)
	return c.CreateDataVolume(ctx, dv)
}

// CloneToken signs a CDI clone token for cloning PVC srcNS/srcName into
// DataVolume dstNS/dstName, with the key cdi-controller verifies against.
func (c *Cluster) CloneToken(ctx context.Context, srcNS, srcName, dstNS, dstName string) (string, error) {
	return c.CloneTokenFor(ctx, TokenForPVC, srcNS, srcName, dstNS, dstName)
}

// The sources a clone token names (cdi-clone-token -source-resource).
const (
	TokenForPVC      = "persistentvolumeclaims"
	TokenForSnapshot = "volumesnapshots"
)

// CloneTokenFor is CloneToken for a source of the given resource
// (TokenForPVC or TokenForSnapshot).
func (c *Cluster) CloneTokenFor(ctx context.Context, resource, srcNS, srcName, dstNS, dstName string) (string, error) {
	if c.cdiKey == "" {
		return "", fmt.Errorf("clone token: cdi-controller is not running (Options.NoCDI?)")
	}
	bin, err := tools.Bin("cdi-clone-token")
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, bin, "-key", c.cdiKey,
		"-source-namespace", srcNS, "-source-name", srcName,
		"-target-namespace", dstNS, "-target-name", dstName, "-source-resource", resource).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("cdi-clone-token: %v: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("cdi-clone-token: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func blockStorage(class, size string) *cdiv1.StorageSpec {
	s := &cdiv1.StorageSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		VolumeMode:  ptr(corev1.PersistentVolumeBlock),
		Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
		},
	}
	if class != "" {
		s.StorageClassName = ptr(class)
	}
	return s
}

// CreateDataVolume creates dv as it is (no token, no defaults beyond its
// kind): CDI has no typed clientset, so this is the one way in for tests.
func (c *Cluster) CreateDataVolume(ctx context.Context, dv *cdiv1.DataVolume) (*cdiv1.DataVolume, error) {
	dv.APIVersion, dv.Kind = "cdi.kubevirt.io/v1beta1", "DataVolume"
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dv)
	if err != nil {
		return nil, err
	}
	got, err := c.Dynamic.Resource(DataVolumeGVR).Namespace(dv.Namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create DataVolume %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	return toDV(got)
}

// DataVolume reads one DataVolume.
func (c *Cluster) DataVolume(ctx context.Context, ns, name string) (*cdiv1.DataVolume, error) {
	got, err := c.Dynamic.Resource(DataVolumeGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return toDV(got)
}

func toDV(u *unstructured.Unstructured) (*cdiv1.DataVolume, error) {
	dv := &cdiv1.DataVolume{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dv); err != nil {
		return nil, fmt.Errorf("decode DataVolume: %w", err)
	}
	return dv, nil
}
