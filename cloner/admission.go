package cloner

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// publishAdmissionParams writes the guard's parameters when they differ
// from what the API server holds: nothing is written when nothing changed.
func (c *Controller) publishAdmissionParams(ctx context.Context, p *verdict.Predictor) (string, error) {
	if !c.cfg.AdmissionParams || p == nil {
		return "", nil
	}
	want := publish.AdmissionData(p, c.cfg.GoldenNamespaces().Primary(), predict.GuardRules{AllowClassMismatch: c.cfg.AdmissionAllowClassMismatch})
	cms := c.clients.Kube.CoreV1().ConfigMaps(c.cfg.LedgerNamespace)
	cur, err := cms.Get(ctx, publish.AdmissionParamsName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: publish.AdmissionParamsName, Namespace: c.cfg.LedgerNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": "csi-clone-sidecar", "app.kubernetes.io/part-of": "csi-clone-sidecar"}},
			Data: want}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: fleet.EventSourceComponent})
	case err != nil:
	case maps.Equal(cur.Data, want):
		return publish.AdmissionParamsSynced, nil
	default:
		cur = cur.DeepCopy()
		cur.Data = want
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{FieldManager: fleet.EventSourceComponent})
	}
	if err != nil {
		return publish.AdmissionParamsFailed, fmt.Errorf("writing the admission parameters ConfigMap %s/%s: %w", c.cfg.LedgerNamespace, publish.AdmissionParamsName, err)
	}
	klog.V(2).InfoS("Admission parameters written", "configMap", c.cfg.LedgerNamespace+"/"+publish.AdmissionParamsName, "keys", len(want))
	return publish.AdmissionParamsSynced, nil
}
