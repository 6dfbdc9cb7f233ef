package cloner

import (
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	corev1 "k8s.io/api/core/v1"
)

func TestSeveralDefaultsNewestWinsTiesByName(t *testing.T) {
	var w world
	w.class("old", map[string]string{fleet.AnnDefaultClass: "true"}, t0)
	w.class("zeta", map[string]string{fleet.AnnDefaultClass: "true"}, t0.Add(time.Hour))
	w.class("alpha", map[string]string{fleet.AnnDefaultClass: "true"}, t0.Add(time.Hour))
	w.class("not-default", map[string]string{fleet.AnnDefaultClass: "false"}, t0.Add(2*time.Hour))
	ci := fleet.NewClassIndex(w.scs)
	if got := ci.ResolveRequested(nil, "kubevirt"); got.Name != "alpha" || got.How != fleet.ClassK8sDefault {
		t.Fatalf("got %+v, want alpha (newest, then name ascending)", got)
	}
}

func TestVirtDefaultOnlyForKubevirtContent(t *testing.T) {
	var w world
	w.class("virt", map[string]string{fleet.AnnDefaultVirtClass: "true"}, t0)
	w.class("k8s", map[string]string{fleet.AnnDefaultClass: "true"}, t0)
	ci := fleet.NewClassIndex(w.scs)
	for ct, want := range map[string]string{"": "virt", "kubevirt": "virt", "archive": "k8s"} {
		if got := ci.ResolveRequested(nil, ct); got.Name != want {
			t.Errorf("content type %q: %+v, want %s", ct, got, want)
		}
	}
}

func TestExplicitEmptyClassIsNotTheDefault(t *testing.T) {
	var w world
	w.class("k8s", map[string]string{fleet.AnnDefaultClass: "true"}, t0)
	// CDI looks a class named "" up, finds none and keeps "": Kubernetes
	// then reads the claim as "no class".
	got := fleet.NewClassIndex(w.scs).ResolveRequested(publish.PtrTo(""), "")
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
	var w world
	w.class("k8s", map[string]string{fleet.AnnDefaultClass: "true"}, t0)
	ci := fleet.NewClassIndex(w.scs)
	dv := w.dataVolume("ns", "d", gi, nil)
	pvc, pv := w.claim(dv, "from-claim", gi, gi, "h")
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
