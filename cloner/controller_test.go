package cloner

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/cloner/schedule"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

func (fc *fakeCluster) putDV(t *testing.T, dv *cdiv1.DataVolume) {
	t.Helper()
	if _, err := fc.dyn.Resource(fleet.DataVolumeGVR).Namespace(dv.Namespace).Update(context.Background(), clonertest.ToUnstructured(t, dv), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (fc *fakeCluster) putPVC(t *testing.T, pvc *corev1.PersistentVolumeClaim) {
	t.Helper()
	if _, err := fc.kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Update(context.Background(), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createVolume(name, claim, src string, size int64, volID string, at time.Time) sidecar.Observation {
	ns, n, _ := strings.Cut(claim, "/")
	return sidecar.Observation{Method: sidecar.MethodCreateVolume, Start: at, End: at.Add(time.Second), Code: codes.OK,
		Request: sidecar.Request{Name: name, RequiredBytes: size, SourceVolumeID: src, Block: true,
			Parameters: map[string]string{fleet.ParamPVCName: n, fleet.ParamPVCNamespace: ns, "password": "hunter2"}},
		Response: sidecar.Response{VolumeID: volID, CapacityBytes: size}}
}

func expandVolume(volID string, size int64, at time.Time) sidecar.Observation {
	return sidecar.Observation{Method: sidecar.MethodControllerExpandVolume, Start: at, End: at.Add(time.Second), Code: codes.OK,
		Request: sidecar.Request{VolumeID: volID, RequiredBytes: size}, Response: sidecar.Response{CapacityBytes: size}}
}

// TestPipelineCSICloneWithResize drives one clone as CDI and the
// provisioner shape it: the tap's calls become PV evidence, the leader's
// pass a csi-clone verdict, one fetch avoided, no warning; a restarted
// controller changes nothing.
func TestPipelineCSICloneWithResize(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "md0-0", "kubernetes-md0", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.CSICloneInProgress
	target, _ := w.Claim(dv, clonertest.TestClass, 20*clonertest.Gi, 0, "")
	fc := newFakeCluster(t, &w)
	clk := clonertest.NewClock(clonertest.T0.Add(2 * time.Minute))
	cfg := clonertest.TestConfig()
	cfg.Now = clk.Now
	ctx, cancel := context.WithCancel(context.Background())
	c := fc.controller(t, ctx, cfg)
	go func() { _ = c.RunEvidence(ctx) }()

	// The provisioner serves CDI's tmp-pvc-<target uid>; the PV appears after.
	c.Observe(createVolume("pvc-tmp1", "cozy-public/tmp-pvc-"+string(target.UID), gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, "vol-w0", clonertest.T0))
	c.Observe(expandVolume("vol-w0", 20*clonertest.Gi, clonertest.T0.Add(3*time.Second)))
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-tmp1"}, Spec: corev1.PersistentVolumeSpec{
		StorageClassName: clonertest.TestClass, Capacity: corev1.ResourceList{corev1.ResourceStorage: clonertest.Qty(20 * clonertest.Gi)},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{VolumeHandle: "vol-w0"}},
		ClaimRef:               &corev1.ObjectReference{Namespace: "cozy-public", Name: "tmp-pvc-" + string(target.UID)}}}
	if _, err := fc.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ev fleet.VolumeEvidence
	eventually(t, "evidence on the PV", func() bool {
		got, err := fc.kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-tmp1", metav1.GetOptions{})
		ok, _ := fleet.DecodeAnnotation(got, fleet.AnnCSIEvidence, &ev)
		return err == nil && ok && len(ev.Expansions) == 1 && ev.CreateSeen()
	})
	if ev.SourceVolume != gpv.Spec.CSI.VolumeHandle || ev.Claim != "cozy-public/tmp-pvc-"+string(target.UID) {
		t.Fatalf("evidence %+v", ev)
	}

	// CDI rebinds the PV to the target and finishes.
	target.Spec.VolumeName, target.Status.Phase = "pvc-tmp1", corev1.ClaimBound
	target.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: clonertest.Qty(20 * clonertest.Gi)}
	target.Annotations[fleet.AnnCDICloneType] = "csi-clone"
	fc.putPVC(t, target)
	clonertest.Succeed(dv, clonertest.T0.Add(time.Minute))
	fc.putDV(t, dv)
	fc.settle(t, c)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	r := fc.record(t, "tenant-a", "md0-0")
	if r.Verdict != record.VerdictCSIClone || r.Source != record.SourceCSITap || len(r.BadReasons()) != 0 {
		t.Fatalf("record %+v", r)
	}
	if v := fc.pvc(t, "tenant-a", "md0-0").Annotations[fleet.AnnCloneVerdict]; v != record.VerdictCSIClone {
		t.Fatalf("verdict annotation %q", v)
	}
	assertTotals(t, fc.ledger(t, cfg), ledger.FlavorTotals{FetchesAvoided: 1, GoldenImports: 1, BytesAvoided: 6 * clonertest.Gi})
	if d := fc.ledger(t, cfg).Durations[record.VerdictCSIClone]; d == nil || d.Count != 1 || d.Sum != 60 {
		t.Fatalf("duration %+v, want one observation of 60s (first CreateVolume at t0 to the DataVolume ready at t0+1m)", d)
	}
	if n := len(fc.warnings(t)); n != 0 {
		t.Fatalf("%d warnings for a good clone", n)
	}
	if strings.Contains(fc.everything(t), "hunter2") {
		t.Fatal("a CreateVolume parameter reached the cluster")
	}

	// SIGKILL and restart: nothing in memory survives, nothing changes.
	cancel()
	before := fc.pvc(t, "tenant-a", "md0-0").Annotations[fleet.AnnCloneEvidence]
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	c2 := fc.controller(t, ctx2, cfg)
	for i := 0; i < 2; i++ {
		if err := c2.Pass(ctx2); err != nil {
			t.Fatal(err)
		}
	}
	assertTotals(t, fc.ledger(t, cfg), ledger.FlavorTotals{FetchesAvoided: 1, GoldenImports: 1, BytesAvoided: 6 * clonertest.Gi})
	if after := fc.pvc(t, "tenant-a", "md0-0").Annotations[fleet.AnnCloneEvidence]; after != before {
		t.Fatalf("restart rewrote the record:\n%s\n%s", before, after)
	}
	if s := c2.Snapshot(); !s.Leader || len(s.Flavors) != 1 || s.Flavors[0].FetchesAvoided != 1 {
		t.Fatalf("snapshot %+v", s)
	}
}

func assertTotals(t *testing.T, l *ledger.Ledger, want ledger.FlavorTotals) {
	t.Helper()
	got := l.Flavors[fleet.Flavor{SchematicID: clonertest.TestSID, Version: clonertest.TestVer}.Key()]
	if got == nil || *got != want {
		t.Fatalf("ledger totals %+v, want %+v", got, want)
	}
}

// TestLedgerCountsOnceAcrossReplicasRacesRestartsAndDeletes: the counters
// equal a single clean run whatever happens to the leaders.
func TestLedgerCountsOnceAcrossReplicasRacesRestartsAndDeletes(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	for _, n := range []string{"d1", "d2", "d3"} {
		w.Cloned(w.Worker("tenant-a", n, "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass)), clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	}
	web := w.DataVolume("tenant-b", "http-0", 20*clonertest.Gi, nil)
	web.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://f/image/" + clonertest.TestSID + "/" + clonertest.TestVer + "/a.raw.xz"}}
	clonertest.Succeed(web, clonertest.T0)
	web.Status.RestartCount = 2 // three fetches
	late := w.Worker("tenant-a", "d4", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	fc := newFakeCluster(t, &w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	ctx := t.Context()
	a, b := fc.controller(t, ctx, cfg), fc.controller(t, ctx, cfg)
	for _, c := range []*Controller{a, b, a} { // two leaders overlapping
		if err := c.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	assertTotals(t, fc.ledger(t, cfg), ledger.FlavorTotals{FetchesAvoided: 3, GoldenImports: 1, WorkerImports: 3, BytesAvoided: 18 * clonertest.Gi})

	// d4 finishes; the other leader writes the same count first, so this
	// leader's write conflicts and must re-read instead of adding again.
	pvc, _ := w.Cloned(late, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	if _, err := fc.kube.CoreV1().PersistentVolumeClaims("tenant-a").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.kube.CoreV1().PersistentVolumes().Create(ctx, w.Pvs[len(w.Pvs)-1], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fc.putDV(t, late)
	fc.settle(t, a)
	raced := injectRacingLedgerWrite(fc)
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if !raced.Load() {
		t.Fatal("the race was not exercised")
	}
	want := ledger.FlavorTotals{FetchesAvoided: 4, GoldenImports: 1, WorkerImports: 3, BytesAvoided: 24 * clonertest.Gi}
	assertTotals(t, fc.ledger(t, cfg), want)

	// A restarted controller and a deleted disk change no total.
	if err := fc.dyn.Resource(fleet.DataVolumeGVR).Namespace("tenant-a").Delete(ctx, "d1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c := fc.controller(t, ctx, cfg)
	fc.settle(t, c)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	l := fc.ledger(t, cfg)
	assertTotals(t, l, want)
	if _, ok := l.Counted[string(w.Dvs[1].UID)]; ok {
		t.Fatal("the deleted disk's UID was not pruned")
	}
	if len(l.Counted) != 5 { // golden, d2, d3, d4, http-0
		t.Fatalf("counted %d UIDs, want 5", len(l.Counted))
	}
}

// injectRacingLedgerWrite makes the next ledger write lose a race: another
// leader stores the very same counts first (an update conflicts, a create
// finds the object already there).
func injectRacingLedgerWrite(fc *fakeCluster) *atomic.Bool {
	var done atomic.Bool
	race := func(a clienttesting.Action) (bool, runtime.Object, error) {
		if done.Swap(true) {
			return false, nil, nil
		}
		obj := a.(interface{ GetObject() runtime.Object }).GetObject().DeepCopyObject().(*corev1.ConfigMap)
		obj.ResourceVersion = "99999"
		gr := a.GetResource().GroupResource()
		if a.GetVerb() == "create" {
			if err := fc.kube.Tracker().Create(a.GetResource(), obj, obj.Namespace); err != nil {
				return true, nil, err
			}
			return true, nil, apierrors.NewAlreadyExists(gr, obj.Name)
		}
		if err := fc.kube.Tracker().Update(a.GetResource(), obj, obj.Namespace); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(gr, obj.Name, nil)
	}
	fc.react("update", "configmaps", race)
	fc.react("create", "configmaps", race)
	return &done
}

// TestDriverErrorIsRemovedWhenARetrySucceeds: a replica wrote the driver's
// error on the disk's claim; the provisioner's retry then succeeds (seen by
// another replica, which never saw the error): the error leaves the claim.
func TestDriverErrorIsRemovedWhenARetrySucceeds(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "retry", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	target := w.PendingTarget(dv)
	claim := "cozy-public/tmp-pvc-" + string(target.UID)
	target.Annotations[fleet.AnnDriverError] = record.MustJSON(fleet.DriverError{Method: "CreateVolume", Code: "ResourceExhausted",
		Message: "pool full", Claim: claim, First: clonertest.T0, Last: clonertest.T0})
	fc := newFakeCluster(t, &w)
	ctx := t.Context()
	c := fc.controller(t, ctx, clonertest.ConfigAt(clonertest.T0.Add(time.Minute)))
	go func() { _ = c.RunEvidence(ctx) }()
	c.Observe(createVolume("pvc-tmp", claim, gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, "vol-r", clonertest.T0.Add(30*time.Second)))
	eventually(t, "the void driver error removed from the claim", func() bool {
		_, has := fc.pvc(t, "tenant-a", "retry").Annotations[fleet.AnnDriverError]
		return !has
	})
}

func TestUntrustedGoldenIsNotAFlavorAnywhere(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden("ABC", "1.2")
	w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	recs, ev := w.JudgeAll(t, clonertest.TestConfig(), clonertest.T0.Add(time.Hour))
	r := recs["d"]
	if r.SchematicID != "" || r.Version != "" || !clonertest.ReasonsOf(r)[record.ReasonInvalidGolden] || r.Golden != config.DefaultGoldenNamespace+"/"+g.Name {
		t.Fatalf("record %+v: the disk must name the golden but carry no flavor", r)
	}
	c := &Controller{cfg: clonertest.TestConfig(), due: schedule.New(passChunk)}
	c.remember(nil, ev)
	if s := c.buildSnapshot(ev.Inv, ledger.NewLedger()); len(s.Goldens) != 0 || len(s.Disks) != 1 || !s.Disks[0].Flavor.IsZero() {
		t.Fatalf("snapshot goldens %+v disks %+v: an untrusted golden is not a flavor", s.Goldens, s.Disks)
	}
	if fl := report.ReportFlavors(ev.Inv, ledger.NewLedger()); len(fl) != 0 {
		t.Fatalf("report flavor rows %+v", fl)
	}
	u := report.ReportUntrusted(ev.Inv)
	if len(u) != 1 || u[0].Name != g.Name || strings.Join(u[0].Consumers, ",") != "tenant-a/d" || len(u[0].Problems) != 2 {
		t.Fatalf("untrusted %+v, want the golden with its consumer named", u)
	}
}
