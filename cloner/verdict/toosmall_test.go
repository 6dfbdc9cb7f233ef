package verdict_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// TestTooSmallIsWhatCDIRefuses: too-small is the CDI model's verdict on the
// claims CDI renders (validateClone compares the target claim with the
// source's capacity), not a comparison of the DataVolumes' requests. A
// spec.storage Filesystem disk of 9.5Gi renders a claim of 9.5Gi/0.94, more
// than a spec.pvc golden's 10Gi; a 4Gi one stays smaller.
func TestTooSmallIsWhatCDIRefuses(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	fs := corev1.PersistentVolumeFilesystem
	g := w.DataVolume(config.DefaultGoldenNamespace, clonertest.GoldenName(clonertest.TestSID, clonertest.TestVer), 10*clonertest.Gi, nil)
	g.Annotations[fleet.AnnSchematicID], g.Annotations[fleet.AnnTalosVersion] = clonertest.TestSID, clonertest.TestVer
	g.Spec.Storage = nil
	g.Spec.PVC = &corev1.PersistentVolumeClaimSpec{StorageClassName: publish.PtrTo(clonertest.TestClass), VolumeMode: &fs,
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: clonertest.Qty(10 * clonertest.Gi)}}}
	g.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://factory.talos.dev/image/" + clonertest.TestSID + "/" + clonertest.TestVer + "/openstack-amd64.raw.xz"}}
	clonertest.Succeed(g, clonertest.T0.Add(-time.Hour))
	gpvc, gpv := w.Claim(g, clonertest.TestClass, 10*clonertest.Gi, 10*clonertest.Gi, "golden-vol")
	gpvc.Spec.VolumeMode, gpv.Spec.VolumeMode = &fs, &fs
	for name, size := range map[string]int64{"within-overhead": 19 * clonertest.Gi / 2, "small": 4 * clonertest.Gi} {
		d := w.Worker("tenant-a", name, "p", g, size, publish.PtrTo(clonertest.TestClass))
		d.Spec.Storage.VolumeMode = &fs
		d.Spec.Storage.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	recs := w.JudgeWithCDI(t, clonertest.T0)
	if r := recs["within-overhead"]; clonertest.ReasonsOf(r)[record.ReasonTooSmall] || r.Predicted != predict.PathCSIClone {
		t.Errorf("within-overhead: predicted %s (%s), reasons %v; want csi-clone and not too-small", r.Predicted, r.PredictedReason, r.BadReasons())
	}
	if r := recs["small"]; !clonertest.ReasonsOf(r)[record.ReasonTooSmall] || r.PredictedReason != predict.ReasonTargetTooSmall {
		t.Errorf("small: predicted %s (%s), reasons %v; want target-too-small and too-small", r.Predicted, r.PredictedReason, r.BadReasons())
	}
	if msg := recs["small"].MessageFor(record.ReasonTooSmall); !strings.Contains(msg, "CloneValidationFailed") {
		t.Errorf("small: too-small says %q, not the prediction's words (CDI refuses the clone: CloneValidationFailed)", msg)
	}
}

// A pending disk whose predicted path has a finding of its own (a golden
// that failed to import: failed-golden; a disk smaller than the golden:
// too-small) carries that finding alone: bad-path-predicted would say the
// same thing twice (TestVerdictsOnTheLoopbackStack's failed-a carried both).
func TestBadPathPredictedNeverRepeatsAFinding(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	g.Status.Phase = cdiv1.Failed
	block := corev1.PersistentVolumeBlock
	d := w.Worker("tenant-a", "of-failed", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	d.Spec.Storage.AccessModes, d.Spec.Storage.VolumeMode = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, &block
	good, _ := w.Golden(clonertest.TestSID, "v1.13.3")
	s := w.Worker("tenant-a", "small", "p", good, 2*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	s.Spec.Storage.AccessModes, s.Spec.Storage.VolumeMode = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, &block
	recs := w.JudgeWithCDI(t, clonertest.T0.Add(time.Minute))
	for name, want := range map[string]string{"of-failed": record.ReasonFailedGolden, "small": record.ReasonTooSmall} {
		r := recs[name]
		if got := strings.Join(r.BadReasons(), ","); got != want || r.Verdict != record.VerdictPending {
			t.Errorf("%s: %s, predicted %s (%s), reasons %q; want pending and %q alone", name, r.Verdict, r.Predicted, r.PredictedReason, got, want)
		}
	}
}
