package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// CDI resources the harness touches.
var (
	CDIGVR            = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "cdis"}
	DataVolumeGVR     = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "datavolumes"}
	StorageProfileGVR = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "storageprofiles"}
	CDIConfigGVR      = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "cdiconfigs"}
)

// cdiKeyDir is where cdi-controller reads its token key pair; the path is
// compiled in, so it is made inside cdi-controller's own mount namespace.
const cdiKeyDir = "/var/run/cdi/token/keys"

// cdiScript runs inside `unshare -m`: private tmpfs over /run and /tmp (so
// the key pair, /tmp/ready and anything else CDI writes never reach the
// host), the keys and a self-contained kubeconfig copied in before /tmp is
// covered (the state directory may live under /tmp), the binary's directory
// bound under /run for the same reason (TOOLS_CACHE may live under /tmp),
// then cdi-controller.
const cdiScript = `set -e
src=$1; bin=$2; shift 2
mount -t tmpfs -o size=32m,mode=0755 cdi-run /run
mkdir -p ` + cdiKeyDir + ` /run/cdi/config
cp "$src/id_rsa" "$src/id_rsa.pub" ` + cdiKeyDir + `/
cp "$src/kubeconfig" /run/cdi/config/kubeconfig
for s in cdi-uploadserver-signer cdi-uploadserver-client-signer; do
	mkdir -p /run/certs/$s
	cp "$src/$s.crt" /run/certs/$s/tls.crt
	cp "$src/$s.key" /run/certs/$s/tls.key
done
mkdir -p /run/cdi/bin
mount --bind "$(dirname "$bin")" /run/cdi/bin
mount -t tmpfs -o size=32m,mode=1777 cdi-tmp /tmp
exec "/run/cdi/bin/$(basename "$bin")" --kubeconfig=/run/cdi/config/kubeconfig "$@"
`

// startCDI creates the CDI resource, starts cdi-controller in a private mount
// namespace, waits for it to be ready and for its StorageProfiles, applies
// the clone strategy, and starts the pod emulation.
func (c *Cluster) startCDI() error {
	if c.opts.NoCDI {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.createCDIResource(ctx); err != nil {
		return err
	}
	bin, err := tools.Bin("cdi-controller")
	if err != nil {
		return err
	}
	keys := filepath.Join(c.Dir, "cdi")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		return err
	}
	if err := writeNewRSAPair(filepath.Join(keys, "id_rsa"), filepath.Join(keys, "id_rsa.pub")); err != nil {
		return err
	}
	c.cdiKey = filepath.Join(keys, "id_rsa")
	if err := c.makeUploadSigners(ctx, keys); err != nil {
		return err
	}
	if err := c.writeKubeconfig(filepath.Join(keys, "kubeconfig")); err != nil {
		return err
	}
	env := []string{
		// Pod images are never pulled: no kubelet runs them.
		"IMPORTER_IMAGE=e2e.invalid/cdi-importer", "CLONER_IMAGE=e2e.invalid/cdi-cloner",
		"UPLOADSERVER_IMAGE=e2e.invalid/cdi-uploadserver", "OVIRT_POPULATOR_IMAGE=e2e.invalid/ovirt-populator",
		"UPLOADPROXY_SERVICE=cdi-uploadproxy",
	}
	p, err := c.start("cdi-controller", env, "unshare", "-m", "--propagation=private",
		"sh", "-c", cdiScript, "cdi-controller", keys, bin, "-v=3")
	if err != nil {
		return err
	}
	if err := c.waitCDIReady(ctx, p); err != nil {
		return err
	}
	if err := c.honorWaitForFirstConsumer(ctx); err != nil {
		return err
	}
	if err := c.applyCloneStrategy(ctx); err != nil {
		return err
	}
	return c.startEmulator()
}

// makeUploadSigners creates the two CAs of CDI's host-assisted clone
// (upload server and its client), which cdi-operator would otherwise make:
// key pairs for cdi-controller's files, CA bundles in its ConfigMaps.
func (c *Cluster) makeUploadSigners(ctx context.Context, dir string) error {
	for _, name := range []string{"cdi-uploadserver-signer", "cdi-uploadserver-client-signer"} {
		ca, err := writeCA(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), name)
		if err != nil {
			return err
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-bundle", Namespace: NamespaceCDI},
			Data:       map[string]string{"ca-bundle.crt": string(ca.pem)},
		}
		if _, err := c.Client.CoreV1().ConfigMaps(NamespaceCDI).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
		}
	}
	return nil
}

// createCDIResource creates the one CDI resource cdi-controller reads its
// global settings from.
func (c *Cluster) createCDIResource(ctx context.Context) error {
	spec := map[string]any{}
	switch c.opts.CloneStrategy {
	case StrategyCSIClone, StrategyCopy:
		spec["cloneStrategyOverride"] = c.opts.CloneStrategy
	case StrategySnapshot:
	default:
		return fmt.Errorf("unknown clone strategy %q (want %s, %s or %s)", c.opts.CloneStrategy, StrategyCSIClone, StrategySnapshot, StrategyCopy)
	}
	cdi := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1",
		"kind":       "CDI",
		"metadata":   map[string]any{"name": "cdi"},
		"spec":       spec,
	}}
	_, err := c.Dynamic.Resource(CDIGVR).Create(ctx, cdi, metav1.CreateOptions{})
	return err
}

// honorWaitForFirstConsumer turns on, in a cluster with a
// WaitForFirstConsumer class, the CDI feature gate CDI's released CR
// (cdi-cr.yaml) and Cozystack's kubevirt-cdi package set: without it CDI
// binds every claim it makes at once, a WaitForFirstConsumer class or not
// (common/util.go AddImmediateBindingAnnotationIfWFFCDisabled). Without
// such a class the gate changes nothing CDI does, and is left alone. The
// gate is set on the CDIConfig, which cdi-controller reads it from (no
// cdi-operator copies the CDI resource's config here).
func (c *Cluster) honorWaitForFirstConsumer(ctx context.Context) error {
	if !c.hasWaitForFirstConsumerClass() {
		return nil
	}
	patch := []byte(`{"spec":{"featureGates":["HonorWaitForFirstConsumer"]}}`)
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = c.Dynamic.Resource(CDIConfigGVR).Patch(ctx, "config", types.MergePatchType, patch, metav1.PatchOptions{})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("CDIConfig feature gate HonorWaitForFirstConsumer: %w (last: %v)", err, last)
	}
	return nil
}

// waitCDIReady waits for the /tmp/ready file cdi-controller writes in its own
// mount namespace (seen through /proc/<pid>/root), then for the StorageProfile
// of every StorageClass.
func (c *Cluster) waitCDIReady(ctx context.Context, p *proc) error {
	ready := filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "root", "tmp", "ready")
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := p.failure(); err != nil {
			return false, err
		}
		_, err := os.Stat(ready)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("cdi-controller not ready: %w; log: %s", err, p.log)
	}
	for _, sc := range c.opts.StorageClasses {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.Dynamic.Resource(StorageProfileGVR).Get(ctx, sc.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, p.failure()
			}
			return err == nil, err
		})
		if err != nil {
			return fmt.Errorf("StorageProfile %s never appeared: %w; log: %s", sc.Name, err, p.log)
		}
	}
	return nil
}

// applyCloneStrategy sets spec.cloneStrategy on every StorageProfile for the
// snapshot strategy (the other strategies are forced on the CDI resource).
func (c *Cluster) applyCloneStrategy(ctx context.Context) error {
	if c.opts.CloneStrategy != StrategySnapshot {
		return nil
	}
	for _, sc := range c.opts.StorageClasses {
		if err := c.SetStorageProfileCloneStrategy(ctx, sc.Name, StrategySnapshot); err != nil {
			return err
		}
	}
	return nil
}

// SetStorageProfileCloneStrategy sets a StorageProfile's spec.cloneStrategy
// and waits until CDI reflects it in the profile's status.
func (c *Cluster) SetStorageProfileCloneStrategy(ctx context.Context, class, strategy string) error {
	patch := fmt.Sprintf(`{"spec":{"cloneStrategy":%q}}`, strategy)
	res := c.Dynamic.Resource(StorageProfileGVR)
	if _, err := res.Patch(ctx, class, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("StorageProfile %s: %w", class, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sp, err := res.Get(ctx, class, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got, _, _ := unstructured.NestedString(sp.Object, "status", "cloneStrategy")
		return got == strategy, nil
	})
}
