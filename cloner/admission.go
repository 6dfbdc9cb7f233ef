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

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
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

// Keys of the parameters. CEL reads a ConfigMap's data as a flat string map:
//
//	<golden>.phase, .class, .contentType      the golden's facts
//	<golden>.<kind>.<mode>.<class>            "<min>:<fit>:<sizeless>:<small>:<atSize>:<larger>"
//	<golden>.path.<class>                     the pool disk's path, larger than the golden (readable summary)
//	class.<class>.provisioner                 the class exists
//	class.<class>.mode                        the volume mode of its StorageProfile's claimPropertySets[0]
//	class.<class>.modes                       the modes its claimPropertySets offer, comma-separated
//	class.<class>.am.<accessMode>             "<index>:<mode>" of the first claimPropertySet with the access mode
//	fix.<reason>                              each bad reason's fix
//	dataSource.<namespace>.<name>             "<pvcNamespace>/<pvcName>" the DataSource clones ("" namespace: the DataVolume's)
//
// <kind> is pvc or storage, <mode> the claim's volume mode (Block or
// Filesystem: the guard resolves a DataVolume's as CDI does, from the class
// keys), each path "<path>/<reason>". A DataVolume's size b picks one: no
// size: sizeless; b < min: small (CDI refuses the size); b <= fit: atSize
// (the claim fits the golden); else larger (predict.Regions).
const (
	paramGoldenNamespace = "goldenNamespace"
	// paramDefaultStorage is what an empty class of a spec.storage
	// DataVolume of content kubevirt resolves to, paramDefaultPVC that of a
	// spec.pvc one or an archive (the Kubernetes default).
	paramDefaultStorage = "defaultClass.storage"
	paramDefaultPVC     = "defaultClass.pvc"
)

// guardKinds and guardModes are the claim shapes the guard's keys cover.
var (
	guardKinds = []cdirules.SpecKind{cdirules.KindPVC, cdirules.KindStorage}
	guardModes = []string{cdirules.Block, cdirules.Filesystem}
)

// admissionData renders the prediction as the guard's parameters. A key
// that would break ConfigMap key rules is left out: the guard then checks
// nothing for it (fail open).
func admissionData(p *verdict.Predictor, goldenNamespace string) map[string]string {
	d := map[string]string{paramGoldenNamespace: goldenNamespace}
	put := func(k, v string) {
		if len(validation.IsConfigMapKey(k)) == 0 {
			d[k] = v
		}
	}
	if p.StorageDefault.Resolved() {
		put(paramDefaultStorage, p.StorageDefault.Name)
	}
	if p.PvcDefault.Resolved() {
		put(paramDefaultPVC, p.PvcDefault.Name)
	}
	classes := p.State.ClassNames()
	for _, c := range classes {
		for k, v := range p.State.ClassModes(c) {
			put("class."+c+"."+k, v)
		}
	}
	bad := map[string]bool{}
	for ref, g := range p.Goldens {
		if ref.Namespace != goldenNamespace {
			continue
		}
		put(g.Name+".phase", g.Phase)
		if g.Class != "" {
			put(g.Name+".class", g.Class)
		}
		put(g.Name+".contentType", cdirules.ContentType(g.ContentType))
		for _, c := range classes {
			for _, kind := range guardKinds {
				for _, mode := range guardModes {
					r := p.State.Regions(g, predict.Target{Class: c, Kind: kind, VolumeMode: mode, AccessModes: []string{"ReadWriteOnce"},
						ContentType: g.ContentType})
					put(g.Name+"."+string(kind)+"."+mode+"."+c, regionsValue(r))
					for _, pr := range []predict.Prediction{r.Sizeless, r.Small, r.AtSize, r.Larger} {
						if pr.Bad() {
							bad[pr.Reason] = true
						}
					}
					if kind == cdirules.KindStorage && mode == resolvedGoldenMode(g) {
						put(g.Name+".path."+c, pathValue(r.Larger))
					}
				}
			}
		}
	}
	for r := range bad {
		put("fix."+r, predict.Fix(r))
	}
	for _, ds := range p.DataSources {
		if pvc := cdirules.DataSourcePVC(ds); pvc != nil {
			put("dataSource."+ds.Namespace+"."+ds.Name, pvc.Namespace+"/"+pvc.Name)
		}
	}
	return d
}

func regionsValue(r predict.Regions) string {
	return strconv.FormatInt(r.MinBytes, 10) + ":" + strconv.FormatInt(r.FitBytes, 10) + ":" + pathValue(r.Sizeless) + ":" +
		pathValue(r.Small) + ":" + pathValue(r.AtSize) + ":" + pathValue(r.Larger)
}

func pathValue(p predict.Prediction) string { return p.Path + "/" + p.Reason }

func resolvedGoldenMode(g predict.Golden) string {
	if g.VolumeMode == cdirules.Block {
		return cdirules.Block
	}
	return cdirules.Filesystem
}

// publishAdmissionParams writes the guard's parameters when they differ
// from what the API server holds: nothing is written when nothing changed.
func (c *Controller) publishAdmissionParams(ctx context.Context, p *verdict.Predictor) (string, error) {
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
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: fleet.EventSourceComponent})
	case err != nil:
	case maps.Equal(cur.Data, want):
		return AdmissionParamsSynced, nil
	default:
		cur = cur.DeepCopy()
		cur.Data = want
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{FieldManager: fleet.EventSourceComponent})
	}
	if err != nil {
		return AdmissionParamsFailed, fmt.Errorf("writing the admission parameters ConfigMap %s/%s: %w", c.cfg.LedgerNamespace, AdmissionParamsName, err)
	}
	klog.V(2).InfoS("Admission parameters written", "configMap", c.cfg.LedgerNamespace+"/"+AdmissionParamsName, "keys", len(want))
	return AdmissionParamsSynced, nil
}
