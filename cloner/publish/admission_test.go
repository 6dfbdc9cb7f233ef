package publish

import (
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// The guard's parameters carry, per golden, kind, mode and class, the
// regions of a disk with each per-disk annotation whose effect depends on
// its size and class, only where they differ: cloneType csi-clone makes a
// larger disk onto a class without expansion fail (the API server refuses
// to grow CDI's claim), where CDI would copy.
func TestAdmissionDataCarriesPerDiskRegions(t *testing.T) {
	yes, no := true, false
	in := predict.Inputs{CSIDrivers: []string{"linstor.csi.linbit.com"}}
	for _, c := range []struct {
		name   string
		expand *bool
	}{{"replicated", &yes}, {"fixed", &no}} {
		in.Classes = append(in.Classes, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Provisioner: "linstor.csi.linbit.com", AllowVolumeExpansion: c.expand})
	}
	csiClone := cdiv1.CloneStrategyCsiClone
	in.CDIs = []*cdiv1.CDI{{Spec: cdiv1.CDISpec{CloneStrategyOverride: &csiClone}}}
	state := predict.NewState(in)
	g := predict.Golden{Namespace: "cozy-public", Name: "talos-worker-x", Class: "replicated", Phase: "Succeeded",
		Driver: "linstor.csi.linbit.com", VolumeMode: cdirules.Block, CapacityBytes: 5 << 30, RequestedBytes: 5 << 30}
	target := predict.Target{Class: "fixed", Kind: cdirules.KindStorage, VolumeMode: cdirules.Block, AccessModes: []string{"ReadWriteOnce"}}
	base := regionsValue(state.Regions(g, target))
	got := perDiskRegions(state, g, target, base, true)
	want := "blocked/" + predict.ReasonCloneTypeNoExpansion
	if v, ok := got[cdirules.StrategyCSIClone]; !ok || v[len(v)-len(want):] != want {
		t.Errorf("csi-clone variant on a class without expansion: %q (present %v), base %q", v, ok, base)
	}
	if _, ok := got["permissive"]; ok {
		t.Errorf("permissive variant written though a Block disk of the golden's size is not refused: %v", got)
	}
	if _, ok := got["pop"]; ok {
		t.Errorf("pop variant written for a class with a CSIDriver: %v", got)
	}
}

// The class-mismatch rule's switch reaches the guard as its parameter.
func TestAdmissionDataCarriesTheClassMismatchRule(t *testing.T) {
	p := &verdict.Predictor{State: predict.NewState(predict.Inputs{})}
	for allow, want := range map[bool]string{false: ruleGuard, true: ruleAllow} {
		if got := AdmissionData(p, "cozy-public", predict.GuardRules{AllowClassMismatch: allow})[paramClassMismatch]; got != want {
			t.Errorf("AllowClassMismatch %v: %s = %q, want %q", allow, paramClassMismatch, got, want)
		}
	}
}
