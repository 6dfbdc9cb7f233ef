package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The RBAC test runs the sidecar as production does (deploy/rbac's
// ServiceAccount, leader election on) and drives one short scenario per
// RBAC variant: the roles as shipped, then each with one rule removed.

const (
	rbacTenant   = "tenant-rbac"
	rbacSnapshot = "golden-snap" // a VolumeSnapshot of the golden, cut before the sidecar under test started
	rbacPool     = "kubernetes-rbac"
)

var (
	rbacFlavor         = strings.Repeat("9e", 32)
	rbacOutcomeTimeout = 2 * time.Minute
	rbacStuckAfter     = 10 * time.Second
	// rbacUnbound is the claim of the golden namespace that never binds.
	rbacUnbound = "rbac-unbound"
)

// rbacRule is one rule of the shipped ClusterRole or Role.
type rbacRule struct {
	kind  string // ClusterRole or Role
	index int
	rbacRuleMatch
}

// rbacRuleMatch is what a rule grants.
type rbacRuleMatch struct {
	groups, resources, verbs, names []string
}

func (r rbacRule) String() string {
	s := fmt.Sprintf("%s rule %d: %s %s", r.kind, r.index, strings.Join(r.resources, ","), r.verbs)
	if len(r.names) > 0 {
		s += " of " + strings.Join(r.names, ",")
	}
	return s
}

// grants reports whether the rule allows a request (names: only when the
// request names an object).
func (m rbacRuleMatch) grants(q cluster.Request) bool {
	return slices.Contains(m.groups, q.APIGroup) && slices.Contains(m.resources, q.Resource) && q.Subresource == "" &&
		slices.Contains(m.verbs, q.Verb) && (len(m.names) == 0 || slices.Contains(m.names, q.Name))
}

// shippedRules lists every rule of deploy/rbac's ClusterRole and Role.
func shippedRules(t *testing.T) []rbacRule {
	t.Helper()
	objs, err := cluster.RenderRBAC()
	if err != nil {
		t.Fatal(err)
	}
	var out []rbacRule
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for i, r := range rules {
			m, _ := r.(map[string]any)
			out = append(out, rbacRule{kind: o.GetKind(), index: i, rbacRuleMatch: rbacRuleMatch{
				groups: strs(m["apiGroups"]), resources: strs(m["resources"]), verbs: strs(m["verbs"]), names: strs(m["resourceNames"]),
			}})
		}
	}
	if len(out) == 0 {
		t.Fatal("deploy/rbac renders no rules")
	}
	return out
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// without is an RBAC edit that removes one rule.
func without(r rbacRule) cluster.RBACEdit {
	return func(objs []*unstructured.Unstructured) error {
		for _, o := range objs {
			if o.GetKind() != r.kind {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			if r.index >= len(rules) {
				return fmt.Errorf("%s has %d rules, no rule %d", r.kind, len(rules), r.index)
			}
			return unstructured.SetNestedSlice(o.Object, slices.Delete(rules, r.index, r.index+1), "rules")
		}
		return fmt.Errorf("no %s in deploy/rbac", r.kind)
	}
}

// TestShippedRBACIsExactlyWhatTheSidecarNeeds runs the sidecar with exactly
// deploy/rbac's roles through a ServiceAccount token and leader election on,
// as deployed, and shows both directions of least privilege:
//   - with the roles as shipped, a short scenario reaches every outcome, no
//     request is refused, and every verb granted is used;
//   - with any one rule removed, some outcome is never reached, and
//     kube-apiserver's audit log shows it refusing that rule to the sidecar.
func TestShippedRBACIsExactlyWhatTheSidecarNeeds(t *testing.T) {
	rules := shippedRules(t)
	checkNoLeaks(t)
	// --stuck-after short: the hung disk's events are listed (setUpRBACScenario).
	// The runs' disks stay: the driver's pools get room for all of them
	// (sparse files, bookkeeping only).
	// The scheduler: its words on a pod whose disk never binds.
	c := cluster.Start(t, cluster.Options{Scheduler: true, SidecarArgs: []string{"--resync-period=2s", "--leader-election=true", "--admission-params=true",
		"--stuck-after=" + rbacStuckAfter.String()},
		DriverArgs: []string{"--capacity=replicated=32Ti", "--capacity=fixed=32Ti"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s := setUpRBACScenario(t, ctx, c)

	// The shipped roles, in a fresh process (the snapshot's CreateSnapshot
	// is then known only from its VolumeSnapshotContent).
	restartSidecar(t, ctx, c, nil)
	t0 := time.Now()
	got := s.run(t, ctx, "base", nil)
	if missing := got.missing(); len(missing) > 0 {
		t.Fatalf("with deploy/rbac as shipped, never reached: %s", strings.Join(missing, "; "))
	}
	t.Logf("as shipped: every outcome reached %s after the disks were ready (scenario %s)",
		got.latency.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
	checkEveryGrantUsed(t, c, rules)
	// Once a removed rule has been refused, an outcome still missing after
	// this many verdict passes (--resync-period=2s) counts as never reached.
	s.settle = max(6*time.Second, 6*got.latency)

	for _, r := range rules {
		restartSidecar(t, ctx, c, without(r))
		got := s.run(t, ctx, fmt.Sprintf("%s-%d", strings.ToLower(r.kind), r.index), &r)
		missing := got.missing()
		if len(missing) == 0 {
			t.Errorf("without %s every outcome was still reached: the rule is not needed", r)
			continue
		}
		if got.refused == nil {
			t.Errorf("without %s kube-apiserver refused the sidecar nothing that rule grants", r)
			continue
		}
		t.Logf("without %s: refused %s %s/%s; never reached: %s", r, got.refused.Verb, got.refused.Resource,
			got.refused.Name, strings.Join(missing, "; "))
	}
}

// restartSidecar starts a new sidecar process with the edited roles, from a
// clean slate: no Lease, no ledger and no admission parameters, as on a
// first install, so that the rules that create them are needed.
func restartSidecar(t *testing.T, ctx context.Context, c *cluster.Cluster, edit cluster.RBACEdit) {
	t.Helper()
	if err := c.StopSidecar(); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		c.Client.CoordinationV1().Leases(cluster.NamespaceCSI).Delete(ctx, "csi-clone-sidecar", metav1.DeleteOptions{}),
		c.Client.CoreV1().ConfigMaps(cluster.NamespaceCSI).Delete(ctx, config.DefaultLedgerName, metav1.DeleteOptions{}),
		c.Client.CoreV1().ConfigMaps(cluster.NamespaceCSI).Delete(ctx, publish.AdmissionParamsName, metav1.DeleteOptions{}),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	if err := c.StartSidecar(edit); err != nil {
		t.Fatal(err)
	}
}

// rbacScenario holds what the per-variant runs share.
type rbacScenario struct {
	c            *cluster.Cluster
	golden       string
	goldenHandle string
	settle       time.Duration
}

// setUpRBACScenario imports the golden, cuts a VolumeSnapshot of it, and
// makes the first sidecar count a disk and prune it from its ledger once its
// DataVolume is deleted (the one use of `get datavolumes`).
func setUpRBACScenario(t *testing.T, ctx context.Context, c *cluster.Cluster) *rbacScenario {
	t.Helper()
	s := &rbacScenario{c: c, golden: cluster.GoldenName(rbacFlavor, talosVersion)}
	if _, err := c.CreateGolden(ctx, cluster.Golden{SchematicID: rbacFlavor, Version: talosVersion, StorageClass: "replicated"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, s.golden, cdiv1.Succeeded, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	_, pv, err := c.WaitPVCBound(ctx, cluster.NamespaceGolden, s.golden, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.goldenHandle = pv.Spec.CSI.VolumeHandle
	if err := c.CreateNamespace(ctx, rbacTenant); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SnapshotClaim(ctx, cluster.NamespaceGolden, rbacSnapshot, s.golden, "rbac-snapshots", nil); err != nil {
		t.Fatal(err)
	}

	w := cluster.Worker{Namespace: rbacTenant, Name: "pruned", Golden: s.golden, Pool: rbacPool, StorageClass: "replicated", Size: "20Gi"}
	dv, err := c.CreateWorkerDisk(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	waitLedger(t, ctx, c, "counts "+w.Name, func(counted map[string]json.RawMessage) bool { return counted[string(dv.UID)] != nil })
	if err := c.Dynamic.Resource(cluster.DataVolumeGVR).Namespace(rbacTenant).Delete(ctx, w.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLedger(t, ctx, c, "forgets deleted "+w.Name, func(counted map[string]json.RawMessage) bool { return counted[string(dv.UID)] == nil })
	s.hangDisk(t, ctx)
	return s
}

// hangDisk creates a disk cloned from a claim that never binds, and waits
// until the sidecar, judging it stuck, lists CDI's Warning events on it (the
// one use of `list events`).
func (s *rbacScenario) hangDisk(t *testing.T, ctx context.Context) {
	t.Helper()
	nowhere := "rbac-nowhere" // no such StorageClass: the claim stays Pending
	src := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.NamespaceGolden, Name: rbacUnbound},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &nowhere, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("6Gi")}}},
	}
	if _, err := s.c.Client.CoreV1().PersistentVolumeClaims(src.Namespace).Create(ctx, src, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := cluster.Worker{Namespace: rbacTenant, Name: "hung", Golden: src.Name, Pool: rbacPool, StorageClass: "replicated", Size: "20Gi"}
	if _, err := s.c.CreateWorkerDisk(ctx, w); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		reqs, err := s.c.SidecarRequests()
		return err == nil && slices.ContainsFunc(reqs, func(q cluster.Request) bool {
			return q.Verb == "list" && q.Resource == "events" && q.Code != 403
		}), s.c.Failed()
	})
	if err != nil {
		t.Fatalf("the sidecar never listed the events of the hung disk %s: %v", w.Name, err)
	}
}

// rbacOutcomes is what one run reached.
type rbacOutcomes struct {
	reached map[string]bool
	latency time.Duration    // disks ready -> every outcome reached
	refused *cluster.Request // a refusal of the removed rule, if any
}

// The outcomes of a run, each needing a different part of the roles.
var rbacOutcomeNames = []string{
	"verdict csi-clone on the clone's PVC, from the tap",
	"the tap's evidence on the clone's PV",
	"a ClassMismatch Warning on the other-class disk",
	"the snapshot restore traced to the golden's volume",
	"the clone counted in the ledger",
	"the lease held",
	"the clone paths predicted in the admission parameters",
	"a tenant's restore of the golden VolumeSnapshot judged against it",
	"the scheduler's words on the pod of a disk that never binds",
}

func (o rbacOutcomes) missing() []string {
	var out []string
	for _, n := range rbacOutcomeNames {
		if !o.reached[n] {
			out = append(out, n)
		}
	}
	return out
}

// run creates five disks (a csi-clone on the golden's class, a clone into
// another class of the same size, a restore of the golden's snapshot in its
// namespace, a tenant's restore of it, a disk of the snapshot golden, and a
// disk cloned from the claim that never binds, with its VM's pod) and waits
// for the outcomes. With removed set it waits until the sidecar was
// refused that rule, then s.settle more, and reports what was reached.
func (s *rbacScenario) run(t *testing.T, ctx context.Context, tag string, removed *rbacRule) rbacOutcomes {
	t.Helper()
	before, err := s.c.SidecarRequests()
	if err != nil {
		t.Fatal(err)
	}
	clone := cluster.Worker{Namespace: rbacTenant, Name: tag + "-clone", Golden: s.golden, Pool: rbacPool, StorageClass: "replicated", Size: "20Gi"}
	other := cluster.Worker{Namespace: rbacTenant, Name: tag + "-other", Golden: s.golden, Pool: rbacPool, StorageClass: "replicated-fixed", Size: "6Gi"}
	var cloneDV *cdiv1.DataVolume
	for _, w := range []cluster.Worker{clone, other} {
		dv, err := s.c.CreateWorkerDisk(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		if w.Name == clone.Name {
			cloneDV = dv
		}
	}
	restore := s.createRestore(t, ctx, tag+"-restore")
	// A tenant's disk restoring the golden's VolumeSnapshot, no annotation:
	// a disk of the snapshot golden.
	fromSnapshot := cluster.VMDisk{Namespace: rbacTenant, Name: tag + "-from-snapshot", Snapshot: cluster.NamespaceGolden + "/" + rbacSnapshot,
		StorageClass: "replicated", Size: "20Gi"}
	if _, err := s.c.CreateVMDisk(ctx, fromSnapshot); err != nil {
		t.Fatal(err)
	}
	// A disk cloned from the claim that never binds, and its VM's pod.
	hung := cluster.Worker{Namespace: rbacTenant, Name: tag + "-hung", Golden: rbacUnbound, Pool: rbacPool, StorageClass: "replicated", Size: "20Gi"}
	if _, err := s.c.CreateWorkerDisk(ctx, hung); err != nil {
		t.Fatal(err)
	}
	if err := s.c.CreateConsumer(ctx, rbacTenant, "virt-launcher-"+hung.Name, hung.Name); err != nil {
		t.Fatal(err)
	}
	for _, ref := range [][2]string{{rbacTenant, clone.Name}, {rbacTenant, other.Name}, {cluster.NamespaceGolden, restore}, {rbacTenant, fromSnapshot.Name}} {
		if _, err := s.c.WaitDataVolumePhase(ctx, ref[0], ref[1], cdiv1.Succeeded, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	ready := time.Now()
	out := rbacOutcomes{reached: map[string]bool{}}
	var refusedAt time.Time
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, rbacOutcomeTimeout, true, func(ctx context.Context) (bool, error) {
		if err := s.c.Failed(); err != nil {
			return false, err
		}
		s.check(t, ctx, out.reached, cloneDV, other.Name, restore, fromSnapshot.Name)
		s.checkHeard(ctx, out.reached, hung.Name)
		if len(out.missing()) == 0 {
			out.latency = time.Since(ready)
			return true, nil
		}
		if removed == nil {
			return false, nil
		}
		if out.refused == nil {
			out.refused = refusal(t, s.c, len(before), removed.rbacRuleMatch)
			refusedAt = time.Now()
		}
		return out.refused != nil && time.Since(refusedAt) > s.settle && time.Since(ready) > s.settle, nil
	})
	if err != nil && (removed == nil || out.refused == nil) {
		t.Logf("%s: %v", tag, err)
	}
	return out
}

// createRestore creates a worker disk restored from the golden's snapshot,
// in the golden's namespace (a snapshot is restored where it lives).
func (s *rbacScenario) createRestore(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	block := corev1.PersistentVolumeBlock
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.NamespaceGolden, Name: name,
			Annotations: map[string]string{cluster.AnnGolden: s.golden, cluster.AnnPool: rbacPool}},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: cluster.NamespaceGolden, Name: rbacSnapshot}},
			Storage: &cdiv1.StorageSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, VolumeMode: &block,
				StorageClassName: &[]string{"replicated"}[0],
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}}},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Dynamic.Resource(cluster.DataVolumeGVR).Namespace(cluster.NamespaceGolden).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// check records which outcomes hold now.
func (s *rbacScenario) check(t *testing.T, ctx context.Context, reached map[string]bool, clone *cdiv1.DataVolume, other, restore, fromSnapshot string) {
	t.Helper()
	c := s.c
	if rec := pvcRecord(ctx, c, rbacTenant, clone.Name); rec != nil && rec.Verdict == record.VerdictCSIClone && rec.Source == record.SourceCSITap {
		reached[rbacOutcomeNames[0]] = true
	}
	if pvc, err := c.Client.CoreV1().PersistentVolumeClaims(rbacTenant).Get(ctx, clone.Name, metav1.GetOptions{}); err == nil && pvc.Spec.VolumeName != "" {
		if pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{}); err == nil && pv.Annotations[fleet.AnnCSIEvidence] != "" {
			reached[rbacOutcomeNames[1]] = true
		}
	}
	if evs, err := c.Client.CoreV1().Events(rbacTenant).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "DataVolume" && e.InvolvedObject.Name == other && e.Source.Component == "csi-clone-sidecar" &&
				e.Reason == record.EventReason(record.ReasonClassMismatch) {
				reached[rbacOutcomeNames[2]] = true
			}
		}
	}
	if rec := pvcRecord(ctx, c, cluster.NamespaceGolden, restore); rec != nil && rec.Verdict == record.VerdictSnapshotClone &&
		strings.Contains(rec.Message, "of volume "+s.goldenHandle) {
		reached[rbacOutcomeNames[3]] = true
	}
	if counted, err := ledgerCounted(ctx, c); err == nil && counted[string(clone.UID)] != nil {
		reached[rbacOutcomeNames[4]] = true
	}
	if l, err := c.Client.CoordinationV1().Leases(cluster.NamespaceCSI).Get(ctx, "csi-clone-sidecar", metav1.GetOptions{}); err == nil &&
		l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		reached[rbacOutcomeNames[5]] = true
	}
	// The prediction needs every one of its informers (StorageProfiles, the
	// CDI resource, VolumeSnapshotClasses, CSIDrivers) synced.
	if cm, err := c.Client.CoreV1().ConfigMaps(cluster.NamespaceCSI).Get(ctx, publish.AdmissionParamsName, metav1.GetOptions{}); err == nil &&
		cm.Data[s.golden+".path.replicated"] != "" {
		reached[rbacOutcomeNames[6]] = true
	}
	// Judged against the snapshot golden: predicted from it, no
	// unknown-golden finding (which a disk whose golden is unseen gets).
	if rec := pvcRecord(ctx, c, rbacTenant, fromSnapshot); rec != nil && rec.Verdict == record.VerdictSnapshotClone &&
		rec.Predicted == predict.PathSnapshotClone && len(rec.BadReasons()) == 0 {
		reached[rbacOutcomeNames[7]] = true
	}
}

// checkHeard records whether the stuck disk's verdict quotes the scheduler
// on its pod (the one use of `list pods`).
func (s *rbacScenario) checkHeard(ctx context.Context, reached map[string]bool, hung string) {
	if rec := pvcRecord(ctx, s.c, rbacTenant, hung); rec != nil && rec.Verdict == record.VerdictStuck &&
		strings.Contains(rec.Message, "; the scheduler: FailedScheduling: pod virt-launcher-"+hung+": ") {
		reached[rbacOutcomeNames[8]] = true
	}
}

// pvcRecord reads the verdict record persisted on a PVC, nil if none.
func pvcRecord(ctx context.Context, c *cluster.Cluster, ns, name string) *record.Record {
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || pvc.Annotations[fleet.AnnCloneEvidence] == "" {
		return nil
	}
	var r record.Record
	if json.Unmarshal([]byte(pvc.Annotations[fleet.AnnCloneEvidence]), &r) != nil {
		return nil
	}
	return &r
}

// ledgerCounted reads the ledger's counted DataVolume UIDs, over the root
// and its shards.
func ledgerCounted(ctx context.Context, c *cluster.Cluster) (map[string]json.RawMessage, error) {
	counted := map[string]json.RawMessage{}
	for _, name := range ledger.LedgerObjectNames(config.DefaultLedgerName) {
		cm, err := c.Client.CoreV1().ConfigMaps(cluster.NamespaceCSI).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && name != config.DefaultLedgerName {
			continue
		}
		if err != nil {
			return nil, err
		}
		if raw := cm.Data["counted.json"]; raw != "" {
			if err := json.Unmarshal([]byte(raw), &counted); err != nil {
				return nil, err
			}
		}
	}
	return counted, nil
}

func waitLedger(t *testing.T, ctx context.Context, c *cluster.Cluster, what string, ok func(map[string]json.RawMessage) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Failed(); err != nil {
			return false, err
		}
		counted, err := ledgerCounted(ctx, c)
		return err == nil && ok(counted), nil
	})
	if err != nil {
		t.Fatalf("the ledger never %s: %v", what, err)
	}
}

// refusal returns the first request after the first skip ones that
// kube-apiserver refused and the rule would have granted.
func refusal(t *testing.T, c *cluster.Cluster, skip int, m rbacRuleMatch) *cluster.Request {
	t.Helper()
	reqs, err := c.SidecarRequests()
	if err != nil {
		t.Fatal(err)
	}
	for i := skip; i < len(reqs); i++ {
		if reqs[i].Code == 403 && m.grants(reqs[i]) {
			return &reqs[i]
		}
	}
	return nil
}

// checkEveryGrantUsed: so far (the first sidecar and the shipped-roles run)
// nothing was refused, and every verb of every rule was used at least once.
func checkEveryGrantUsed(t *testing.T, c *cluster.Cluster, rules []rbacRule) {
	t.Helper()
	reqs, err := c.SidecarRequests()
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) == 0 {
		t.Fatal("the audit log holds no request of the sidecar's ServiceAccount: is it running as that account?")
	}
	for _, q := range reqs {
		if q.Code == 403 {
			t.Errorf("with deploy/rbac as shipped the sidecar was refused %s %s %s/%s", q.Verb, q.Resource, q.Namespace, q.Name)
		}
	}
	for _, r := range rules {
		for _, verb := range r.verbs {
			one := r.rbacRuleMatch
			one.verbs = []string{verb}
			if !slices.ContainsFunc(reqs, func(q cluster.Request) bool { return q.Code != 403 && (one.grants(q) || one.grants(asList(q))) }) {
				t.Errorf("%s grants %s, which the sidecar never used", r, verb)
			}
		}
	}
}

// asList counts an informer's streaming list (a watch that sends the
// initial objects, client-go's default against API servers that serve it)
// as the list it replaces: against one that does not, client-go falls back
// to a plain list, so the list verb stays needed.
func asList(q cluster.Request) cluster.Request {
	if q.Verb == "watch" && strings.Contains(q.URI, "sendInitialEvents=true") {
		q.Verb = "list"
	}
	return q
}
