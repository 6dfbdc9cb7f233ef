package cloner

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// TestCacheKeepsWhatTheClonerReads: the transforms drop managedFields and
// unread spec, and keep every annotation a reader uses and the DataVolume's
// conditions; applying one twice changes nothing (a watch-list's items are
// passed through it twice).
func TestCacheKeepsWhatTheClonerReads(t *testing.T) {
	g, dv, pvc, pv := oneClonedDisk()
	dv.Status.Conditions = append(dv.Status.Conditions, cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeRunning,
		Status: corev1.ConditionFalse, Reason: "Completed", Message: "Clone Complete"})
	managed := []metav1.ManagedFieldsEntry{{Manager: "cdi-controller", Operation: metav1.ManagedFieldsOperationUpdate}}
	for _, m := range []*metav1.ObjectMeta{&dv.ObjectMeta, &pvc.ObjectMeta, &pv.ObjectMeta} {
		m.ManagedFields = managed
		m.Annotations[fleet.AnnLastApplied] = `{"big":"copy"}`
	}
	pvc.Annotations["cdi.kubevirt.io/clonePhase"] = "Succeeded"
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{}}
	pv.Spec.CSI.VolumeAttributes = map[string]string{"linstor": "props"}

	u := clonertest.ToUnstructured(t, dv)
	got := mustTransform(fleet.CacheDataVolume(u)).(*fleet.CachedDataVolume)
	if again := mustTransform(fleet.CacheDataVolume(got)); again != got {
		t.Fatal("transforming a cached DataVolume again changed it")
	}
	if got.ReadErr != "" || got.ManagedFields != nil || got.Annotations[fleet.AnnLastApplied] != "" {
		t.Fatalf("DataVolume kept %v / %v (err %q)", got.ManagedFields, got.Annotations, got.ReadErr)
	}
	if got.Annotations[fleet.AnnPool] != "p" || got.Annotations[fleet.AnnGolden] != g.Name || len(got.Status.Conditions) != 2 ||
		got.Status.Conditions[1].Message != "Clone Complete" || got.Spec.Source.PVC.Name != g.Name || fleet.RequestedBytes(&got.DataVolume) != 20*clonertest.Gi {
		t.Fatalf("DataVolume lost what the cloner reads: %+v", got.DataVolume)
	}
	claim := mustTransform(record.CacheClaim(pvc.DeepCopy())).(*corev1.PersistentVolumeClaim)
	if claim.ManagedFields != nil || claim.Annotations[fleet.AnnLastApplied] != "" || claim.Annotations["cdi.kubevirt.io/clonePhase"] != "Succeeded" ||
		claim.Annotations[fleet.AnnCDICloneType] != "csi-clone" || fleet.ClaimRequest(claim) != 20*clonertest.Gi || claim.Spec.VolumeName != pv.Name {
		t.Fatalf("PVC cached as %+v", claim)
	}
	vol := mustTransform(fleet.CacheVolume(pv.DeepCopy())).(*corev1.PersistentVolume)
	if vol.ManagedFields != nil || vol.Spec.NodeAffinity != nil || vol.Spec.CSI.VolumeAttributes != nil ||
		fleet.CsiHandle(vol) != fleet.CsiHandle(pv) || vol.Annotations[fleet.AnnCSIEvidence] == "" || vol.Spec.ClaimRef.UID != pvc.UID {
		t.Fatalf("PV cached as %+v", vol)
	}
}

// TestUnreadableDataVolumeIsCachedAsItsIdentity: a DataVolume that cannot
// be read is kept with its reason, to be reported, not dropped.
func TestUnreadableDataVolumeIsCachedAsItsIdentity(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
		"metadata": map[string]any{"name": "broken", "namespace": "tenant-x", "uid": "u-1", "resourceVersion": "7"},
		"spec":     "not an object",
	}}
	got := mustTransform(fleet.CacheDataVolume(u)).(*fleet.CachedDataVolume)
	m := fleet.MalformedDataVolume(got)
	if got.ReadErr == "" || m.Name != "broken" || m.UID != "u-1" || m.ResourceVersion != "7" || m.Kind != "DataVolume" {
		t.Fatalf("unreadable DataVolume cached as %+v", m)
	}
}

// TestEveryAnnotationReadIsCached: the cache keeps only readAnnotations, so
// an annotation constant used as a map index anywhere in the cloner must be
// one of them, or a StorageClass's (classes are cached whole). Adding a
// reader of a new annotation without listing it fails here, not silently in
// production.
func TestEveryAnnotationReadIsCached(t *testing.T) {
	kept := map[string]bool{}
	for _, k := range fleet.ReadAnnotations {
		kept[k] = true
	}
	classAnnotations := map[string]bool{"AnnDefaultVirtClass": true, "AnnDefaultClass": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	inPackages, err := filepath.Glob("*/*.go") // the cloner's sub-packages read annotations too
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range inPackages {
		// cdirules and predict read CDI's own objects, which are not cached
		if !strings.HasPrefix(f, "cdirules/") && !strings.HasPrefix(f, "predict/") {
			files = append(files, f)
		}
	}
	values := annotationConstants(t, files)
	used := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			ix, ok := n.(*ast.IndexExpr)
			if !ok {
				return true
			}
			id, ok := ix.Index.(*ast.Ident)
			if sel, qualified := ix.Index.(*ast.SelectorExpr); qualified {
				// a constant of a cloner package; cdirules' name what CDI reads, not the cloner
				pkg, _ := sel.X.(*ast.Ident)
				id, ok = sel.Sel, pkg != nil && pkg.Name != "cdirules"
			}
			if !ok || !strings.HasPrefix(id.Name, "Ann") || classAnnotations[id.Name] {
				return true
			}
			used++
			if v, known := values[id.Name]; !known || !kept[v] {
				t.Errorf("%s: annotation %s is read but not in readAnnotations: the cache drops it", f, id.Name)
			}
			return true
		})
	}
	if used < len(fleet.ReadAnnotations) {
		t.Fatalf("found %d annotation reads, fewer than the %d kept: the scan is broken", used, len(fleet.ReadAnnotations))
	}
}

// annotationConstants maps each Ann* string constant of the package to its value.
func annotationConstants(t *testing.T, files []string) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if lit, ok := valueAt(vs, i).(*ast.BasicLit); ok && strings.HasPrefix(name.Name, "Ann") {
						out[name.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	return out
}

func valueAt(vs *ast.ValueSpec, i int) ast.Expr {
	if i < len(vs.Values) {
		return vs.Values[i]
	}
	return nil
}

// TestUpdatesTheClonerCannotSeeAreSkipped: kube-controller-manager's status
// condition on a PVC, or CDI's progress on a DataVolume, leave the cached
// objects equal but for their resourceVersion, and re-judge nothing; a
// verdict annotation or a capacity change does.
func TestUpdatesTheClonerCannotSeeAreSkipped(t *testing.T) {
	_, dv, pvc, pv := oneClonedDisk()
	pvc.ResourceVersion, pv.ResourceVersion, dv.ResourceVersion = "1", "1", "1"

	kcm := pvc.DeepCopy()
	kcm.ResourceVersion = "2"
	kcm.Status.Conditions = append(kcm.Status.Conditions, corev1.PersistentVolumeClaimCondition{Type: "Unused", Status: corev1.ConditionTrue})
	progress := dv.DeepCopy()
	progress.ResourceVersion, progress.Status.Progress = "2", "57.0%"
	verdict := pvc.DeepCopy()
	verdict.ResourceVersion, verdict.Annotations[fleet.AnnCloneVerdict] = "3", "csi-clone"
	grown := pv.DeepCopy()
	grown.ResourceVersion, grown.Spec.Capacity = "2", corev1.ResourceList{corev1.ResourceStorage: clonertest.Qty(30 * clonertest.Gi)}

	claim := func(p *corev1.PersistentVolumeClaim) any { return mustTransform(record.CacheClaim(p.DeepCopy())) }
	volume := func(p *corev1.PersistentVolume) any { return mustTransform(fleet.CacheVolume(p.DeepCopy())) }
	dataVolume := func(d *cdiv1.DataVolume) any {
		return mustTransform(fleet.CacheDataVolume(clonertest.ToUnstructured(t, d)))
	}
	for name, c := range map[string]struct {
		old, cur any
		same     bool
	}{
		"PVC status condition": {claim(pvc), claim(kcm), true},
		"DataVolume progress":  {dataVolume(dv), dataVolume(progress), true},
		"PVC verdict":          {claim(pvc), claim(verdict), false},
		"PV capacity":          {volume(pv), volume(grown), false},
		"PV unchanged":         {volume(pv), volume(pv), true},
	} {
		if got := fleet.SameButVersion(c.old, c.cur); got != c.same {
			t.Errorf("%s: sameButVersion = %v, want %v", name, got, c.same)
		}
	}
}

// oneClonedDisk is a golden and one worker disk CSI-cloned from it.
func oneClonedDisk() (*cdiv1.DataVolume, *cdiv1.DataVolume, *corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d1", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	pvc, pv := w.Cloned(dv, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, clonertest.TapClone("golden-vol", 6*clonertest.Gi, 20*clonertest.Gi))
	return g, dv, pvc, pv
}
