package cloner

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// event is one Event on an object, as its reporter writes it.
func event(ns, name string, uid types.UID, typ, reason, component, msg string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name + "." + reason + "." + at.Format("150405")},
		InvolvedObject: corev1.ObjectReference{Namespace: ns, Name: name, UID: uid},
		Type:           typ, Reason: reason, Message: msg, Source: corev1.EventSource{Component: component},
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
	}
}

// TestStuckVerdictQuotesCDIsWarningEvents: a clone CDI holds because a pod
// uses the golden, and whose tmp-pvc the provisioner fails. The stuck
// verdict quotes the Warning events on the DataVolume, its claim and its
// tmp-pvc, once each (CDI's copy of a tmp-pvc event is the same event),
// newest first, not Normal events nor the sidecar's own. The events are
// read once, when the disk turns stuck: not for a disk still in time, not
// again on the next pass.
func TestStuckVerdictQuotesCDIsWarningEvents(t *testing.T) {
	var w clonertest.World
	g, dv, target := cloneInProgress(&w, "held")
	tmp, _ := w.TmpClaim(target, nil)
	tmp.Spec.VolumeName, tmp.Status.Phase = "", corev1.ClaimPending
	young := w.Worker("tenant-a", "young", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	young.CreationTimestamp = metav1.NewTime(clonertest.T0.Add(55 * time.Minute))
	fc := newFakeCluster(t, &w)
	ctx := t.Context()
	inUse := "pod cozy-public/reader using PersistentVolumeClaim " + g.Name
	full := "pool replicated has 0 bytes free"
	c, r := passAfterEvents(t, fc, []*corev1.Event{
		event("tenant-a", "held", target.UID, corev1.EventTypeWarning, "CloneSourceInUse", "clone-populator", inUse, clonertest.T0.Add(3*time.Minute)),
		event("tenant-a", "held", target.UID, corev1.EventTypeWarning, "ProvisioningFailed", "clone-populator",
			"["+tmp.Name+"] : "+full, clonertest.T0.Add(2*time.Minute)),
		event(tmp.Namespace, tmp.Name, tmp.UID, corev1.EventTypeWarning, "ProvisioningFailed", "csi-provisioner", full, clonertest.T0.Add(time.Minute)),
		event("tenant-a", "held", target.UID, corev1.EventTypeNormal, "Provisioning", "csi-provisioner", "just so", clonertest.T0.Add(4*time.Minute)),
		event("tenant-a", "held", dv.UID, corev1.EventTypeWarning, "ErrClaimNotValid", "datavolume-pvc-clone-controller", "claim says no", clonertest.T0),
		event("tenant-a", "held", dv.UID, corev1.EventTypeWarning, "CloneStuck", fleet.EventSourceComponent, "ours", clonertest.T0.Add(5*time.Minute)),
	})
	want := "; CDI's Warning events: CloneSourceInUse: " + inUse + "; ProvisioningFailed: " + full + "; ErrClaimNotValid: claim says no"
	if r.Verdict != record.VerdictStuck || !strings.HasSuffix(r.Message, want) {
		t.Fatalf("held: %s %q, want stuck ending %q", r.Verdict, r.Message, want)
	}
	lists := func() int {
		n := 0
		for _, a := range fc.kube.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "events" {
				n++
			}
		}
		return n
	}
	if n := lists(); n != 3 {
		t.Fatalf("%d event lists, want 3 (the stuck disk's DataVolume, claim and tmp-pvc; none for the young disk)", n)
	}
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lists(); n != 3 {
		t.Fatalf("%d event lists after a second pass, want still 3", n)
	}
	if w := countReason(fc.warnings(t), "held", "CloneStuck"); w != 2 {
		t.Fatalf("%d CloneStuck events (ours included), want 2", w)
	}
}

// cloneInProgress is tenant-a/<name>, a worker disk of the test flavor's
// golden (made on the first call) whose csi-clone CDI is making, and its
// claim.
func cloneInProgress(w *clonertest.World, name string) (golden, dv *cdiv1.DataVolume, claim *corev1.PersistentVolumeClaim) {
	if len(w.Scs) == 0 {
		w.Class(clonertest.TestClass, nil, clonertest.T0)
		golden, _ = w.Golden(clonertest.TestSID, clonertest.TestVer)
	} else {
		golden = w.Dvs[0]
	}
	dv = w.Worker("tenant-a", name, "p", golden, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Status.Phase = cdiv1.CSICloneInProgress
	return golden, dv, w.PendingTarget(dv)
}

// passAfterEvents records the events, makes a controller an hour after
// T0 and runs one pass: the record of tenant-a/held after it.
func passAfterEvents(t *testing.T, fc *fakeCluster, events []*corev1.Event) (*Controller, *record.Record) {
	t.Helper()
	ctx := t.Context()
	for _, e := range events {
		if _, err := fc.kube.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := fc.controller(t, ctx, clonertest.ConfigAt(clonertest.T0.Add(time.Hour)))
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	return c, fc.record(t, "tenant-a", "held")
}

// consumer is a pod that mounts claim, as virt-launcher mounts a VM's disk.
func consumer(ns, name, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
	}
}

// TestStuckVerdictQuotesTheSchedulersWords: a VM waits for a disk whose
// claim never binds (cozystack#2908). The stuck verdict quotes, after
// CDI's words, the newest FailedScheduling of the pod that mounts the
// claim, naming the pod; not an older attempt's, nor another pod's, nor
// the pod's other events. The pods of a namespace are listed once a pass,
// and not for a stuck disk whose claim is bound.
func TestStuckVerdictQuotesTheSchedulersWords(t *testing.T) {
	var w clonertest.World
	g, _, target := cloneInProgress(&w, "held")
	_, _, alsoTarget := cloneInProgress(&w, "also-held")
	for _, claim := range []*corev1.PersistentVolumeClaim{target, alsoTarget} {
		claim.Spec.VolumeName, claim.Status.Phase = "", corev1.ClaimPending
	}
	bound := w.Worker("tenant-b", "bound", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	bound.Status.Phase = cdiv1.CSICloneInProgress
	w.Claim(bound, clonertest.TestClass, fleet.RequestedBytes(bound), 20*clonertest.Gi, "vol-bound")
	fc := newFakeCluster(t, &w)
	ctx := t.Context()
	launcher, other := consumer("tenant-a", "virt-launcher-held", target.Name), consumer("tenant-a", "virt-launcher-else", "else")
	for _, p := range []*corev1.Pod{launcher, other, consumer("tenant-b", "virt-launcher-bound", "bound")} {
		if _, err := fc.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	timeout := `running PreBind plugin "VolumeBinding": binding volumes: context deadline exceeded`
	_, r := passAfterEvents(t, fc, []*corev1.Event{
		event("tenant-a", launcher.Name, launcher.UID, corev1.EventTypeWarning, "FailedScheduling", "default-scheduler", timeout, clonertest.T0.Add(20*time.Minute)),
		event("tenant-a", launcher.Name, launcher.UID, corev1.EventTypeWarning, "FailedScheduling", "default-scheduler", "an older attempt", clonertest.T0.Add(10*time.Minute)),
		event("tenant-a", launcher.Name, launcher.UID, corev1.EventTypeNormal, "Scheduled", "default-scheduler", "assigned to node-a", clonertest.T0.Add(21*time.Minute)),
		event("tenant-a", other.Name, other.UID, corev1.EventTypeWarning, "FailedScheduling", "default-scheduler", "another pod's", clonertest.T0.Add(30*time.Minute)),
		event("tenant-a", "held", target.UID, corev1.EventTypeWarning, "ProvisioningFailed", "clone-populator", "no clone into a node-local pool", clonertest.T0.Add(time.Minute)),
	})
	want := "; CDI's Warning events: ProvisioningFailed: no clone into a node-local pool; the scheduler: FailedScheduling: pod virt-launcher-held: " + timeout
	if r.Verdict != record.VerdictStuck || !strings.HasSuffix(r.Message, want) {
		t.Fatalf("held: %s %q, want stuck ending %q", r.Verdict, r.Message, want)
	}
	if r := fc.record(t, "tenant-b", "bound"); r.Verdict != record.VerdictStuck || strings.Contains(r.Message, "the scheduler") {
		t.Fatalf("bound: %s %q, want stuck without the scheduler's words", r.Verdict, r.Message)
	}
	var listed []string
	for _, a := range fc.kube.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
			listed = append(listed, a.GetNamespace())
		}
	}
	if len(listed) != 1 || listed[0] != "tenant-a" {
		t.Errorf("pods listed in %v, want once in tenant-a (two unbound disks there, one bound elsewhere)", listed)
	}
}

// TestClaimConsumersReadsEveryPageOnce: the pods of a namespace are read
// page by page (the API server's continue token followed to the end), by
// the claims they mount, once for every claim asked about in a pass.
func TestClaimConsumersReadsEveryPageOnce(t *testing.T) {
	kube := fake.NewClientset()
	pages := [][]corev1.Pod{
		{*consumer("tenant-a", "p1", "disk-a"), *consumer("tenant-a", "p2", "disk-b")},
		{*consumer("tenant-a", "p3", "disk-a")},
	}
	var lists []metav1.ListOptions
	kube.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		opts := a.(clienttesting.ListActionImpl).ListOptions
		lists = append(lists, opts)
		page, next := 0, "page-1"
		if opts.Continue == next {
			page, next = 1, ""
		}
		return true, &corev1.PodList{ListMeta: metav1.ListMeta{Continue: next}, Items: pages[page]}, nil
	})
	c := &Controller{clients: config.Clients{Kube: kube}}
	consumersOf := c.claimConsumers(t.Context())
	names := func(refs []podRef) (out []string) {
		for _, r := range refs {
			out = append(out, r.name)
		}
		return out
	}
	if got := names(consumersOf("tenant-a", "disk-a")); !slices.Equal(got, []string{"p1", "p3"}) {
		t.Errorf("disk-a: consumers %v, want [p1 p3] (both pages)", got)
	}
	if got := names(consumersOf("tenant-a", "disk-b")); !slices.Equal(got, []string{"p2"}) {
		t.Errorf("disk-b: consumers %v, want [p2]", got)
	}
	if len(lists) != 2 || lists[0].Limit != podListPage || lists[1].Continue != "page-1" {
		t.Errorf("lists %+v, want two pages of %d, the second continuing the first", lists, podListPage)
	}
}
