package cloner

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// annotationPatch is a JSON merge patch that sets (or, for nil, removes)
// annotations. With a resourceVersion the API server applies it only to that
// version: a read-modify-write that loses a race fails with a Conflict
// instead of overwriting another replica's evidence.
func annotationPatch(resourceVersion string, set map[string]*string) []byte {
	meta := map[string]any{"annotations": set}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	b, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		panic(err) // strings only: cannot happen
	}
	return b
}

func ptrTo(s string) *string { return &s }

// patchPV sets annotations on a PV, guarded by its resourceVersion.
func (c *Controller) patchPV(ctx context.Context, pv *corev1.PersistentVolume, set map[string]*string) error {
	_, err := c.clients.Kube.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType,
		annotationPatch(pv.ResourceVersion, set), metav1.PatchOptions{FieldManager: eventSourceComponent})
	if err != nil {
		return fmt.Errorf("annotating PersistentVolume %s: %w", pv.Name, err)
	}
	return nil
}

// patchPVC sets annotations on a PVC. rv "" means last writer wins, used
// for keys only one writer owns.
func (c *Controller) patchPVC(ctx context.Context, pvc *corev1.PersistentVolumeClaim, rv string, set map[string]*string) error {
	_, err := c.clients.Kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType,
		annotationPatch(rv, set), metav1.PatchOptions{FieldManager: eventSourceComponent})
	if err != nil {
		return fmt.Errorf("annotating PersistentVolumeClaim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}
