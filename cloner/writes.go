package cloner

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
)

// patchPV sets annotations on a PV, guarded by its resourceVersion.
func (c *Controller) patchPV(ctx context.Context, pv *corev1.PersistentVolume, set map[string]*string) error {
	_, err := c.clients.Kube.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType,
		publish.AnnotationPatch(pv.ResourceVersion, set), metav1.PatchOptions{FieldManager: fleet.EventSourceComponent})
	if err != nil {
		return fmt.Errorf("annotating PersistentVolume %s: %w", pv.Name, err)
	}
	return nil
}

// patchPVC sets annotations on a PVC. rv "" means last writer wins, used
// for keys only one writer owns.
func (c *Controller) patchPVC(ctx context.Context, pvc *corev1.PersistentVolumeClaim, rv string, set map[string]*string) error {
	patch, opts := publish.AnnotationPatch(rv, set), metav1.PatchOptions{FieldManager: fleet.EventSourceComponent}
	var err error
	if rc, ok := c.clients.Kube.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
		err = publish.PatchDiscardingReply(ctx, rc, pvc.Namespace, "persistentvolumeclaims", pvc.Name, patch, opts)
	} else { // a fake clientset, which has no REST client
		_, err = c.clients.Kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, patch, opts)
	}
	if err != nil {
		return fmt.Errorf("annotating PersistentVolumeClaim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}
