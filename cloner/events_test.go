package cloner

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

func TestEachBadReasonWarnsOnceAcrossResyncsAndRestarts(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	copied := w.Worker("tenant-a", "copied", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	pvc, _ := w.Cloned(copied, clonertest.TestClass, "copy", 20*clonertest.Gi, nil)
	pvc.Annotations[fleet.AnnCDIFallbackReason] = "different volume modes"
	ghost := &cdiv1.DataVolume{}
	ghost.Namespace, ghost.Name = config.DefaultGoldenNamespace, clonertest.GoldenName("abc", "v1.0.0")
	w.Worker("tenant-a", "orphan", "p", ghost, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass)) // no PVC: nothing to persist on
	fc := newFakeCluster(t, &w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	ctx := t.Context()
	for restart := 0; restart < 2; restart++ {
		c := fc.controller(t, ctx, cfg)
		for pass := 0; pass < 3; pass++ {
			if err := c.Pass(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	evs := fc.warnings(t)
	if n := countReason(evs, "copied", "HostAssistedClone"); n != 1 {
		t.Fatalf("%d HostAssistedClone events, want 1", n)
	}
	if n := countReason(evs, "orphan", "UnknownGolden"); n != 1 {
		t.Fatalf("%d UnknownGolden events, want 1", n)
	}
	// Its golden never existed and nothing imports: an hour on, it is stuck.
	if n := countReason(evs, "orphan", "CloneStuck"); n != 1 {
		t.Fatalf("%d CloneStuck events, want 1", n)
	}
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3: %+v", len(evs), evs)
	}
	for _, e := range evs {
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "DataVolume" || !strings.Contains(e.Message, "Fix: ") {
			t.Fatalf("event %+v", e)
		}
	}
	if !strings.Contains(evs[0].Message+evs[1].Message+evs[2].Message, "different volume modes") {
		t.Fatal("the host-assisted warning must carry CDI's fallback reason")
	}
}

func TestNewBadReasonWarnsAgain(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo("fast")) // class mismatch from the start
	w.Claim(dv, "fast", 20*clonertest.Gi, 0, "")
	fc := newFakeCluster(t, &w)
	clk := clonertest.NewClock(clonertest.T0.Add(time.Minute))
	cfg := clonertest.TestConfig()
	cfg.Now = clk.Now
	ctx := t.Context()
	c := fc.controller(t, ctx, cfg)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Set(clonertest.T0.Add(cfg.StuckAfter + time.Minute)) // now it is stuck too
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	evs := fc.warnings(t)
	if countReason(evs, "d", "StorageClassMismatch") != 1 || countReason(evs, "d", "CloneStuck") != 1 {
		t.Fatalf("events %+v", evs)
	}
}

func TestStuckCloneCarriesTheDriverErrorSeenByAnyReplica(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "local-0", "kubernetes-local", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.CSICloneInProgress
	target, _ := w.Claim(dv, clonertest.TestClass, 20*clonertest.Gi, 0, "")
	fc := newFakeCluster(t, &w)
	clk := clonertest.NewClock(clonertest.T0.Add(time.Minute))
	cfg := clonertest.TestConfig()
	cfg.Now = clk.Now
	ctx := t.Context()
	replica := fc.controller(t, ctx, cfg) // not the leader: it only runs RunEvidence
	go func() { _ = replica.RunEvidence(ctx) }()
	for i := 0; i < 3; i++ {
		replica.Observe(sidecar.Observation{Method: sidecar.MethodCreateVolume, Start: clonertest.T0, End: clonertest.T0.Add(time.Duration(i) * time.Second),
			Code: codes.DeadlineExceeded, Message: "context deadline exceeded",
			Request: sidecar.Request{Name: "pvc-tmp9", Parameters: map[string]string{
				fleet.ParamPVCName: "tmp-pvc-" + string(target.UID), fleet.ParamPVCNamespace: "cozy-public"}}})
	}
	// A repeated error is rewritten at most once per driverErrorRefresh:
	// past it, the annotation counts every attempt however the three
	// observations were batched.
	clk.Set(clonertest.T0.Add(time.Minute + fleet.DriverErrorRefresh + time.Second))
	var de fleet.DriverError
	eventually(t, "driver error on the target PVC", func() bool {
		ok, _ := fleet.DecodeAnnotation(fc.pvc(t, "tenant-a", "local-0"), fleet.AnnDriverError, &de)
		return ok && de.Attempts == 3
	})
	if de.Code != "DeadlineExceeded" || de.Claim != "cozy-public/tmp-pvc-"+string(target.UID) {
		t.Fatalf("driver error %+v", de)
	}
	leader := fc.controller(t, ctx, cfg)
	fc.settle(t, leader)
	clk.Set(clonertest.T0.Add(cfg.StuckAfter + time.Second))
	if err := leader.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	r := fc.record(t, "tenant-a", "local-0")
	if r.Verdict != record.VerdictStuck || !strings.Contains(r.Message, "DeadlineExceeded: context deadline exceeded") {
		t.Fatalf("record %+v", r)
	}
	if countReason(fc.warnings(t), "local-0", "CloneStuck") != 1 {
		t.Fatal("no CloneStuck event")
	}
}

func TestMalformedObjectsAreReportedNeverFatal(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	good := w.Worker("tenant-a", "good", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	_, pv := w.Cloned(good, clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	pv.Annotations[fleet.AnnCSIEvidence] = "{not json"
	w.Raw = append(w.Raw, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
		"metadata": map[string]any{"name": "broken", "namespace": "tenant-x", "uid": "broken-uid"},
		"spec":     map[string]any{"source": "oops", "storage": map[string]any{"resources": "lots"}},
	}})
	fc := newFakeCluster(t, &w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	ctx := t.Context()
	c := fc.controller(t, ctx, cfg)
	for i := 0; i < 2; i++ {
		if err := c.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r := fc.record(t, "tenant-a", "good"); r.Verdict != record.VerdictCSIClone || r.Source != record.SourceCDI {
		t.Fatalf("the readable disk must still be judged (from CDI, its evidence being unreadable): %+v", r)
	}
	if n := countReason(fc.warnings(t), "broken", publish.ReasonMalformedObject); n != 1 {
		t.Fatalf("%d MalformedObject events on the broken DataVolume, want 1", n)
	}
	m := c.Snapshot().Malformed
	if m["DataVolume"] != 1 || m["PersistentVolume"] != 1 {
		t.Fatalf("malformed counts %v", m)
	}
}

func TestUnreadableLedgerIsAnErrorNotAReset(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	w.Cloned(w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass)), clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	fc := newFakeCluster(t, &w)
	cfg := clonertest.TestConfig()
	ctx := t.Context()
	bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cfg.LedgerName, Namespace: cfg.LedgerNamespace},
		Data: map[string]string{ledger.LedgerKeyFlavors: "{"}}
	if _, err := fc.kube.CoreV1().ConfigMaps(cfg.LedgerNamespace).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := fc.controller(t, ctx, cfg)
	if err := c.Pass(ctx); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("got %v", err)
	}
	cm, _ := fc.kube.CoreV1().ConfigMaps(cfg.LedgerNamespace).Get(ctx, cfg.LedgerName, metav1.GetOptions{})
	if cm.Data[ledger.LedgerKeyFlavors] != "{" {
		t.Fatal("the unreadable ledger was overwritten")
	}
	if r := fc.record(t, "tenant-a", "d"); r == nil || r.Verdict != record.VerdictCSIClone {
		t.Fatal("verdicts must not wait for the ledger")
	}
}

func TestObserveNeverBlocks(t *testing.T) {
	cfg := clonertest.TestConfig()
	cfg.EvidenceQueue = 1
	c, err := New(cfg, newFakeCluster(t, &clonertest.World{}).clients())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for i := 0; i < 100; i++ {
			c.Observe(sidecar.Observation{Method: sidecar.MethodCreateVolume})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Observe blocked with nobody draining")
	}
	if got := c.Snapshot().EvidenceDropped; got != 99 {
		t.Fatalf("dropped %d, want 99", got)
	}
}

func TestEvidenceFromTwoReplicasMergesOnThePV(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	fc := newFakeCluster(t, &w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Minute))
	ctx := t.Context()
	a, b := fc.controller(t, ctx, cfg), fc.controller(t, ctx, cfg)
	go func() { _ = a.RunEvidence(ctx) }()
	go func() { _ = b.RunEvidence(ctx) }()
	a.Observe(createVolume("pvc-1", "cozy-public/tmp-pvc-u1", "golden-vol", 6*clonertest.Gi, "vol-1", clonertest.T0))
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{VolumeHandle: "vol-1"}}}}
	if _, err := fc.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	read := func() fleet.VolumeEvidence {
		var ev fleet.VolumeEvidence
		got, _ := fc.kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-1", metav1.GetOptions{})
		_, _ = fleet.DecodeAnnotation(got, fleet.AnnCSIEvidence, &ev)
		return ev
	}
	eventually(t, "create evidence", func() bool { ev := read(); return ev.CreateSeen() })
	// After a provisioner/resizer failover the expansion reaches the other replica.
	b.Observe(expandVolume("vol-1", 20*clonertest.Gi, clonertest.T0.Add(10*time.Second)))
	eventually(t, "merged evidence", func() bool { ev := read(); return ev.CreateSeen() && len(ev.Expansions) == 1 })
	if ev := read(); ev.SourceVolume != "golden-vol" || ev.Expansions[0].CapacityBytes != 20*clonertest.Gi {
		t.Fatalf("evidence %+v", ev)
	}
}

// TestWarningWhoseMessageGainsDetailIsNotRepeated: a class mismatch found
// before CDI creates the claim (nothing to persist on yet) and again once the
// claim exists, with the class now read from the claim, is one warning, also
// after a restart.
func TestWarningWhoseMessageGainsDetailIsNotRepeated(t *testing.T) {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo("fast"))
	fc := newFakeCluster(t, &w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Minute))
	ctx := t.Context()
	c := fc.controller(t, ctx, cfg)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	pvc, _ := (&clonertest.World{NextID: 50}).Claim(dv, "fast", 20*clonertest.Gi, 0, "")
	if _, err := fc.kube.CoreV1().PersistentVolumeClaims("tenant-a").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fc.settle(t, c)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fc.controller(t, ctx, cfg).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countReason(fc.warnings(t), "d", "StorageClassMismatch"); n != 1 {
		t.Fatalf("%d StorageClassMismatch events, want 1", n)
	}
	if r := fc.record(t, "tenant-a", "d"); !strings.Contains(r.MessageFor(record.ReasonClassMismatch), "(claim)") {
		t.Fatalf("the persisted message should now name the claim's class: %q", r.MessageFor(record.ReasonClassMismatch))
	}
}
