package cloner

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
)

func TestSeveralDefaultsNewestWinsTiesByName(t *testing.T) {
	var w clonertest.World
	w.Class("old", map[string]string{fleet.AnnDefaultClass: "true"}, clonertest.T0)
	w.Class("zeta", map[string]string{fleet.AnnDefaultClass: "true"}, clonertest.T0.Add(time.Hour))
	w.Class("alpha", map[string]string{fleet.AnnDefaultClass: "true"}, clonertest.T0.Add(time.Hour))
	w.Class("not-default", map[string]string{fleet.AnnDefaultClass: "false"}, clonertest.T0.Add(2*time.Hour))
	ci := fleet.NewClassIndex(w.Scs)
	if got := ci.ResolveRequested(nil, "kubevirt"); got.Name != "alpha" || got.How != fleet.ClassK8sDefault {
		t.Fatalf("got %+v, want alpha (newest, then name ascending)", got)
	}
}

func TestVirtDefaultOnlyForKubevirtContent(t *testing.T) {
	var w clonertest.World
	w.Class("virt", map[string]string{fleet.AnnDefaultVirtClass: "true"}, clonertest.T0)
	w.Class("k8s", map[string]string{fleet.AnnDefaultClass: "true"}, clonertest.T0)
	ci := fleet.NewClassIndex(w.Scs)
	for ct, want := range map[string]string{"": "virt", "kubevirt": "virt", "archive": "k8s"} {
		if got := ci.ResolveRequested(nil, ct); got.Name != want {
			t.Errorf("content type %q: %+v, want %s", ct, got, want)
		}
	}
}

func TestExplicitEmptyClassIsNotTheDefault(t *testing.T) {
	var w clonertest.World
	w.Class("k8s", map[string]string{fleet.AnnDefaultClass: "true"}, clonertest.T0)
	// CDI looks a class named "" up, finds none and keeps "": Kubernetes
	// then reads the claim as "no class".
	got := fleet.NewClassIndex(w.Scs).ResolveRequested(publish.PtrTo(""), "")
	if got.Name != "" || got.How != fleet.ClassRequested {
		t.Fatalf("got %+v", got)
	}
}

func TestNoDefaultIsUnresolved(t *testing.T) {
	got := fleet.NewClassIndex(nil).ResolveRequested(nil, "")
	if got.Resolved() {
		t.Fatalf("got %+v", got)
	}
}

func TestClaimAndBoundVolumeWinOverDefaults(t *testing.T) {
	var w clonertest.World
	w.Class("k8s", map[string]string{fleet.AnnDefaultClass: "true"}, clonertest.T0)
	ci := fleet.NewClassIndex(w.Scs)
	dv := w.DataVolume("ns", "d", clonertest.Gi, nil)
	pvc, pv := w.Claim(dv, "from-claim", clonertest.Gi, clonertest.Gi, "h")
	pv.Spec.StorageClassName = "bound-with"
	if got := ci.ResolveClass(pvc, pv, nil, ""); got.Name != "bound-with" || got.How != fleet.ClassFromBoundPV {
		t.Fatalf("bound: %+v", got)
	}
	pvc.Status.Phase = corev1.ClaimPending
	if got := ci.ResolveClass(pvc, nil, nil, ""); got.Name != "from-claim" || got.How != fleet.ClassFromClaim {
		t.Fatalf("claim: %+v", got)
	}
	if got := ci.ResolveClass(nil, nil, nil, ""); got.Name != "k8s" {
		t.Fatalf("no claim: %+v", got)
	}
}
