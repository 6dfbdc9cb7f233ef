package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// Namespaces every cluster has besides the built-in ones: CDI's own (its
// leader-election lease), the platform's catalog namespace for goldens, and
// the CSI driver's.
const (
	NamespaceCDI    = "cdi"
	NamespaceGolden = "cozy-public"
	// NamespaceCSI is where the CSI controller pod, and so csi-clone-sidecar
	// (its POD_NAMESPACE: ledger ConfigMap, lease), lives in production.
	NamespaceCSI = "cozy-linstor"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// startControlPlane starts etcd, kube-apiserver and kube-controller-manager
// and builds the admin clients.
func (c *Cluster) startControlPlane() error {
	p, err := makePKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	c.pki = p
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	etcdURL, err := c.startEtcd(ports[0], ports[1])
	if err != nil {
		return err
	}
	c.Host = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	if err := c.startAPIServer(etcdURL, ports[2]); err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := c.writeKubeconfig(c.Kubeconfig); err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host:            c.Host,
		BearerToken:     p.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM},
		QPS:             200,
		Burst:           400,
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return err
	}
	return c.startControllerManager(ports[3])
}

// installBase installs the VolumeSnapshot and CDI CRDs, the namespaces and
// the CSIDriver object (without which CDI does not take the populator path).
func (c *Cluster) installBase() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var names []string
	for _, set := range []string{"snapshot", "cdi"} {
		dir, err := tools.CRDDir(set)
		if err != nil {
			return err
		}
		n, err := c.applyCRDDir(ctx, dir)
		if err != nil {
			return fmt.Errorf("CRDs %s: %w", set, err)
		}
		names = append(names, n...)
	}
	for _, ns := range []string{NamespaceCDI, NamespaceGolden, NamespaceCSI} {
		if err := c.CreateNamespace(ctx, ns); err != nil {
			return err
		}
	}
	if _, err := c.Client.StorageV1().CSIDrivers().Create(ctx, newCSIDriver(c.DriverName), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("CSIDriver: %w", err)
	}
	return c.waitCRDsEstablished(ctx, names)
}

// newCSIDriver is the CSIDriver object of a test driver.
func newCSIDriver(name string) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired: ptr(false),
			PodInfoOnMount: ptr(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{
				storagev1.VolumeLifecyclePersistent,
			},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// CreateNamespace creates a namespace and waits for its "default"
// ServiceAccount (pods CDI creates there are admitted only once it exists).
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// applyCRDDir creates every CRD in the YAML files of dir and returns their names.
func (c *Cluster) applyCRDDir(ctx context.Context, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml in %s; run `make tools`", dir)
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		objs, err := decodeYAML(f)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := c.Dynamic.Resource(crdGVR).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				return nil, fmt.Errorf("%s: create %s: %w", f, o.GetName(), err)
			}
			names = append(names, o.GetName())
		}
	}
	return names, nil
}

// decodeYAML reads every document of a (multi-document) YAML file.
func decodeYAML(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(o.Object) > 0 {
			out = append(out, o)
		}
	}
}

// waitCRDsEstablished waits until every named CRD serves its resource.
func (c *Cluster) waitCRDsEstablished(ctx context.Context, names []string) error {
	for _, n := range names {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			o, err := c.Dynamic.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", n, err)
		}
	}
	return nil
}

// hasPrefixAny reports whether s starts with any of the prefixes.
func hasPrefixAny(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
