package publish

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// PatchPV sets annotations on a PV, guarded by its resourceVersion.
func PatchPV(ctx context.Context, kube kubernetes.Interface, pv *corev1.PersistentVolume, set map[string]*string) error {
	_, err := kube.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType,
		AnnotationPatch(pv.ResourceVersion, set), metav1.PatchOptions{FieldManager: fleet.EventSourceComponent})
	if err != nil {
		return fmt.Errorf("annotating PersistentVolume %s: %w", pv.Name, err)
	}
	return nil
}

// PatchPVC sets annotations on a PVC. rv "" means last writer wins, used
// for keys only one writer owns.
func PatchPVC(ctx context.Context, kube kubernetes.Interface, pvc *corev1.PersistentVolumeClaim, rv string, set map[string]*string) error {
	patch, opts := AnnotationPatch(rv, set), metav1.PatchOptions{FieldManager: fleet.EventSourceComponent}
	var err error
	if rc, ok := kube.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
		err = PatchDiscardingReply(ctx, rc, pvc.Namespace, "persistentvolumeclaims", pvc.Name, patch, opts)
	} else { // a fake clientset, which has no REST client
		_, err = kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, patch, opts)
	}
	if err != nil {
		return fmt.Errorf("annotating PersistentVolumeClaim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}
