package cloner

import (
	"context"
	"fmt"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
)

// AdmissionParamsName is the ConfigMap, in the sidecar's namespace, that the
// admission guard (deploy/admission, a ValidatingAdmissionPolicy) reads as
// its parameters. The leader keeps it current with --admission-params.
const AdmissionParamsName = "csi-clone-sidecar-admission"

// States of the admission parameters in the snapshot.
const (
	AdmissionParamsSynced = "synced"
	AdmissionParamsFailed = "failed"
)

// Keys of the parameters. CEL reads a ConfigMap's data as a flat string map,
// so each golden's facts are keys "<golden>.<fact>", and a path per class
// "<golden>.path.<class>" (a disk larger than the golden) and
// "<golden>.pathAtSize.<class>" (a disk of the golden's size), valued
// "<path>/<reason>"; "fix.<reason>" holds each bad reason's fix.
const (
	paramGoldenNamespace = "goldenNamespace"
	// paramDefaultStorage is what an empty class of a spec.storage
	// DataVolume resolves to, paramDefaultPVC that of a spec.pvc one.
	paramDefaultStorage = "defaultClass.storage"
	paramDefaultPVC     = "defaultClass.pvc"
)

// admissionData renders the prediction as the guard's parameters. A key
// that would break ConfigMap key rules is left out: the guard then checks
// nothing for it (fail open).
func admissionData(p *predictor, goldenNamespace string) map[string]string {
	d := map[string]string{paramGoldenNamespace: goldenNamespace}
	put := func(k, v string) {
		if len(validation.IsConfigMapKey(k)) == 0 {
			d[k] = v
		}
	}
	if p.storageDefault.Resolved() {
		put(paramDefaultStorage, p.storageDefault.Name)
	}
	if p.pvcDefault.Resolved() {
		put(paramDefaultPVC, p.pvcDefault.Name)
	}
	classes := p.state.ClassNames()
	bad := map[string]bool{}
	for ref, g := range p.goldens {
		if ref.Namespace != goldenNamespace {
			continue
		}
		put(g.Name+".phase", g.Phase)
		if g.Class != "" {
			put(g.Name+".class", g.Class)
		}
		put(g.Name+".size", strconv.FormatInt(g.RequestedBytes, 10))
		for _, c := range classes {
			larger := p.state.Predict(g, predict.Target{Class: c, VolumeMode: g.VolumeMode})
			atSize := p.state.Predict(g, predict.Target{Class: c, VolumeMode: g.VolumeMode, Bytes: g.RequestedBytes})
			put(g.Name+".path."+c, larger.Path+"/"+larger.Reason)
			put(g.Name+".pathAtSize."+c, atSize.Path+"/"+atSize.Reason)
			for _, pr := range []predict.Prediction{larger, atSize} {
				if pr.Bad() {
					bad[pr.Reason] = true
				}
			}
		}
	}
	for r := range bad {
		put("fix."+r, predict.Fix(r))
	}
	return d
}

// publishAdmissionParams writes the guard's parameters when they differ
// from what the API server holds: nothing is written when nothing changed.
func (c *Controller) publishAdmissionParams(ctx context.Context, p *predictor) (string, error) {
	if !c.cfg.AdmissionParams || p == nil {
		return "", nil
	}
	want := admissionData(p, c.cfg.GoldenNamespace)
	cms := c.clients.Kube.CoreV1().ConfigMaps(c.cfg.LedgerNamespace)
	cur, err := cms.Get(ctx, AdmissionParamsName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: AdmissionParamsName, Namespace: c.cfg.LedgerNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": "csi-clone-sidecar", "app.kubernetes.io/part-of": "csi-clone-sidecar"}},
			Data: want}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: eventSourceComponent})
	case err != nil:
	case maps.Equal(cur.Data, want):
		return AdmissionParamsSynced, nil
	default:
		cur = cur.DeepCopy()
		cur.Data = want
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{FieldManager: eventSourceComponent})
	}
	if err != nil {
		return AdmissionParamsFailed, fmt.Errorf("writing the admission parameters ConfigMap %s/%s: %w", c.cfg.LedgerNamespace, AdmissionParamsName, err)
	}
	klog.V(2).InfoS("Admission parameters written", "configMap", c.cfg.LedgerNamespace+"/"+AdmissionParamsName, "keys", len(want))
	return AdmissionParamsSynced, nil
}
