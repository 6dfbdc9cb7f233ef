package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

func TestMain(m *testing.M) { Main(m) }

// controlPlaneOnly starts etcd, kube-apiserver, kube-controller-manager and
// the pod emulator: enough to check what the emulator writes is accepted by
// a real API server and reads as a kubelet's report would.
func controlPlaneOnly(t *testing.T) *Cluster {
	t.Helper()
	c := &Cluster{opts: withDefaults(Options{Logf: t.Logf}), procs: map[string]*proc{}, logf: t.Logf}
	if err := c.makeDir(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(t.Failed()); err != nil {
			t.Error(err)
		}
	})
	c.Factory = newFactory()
	c.onStop(func() error { c.Factory.Close(); return nil })
	if err := c.startControlPlane(); err != nil {
		t.Fatal(err)
	}
	if err := c.startEmulator(); err != nil {
		t.Fatal(err)
	}
	return c
}

// importerPod is shaped like the pod cdi-controller creates for an HTTP import.
func importerPod(name, url string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{cdiRoleLabel: podRoleImporter}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers: []corev1.Container{{
				Name: "importer", Image: "e2e.invalid/cdi-importer",
				Env: []corev1.EnvVar{{Name: "IMPORTER_SOURCE", Value: "http"}, {Name: "IMPORTER_ENDPOINT", Value: url}},
			}},
		},
	}
}

func TestEmulatorImporter(t *testing.T) {
	c := controlPlaneOnly(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CreateNamespace(ctx, "imports"); err != nil {
		t.Fatal(err)
	}
	pods := c.Client.CoreV1().Pods("imports")
	c.Factory.Fail("bad", "v1.0.0", 404)
	for name, url := range map[string]string{"good": c.Factory.URL("good", "v1.0.0"), "bad": c.Factory.URL("bad", "v1.0.0")} {
		if _, err := pods.Create(ctx, importerPod(name, url), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var good, bad *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if good, err = pods.Get(ctx, "good", metav1.GetOptions{}); err != nil {
			return false, err
		}
		if bad, err = pods.Get(ctx, "bad", metav1.GetOptions{}); err != nil {
			return false, err
		}
		return good.Status.Phase == corev1.PodSucceeded && len(bad.Status.ContainerStatuses) > 0 &&
			bad.Status.ContainerStatuses[0].RestartCount >= 1, nil
	})
	if err != nil {
		t.Fatalf("importer pods not reported: %v (good %+v, bad %+v)", err, good.Status, bad.Status)
	}
	term := good.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 0 || !strings.Contains(term.Message, `"message":"Import Complete"`) {
		t.Errorf("good import: terminated %+v, want exit 0 with CDI's JSON \"Import Complete\"", term)
	}
	last := bad.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if bad.Status.ContainerStatuses[0].State.Terminated != nil {
		last = bad.Status.ContainerStatuses[0].State.Terminated
	}
	if last == nil || last.ExitCode != 1 || !strings.Contains(last.Message, "expected status code 200, got 404") {
		t.Errorf("bad import: terminated %+v, want exit 1 with the 404", last)
	}
	if bad.Status.Phase != corev1.PodRunning {
		t.Errorf("bad import: phase %s, want Running (restartPolicy OnFailure restarts it)", bad.Status.Phase)
	}
	if n := c.Factory.Fetches("good", "v1.0.0"); n != 1 {
		t.Errorf("good image fetched %d times, want 1", n)
	}
}

// waitHeld waits until three emulator ticks saw the pod and left it as it
// was: then a check that it is still Pending means the emulator held it,
// not that it has not looked yet.
func waitHeld(ctx context.Context, t *testing.T, c *Cluster, p *corev1.Pod) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return c.emu.heldTicks(p.UID) >= 3, nil
	})
	if err != nil {
		t.Fatalf("%s/%s: the emulator did not hold it for three ticks: %v", p.Namespace, p.Name, err)
	}
}

// A pod whose PVC is not Bound stays Pending, as no kubelet would start it;
// once the binder binds the claim, the prep pod is reported Succeeded.
func TestEmulatorWaitsForBoundClaims(t *testing.T) {
	c := controlPlaneOnly(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CreateNamespace(ctx, "prep"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("prep").Create(ctx, testClaim("data", "", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := c.Client.CoreV1().Pods("prep")
	created, err := pods.Create(ctx, prepPod("prep-x", "data"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitHeld(ctx, t, c, created)
	if got, err := pods.Get(ctx, "prep-x", metav1.GetOptions{}); err != nil || got.Status.Phase != corev1.PodPending {
		t.Fatalf("prep pod with an unbound claim: %v, phase %q; want Pending", err, got.Status.Phase)
	}
	if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, staticPV("static", "prep", "data", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitPodPhase(ctx, c, "prep", "prep-x", corev1.PodSucceeded); err != nil {
		t.Fatalf("prep pod not Succeeded after its claim bound: %v", err)
	}
}

// A prep pod whose claim asks for more than it has stays Pending while the
// resize is csi-resizer's to do, and succeeds once the claim's capacity
// shows it done: one prep pod per resize, not one per emulator tick (which
// kept the claim's status changing faster than csi-resizer could patch it).
func TestEmulatorPrepWaitsForResize(t *testing.T) {
	c := controlPlaneOnly(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CreateNamespace(ctx, "grow"); err != nil {
		t.Fatal(err)
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "growable"},
		Provisioner: "kubernetes.io/no-provisioner", AllowVolumeExpansion: ptr(true)}
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claims := c.Client.CoreV1().PersistentVolumeClaims("grow")
	if _, err := claims.Create(ctx, testClaim("data", "growable", "grow-static"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, staticPV("grow-static", "grow", "data", "growable"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := claims.Get(ctx, "data", metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.ClaimBound, err
	})
	if err != nil {
		t.Fatalf("claim not bound: %v", err)
	}
	// What cdi-controller does before its prep pod: raise the request.
	_, err = claims.Patch(ctx, "data", types.MergePatchType,
		[]byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := c.Client.CoreV1().Pods("grow")
	created, err := pods.Create(ctx, prepPod("prep-grow", "data"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitHeld(ctx, t, c, created)
	if got, err := pods.Get(ctx, "prep-grow", metav1.GetOptions{}); err != nil || got.Status.Phase != corev1.PodPending {
		t.Fatalf("prep pod while its claim's resize is under way: %v, phase %q; want Pending", err, got.Status.Phase)
	}
	// What csi-resizer writes when ControllerExpandVolume needs no node step.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := claims.Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resourceMust("2Gi")}
		_, err = claims.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitPodPhase(ctx, c, "grow", "prep-grow", corev1.PodSucceeded); err != nil {
		t.Fatalf("prep pod not Succeeded once its claim's resize ended: %v", err)
	}
}

// testClaim is a 1Gi claim of class, for volume if not empty.
func testClaim(name, class, volume string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr(class),
			VolumeName:       volume,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resourceMust("1Gi")}},
		},
	}
}

// prepPod is shaped like cdi-controller's prep pod for claim.
func prepPod(name, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{cdiRoleLabel: podRolePrep}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers:    []corev1.Container{{Name: "dummy", Image: "e2e.invalid/cdi-importer"}},
			Volumes: []corev1.Volume{{Name: "cdi-data-vol", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
}

// staticPV is a 1Gi volume pre-bound to ns/claim.
func staticPV(name, ns, claim, class string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resourceMust("1Gi")},
			ClaimRef:         &corev1.ObjectReference{Namespace: ns, Name: claim},
			StorageClassName: class,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent-e2e"}},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		},
	}
}

func waitPodPhase(ctx context.Context, c *Cluster, ns, name string, phase corev1.PodPhase) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == phase, err
	})
}

func resourceMust(s string) resource.Quantity { return resource.MustParse(s) }
