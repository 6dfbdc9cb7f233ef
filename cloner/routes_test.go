package cloner

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// TestPassJudgesADiskReachingAnImageGoldenThroughADataSource runs a real
// pass over informers: a disk with no annotation whose sourceRef names a
// DataSource in another namespace, whose PVC is a vm-default-images golden,
// and a vm-disk naming that golden through source.pvc are judged from the
// tap, predicted, pooled by namespace and by release, and counted under
// their golden; an image golden nothing clones is not shown.
func TestPassJudgesADiskReachingAnImageGoldenThroughADataSource(t *testing.T) {
	w, _ := clonertest.PredictionWorld(t)
	golden := w.DataVolume("cozy-public", "vm-default-images-ubuntu", 6*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	golden.Annotations[fleet.AnnImageName] = "ubuntu"
	clonertest.Succeed(golden, clonertest.T0.Add(-time.Hour))
	_, gpv := w.Claim(golden, clonertest.TestClass, 6*clonertest.Gi, 6*clonertest.Gi, "golden-vol-ubuntu")
	unused := w.DataVolume("cozy-public", "vm-default-images-alpine", 6*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	clonertest.Succeed(unused, clonertest.T0.Add(-time.Hour))
	c := passOverImageGoldenDisks(t, w, golden.Name, gpv.Spec.CSI.VolumeHandle)
	s := c.Snapshot()
	if len(s.Images) != 1 || s.Images[0].Name != golden.Name || s.Images[0].Image != "ubuntu" || s.Images[0].Consumers != 2 {
		t.Errorf("image goldens %+v, want only %s with two consumers", s.Images, golden.Name)
	}
	ref := types.NamespacedName{Namespace: "cozy-public", Name: golden.Name}
	if len(s.ImageDisks) != 1 || s.ImageDisks[0].Golden != ref || s.ImageDisks[0].Verdict != record.VerdictCSIClone || s.ImageDisks[0].Count != 2 {
		t.Errorf("image disks %+v", s.ImageDisks)
	}
}

// The guard's parameters cover every DataVolume of the golden namespace, the
// Talos catalog's and the image goldens alike, also one no disk clones yet:
// the first vm-disk of an image is the one cozystack#2908 leaves hanging.
func TestGuardParametersCoverImageGoldens(t *testing.T) {
	w, talos := clonertest.PredictionWorld(t)
	for _, name := range []string{"vm-default-images-ubuntu", "vm-default-images-alpine"} {
		g := w.DataVolume("cozy-public", name, 6*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
		clonertest.Succeed(g, clonertest.T0.Add(-time.Hour))
		w.Claim(g, clonertest.TestClass, 6*clonertest.Gi, 6*clonertest.Gi, "golden-vol-"+name)
	}
	cfg := clonertest.TestConfig()
	inv := fleet.BuildInventory(w.Objects(t), cfg.GoldenNamespaces())
	data := publish.AdmissionData(verdict.BuildPredictor(clonertest.CsiCloneForced(), inv), "cozy-public", predict.GuardRules{})
	for _, golden := range []string{talos.Name, "vm-default-images-ubuntu", "vm-default-images-alpine"} {
		if got := data[golden+".phase"]; got != "Succeeded" {
			t.Errorf("%s.phase = %q, want Succeeded", golden, got)
		}
		if got := data[golden+".path."+clonertest.TestClass]; got != predict.PathCSIClone+"/"+predict.ReasonCDIOverride {
			t.Errorf("%s.path.%s = %q, want a csi-clone", golden, clonertest.TestClass, got)
		}
	}
}

// A claim of the golden namespace that no DataVolume made (an operator's,
// annotated with its image's name) is a golden once a disk or a DataSource
// names it: a vm-disk naming it through source.pvc and a disk reaching it
// through a DataSource are judged from the tap and counted under it, and
// the guard's parameters carry it; a claim there that nothing names (CDI's
// tmp-pvc) is no golden.
func TestPassJudgesDisksOfAClaimGolden(t *testing.T) {
	w, _ := clonertest.PredictionWorld(t)
	claim := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "cozy-public", Name: "ubuntu-image"}}
	gpvc, gpv := w.Claim(claim, clonertest.TestClass, 6*clonertest.Gi, 6*clonertest.Gi, "golden-vol-ubuntu-image")
	gpvc.Annotations[fleet.AnnImageName] = "ubuntu"
	scratch := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "cozy-public", Name: fleet.CdiTmpPVCPrefix + "0f1e2d"}}
	w.Claim(scratch, clonertest.TestClass, 6*clonertest.Gi, 6*clonertest.Gi, "tmp-vol")
	c := passOverImageGoldenDisks(t, w, claim.Name, gpv.Spec.CSI.VolumeHandle)
	s := c.Snapshot()
	if len(s.Images) != 1 || s.Images[0].Name != claim.Name || s.Images[0].Image != "ubuntu" || s.Images[0].Consumers != 2 {
		t.Errorf("image goldens %+v, want only the claim golden %s (image ubuntu) with two consumers", s.Images, claim.Name)
	}
	inv := fleet.BuildInventory(w.Objects(t), clonertest.TestConfig().GoldenNamespaces())
	data := publish.AdmissionData(verdict.BuildPredictor(clonertest.CsiCloneForced(), inv), "cozy-public", predict.GuardRules{})
	if got := data[claim.Name+".path."+clonertest.TestClass]; got != predict.PathCSIClone+"/"+predict.ReasonCDIOverride {
		t.Errorf("%s.path.%s = %q, want a csi-clone", claim.Name, clonertest.TestClass, got)
	}
	if _, ok := data[scratch.Name+".phase"]; ok || inv.GoldenByRef[types.NamespacedName{Namespace: "cozy-public", Name: scratch.Name}] != nil {
		t.Errorf("CDI's claim %s, which nothing names, is a golden", scratch.Name)
	}
}

// passOverImageGoldenDisks adds two disks of golden cozy-public/<golden>,
// whose volume handle is handle, CSI-cloned as the tap saw them: boot-db
// in tenant-b, reaching it through the DataSource boot-sources/ubuntu, and
// vm-disk-web of release vm-disk-web naming it through source.pvc. It then
// runs one pass over informers once they hold the DataSource, and checks
// that both are clean csi-clones of the golden seen by the tap, as
// predicted, pooled by namespace and by release.
func passOverImageGoldenDisks(t *testing.T, w *clonertest.World, golden, handle string) *Controller {
	t.Helper()
	ns := "boot-sources"
	viaSource := w.DataVolume("tenant-b", "boot-db", 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	viaSource.Spec.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &ns, Name: "ubuntu"}
	vmDisk := w.DataVolume("tenant-b", "vm-disk-web", 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	vmDisk.Labels = map[string]string{fleet.LabelInstance: "vm-disk-web"}
	vmDisk.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "cozy-public", Name: golden}}
	for _, dv := range []*cdiv1.DataVolume{viaSource, vmDisk} {
		w.Cloned(dv, clonertest.TestClass, fleet.CdiCloneTypeCSIClone, 20*clonertest.Gi, clonertest.TapClone(handle, 6*clonertest.Gi, 20*clonertest.Gi))
	}
	fc := newFakeCluster(t, w)
	servePredictionInputs(t, fc)
	ctx := t.Context()
	ds := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
		"metadata": map[string]any{"namespace": ns, "name": "ubuntu"},
		"spec":     map[string]any{"source": map[string]any{"pvc": map[string]any{"namespace": "cozy-public", "name": golden}}}}}
	if _, err := fc.dyn.Resource(fleet.DataSourceGVR).Namespace(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := fc.controller(t, ctx, clonertest.ConfigAt(clonertest.T0.Add(time.Hour)))
	eventually(t, "prediction inputs synced", func() bool { _, _, ok := c.predIn.Load().Inputs(c.predIn.Load().ReadDataSources()); return ok })
	eventually(t, "the DataSource seen", func() bool { return len(c.predIn.Load().ReadDataSources().Claims()) == 1 })
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	for name, pool := range map[string]string{"boot-db": "tenant-b", "vm-disk-web": "vm-disk-web"} {
		rec, err := record.ReadRecord(fc.pvc(t, "tenant-b", name))
		if err != nil || rec == nil {
			t.Fatalf("%s has no verdict: %v", name, err)
		}
		if rec.Verdict != record.VerdictCSIClone || rec.Source != record.SourceCSITap || rec.Predicted != "csi-clone" ||
			rec.Pool != pool || rec.Golden != "cozy-public/"+golden || len(rec.Findings) != 0 {
			t.Errorf("%s: %+v, want a csi-clone of %s from the tap, predicted, in pool %s, without findings", name, rec, golden, pool)
		}
	}
	return c
}

// A claim golden has no import to wait for: a disk of one that never binds
// (its class does not exist) is stuck after --stuck-after, as a disk of any
// source, not "waiting for the golden's import" for ever.
func TestADiskOfAnUnboundClaimGoldenIsStuck(t *testing.T) {
	w, _ := clonertest.PredictionWorld(t)
	unbound := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "cozy-public", Name: "never-bound"}}
	w.Claim(unbound, "no-such-class", 6*clonertest.Gi, 0, "")
	disk := w.DataVolume("tenant-a", "hung", 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	disk.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: unbound.Namespace, Name: unbound.Name}}
	cfg := clonertest.TestConfig()
	recs, _ := w.JudgeAll(t, cfg, disk.CreationTimestamp.Add(cfg.StuckAfter+time.Minute))
	rec := recs["hung"]
	if rec == nil || rec.Verdict != record.VerdictStuck || rec.Golden != "cozy-public/never-bound" {
		t.Fatalf("the disk of an unbound claim golden: %+v, want stuck, of cozy-public/never-bound", rec)
	}
}
