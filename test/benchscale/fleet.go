package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	clonerfleet "github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The synthetic fleet: what CDI v1.65 and the tap leave behind after every
// clone finished. Goldens in cozy-public imported over HTTP; each worker
// disk a DataVolume that cloned one, its bound PVC carrying CDI's
// annotations, labels and owner reference, and its PV carrying the
// provisioner's annotations, LINSTOR-like node affinity and volume
// attributes, and the tap's evidence. Every object is created with the
// field manager of the component that writes it, so managedFields are as
// large as on a real cluster. Every badEvery-th disk was copied
// host-assisted (a bad verdict, with its Warning event).

const (
	driver     = cluster.DefaultDriverName
	class      = "replicated"
	goldenSize = 6 << 30
	diskSize   = 20 << 30
)

type fleet struct {
	c                     *cluster.Cluster
	kube                  kubernetes.Interface
	dyn                   dynamic.Interface
	disks, goldens, nsN   int
	badEvery              int
	goldenHandles         []string
	goldenNames           []string
	bad                   map[string]bool // ns/name of the disks that must get a bad verdict
	created               time.Time
	createMu              sync.Mutex
	createdObjects, errsN int
}

func flavorOf(i int) (sid, ver string) {
	return fmt.Sprintf("%064x", 0xabc000+i), fmt.Sprintf("v1.%d.%d", 10+i%3, i)
}

// build creates the goldens, the namespaces and the disks, with `parallel`
// writers.
func (f *fleet) build(ctx context.Context, parallel int) error {
	f.bad = map[string]bool{}
	if err := f.cdiSettings(ctx); err != nil {
		return err
	}
	for i := range f.goldens {
		sid, ver := flavorOf(i)
		name := cluster.GoldenName(sid, ver)
		handle := "pvc-golden-" + fmt.Sprint(i)
		f.goldenNames, f.goldenHandles = append(f.goldenNames, name), append(f.goldenHandles, handle)
		dv := dataVolume(cluster.NamespaceGolden, name, goldenSize)
		dv.Annotations[clonerfleet.AnnSchematicID], dv.Annotations[clonerfleet.AnnTalosVersion] = sid, ver
		dv.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://factory.talos.dev/image/" + sid + "/" + ver + "/openstack-amd64.raw.xz"}}
		if err := f.disk(ctx, dv, handle, nil, ""); err != nil {
			return err
		}
	}
	for i := range f.nsN {
		if err := f.c.CreateNamespace(ctx, nsName(i)); err != nil {
			return err
		}
	}
	return inParallel(ctx, f.disks, parallel, func(i int) error { return f.worker(ctx, i) })
}

// inParallel runs do(0..n-1) on `parallel` goroutines and returns the first
// error, after which no new index starts.
func inParallel(ctx context.Context, n, parallel int, do func(i int) error) error {
	work := make(chan int)
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		case <-ctx.Done():
			close(work)
			wg.Wait()
			return ctx.Err()
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// cdiSettings creates what a running CDI keeps and the clone-path
// prediction reads: the one CDI resource (no override) and the class's
// StorageProfile, whose status says csi-clone as CDI records it for a driver
// that clones. Without them every disk would be predicted otherwise than it
// was cloned (and carry prediction-wrong), which no real fleet shows.
func (f *fleet) cdiSettings(ctx context.Context) error {
	cdi := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI",
		"metadata": map[string]any{"name": "cdi"}, "spec": map[string]any{}}}
	if _, err := f.dyn.Resource(cluster.CDIGVR).Create(ctx, cdi, metav1.CreateOptions{FieldManager: "cdi-operator"}); err != nil {
		return fmt.Errorf("CDI resource: %w", err)
	}
	sp := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "StorageProfile",
		"metadata": map[string]any{"name": class}, "spec": map[string]any{}}}
	res := f.dyn.Resource(cluster.StorageProfileGVR)
	got, err := res.Create(ctx, sp, metav1.CreateOptions{FieldManager: "cdi-controller"})
	if err == nil {
		got.Object["status"] = map[string]any{"storageClass": class, "provisioner": driver, "cloneStrategy": "csi-clone"}
		_, err = res.UpdateStatus(ctx, got, metav1.UpdateOptions{FieldManager: "cdi-controller"})
	}
	if err != nil {
		return fmt.Errorf("StorageProfile %s: %w", class, err)
	}
	return nil
}

func nsName(i int) string { return fmt.Sprintf("tenant-%03d", i) }

func (f *fleet) worker(ctx context.Context, i int) error {
	ns := nsName(i % f.nsN)
	g := i % f.goldens
	name := fmt.Sprintf("kubernetes-md%d-%05d-system", i%3, i)
	dv := dataVolume(ns, name, diskSize)
	dv.Annotations[clonerfleet.AnnGolden], dv.Annotations[clonerfleet.AnnPool] = f.goldenNames[g], fmt.Sprintf("kubernetes-%s-md%d", ns, i%3)
	dv.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: cluster.NamespaceGolden, Name: f.goldenNames[g]}}
	handle := fmt.Sprintf("pvc-%08x-0000-4000-8000-%012x", i, i)
	ev := &clonerfleet.VolumeEvidence{Name: "pvc-tmp-" + fmt.Sprint(i), Claim: cluster.NamespaceGolden + "/tmp-pvc-" + fmt.Sprint(i),
		FirstAttempt: f.created, Created: f.created.Add(2 * time.Second), Attempts: 1, RequiredBytes: goldenSize,
		CapacityBytes: goldenSize, SourceVolume: f.goldenHandles[g], Block: true,
		Expansions: []clonerfleet.Expansion{{At: f.created.Add(5 * time.Second), RequiredBytes: diskSize, CapacityBytes: diskSize, Code: "OK"}}}
	cloneType := "csi-clone"
	if f.badEvery > 0 && i%f.badEvery == 0 {
		ev.SourceVolume, ev.Expansions, ev.CapacityBytes, ev.RequiredBytes = "", nil, diskSize, diskSize
		cloneType = "copy"
		f.createMu.Lock()
		f.bad[ns+"/"+name] = true
		f.createMu.Unlock()
	}
	return f.disk(ctx, dv, handle, ev, cloneType)
}

func dataVolume(ns, name string, size int64) *cdiv1.DataVolume {
	q := *resource.NewQuantity(size, resource.BinarySI)
	return &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{
			"cdi.kubevirt.io/storage.usePopulator":             "true",
			"cdi.kubevirt.io/storage.bind.immediate.requested": "true",
		}},
		Spec: cdiv1.DataVolumeSpec{Storage: &cdiv1.StorageSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			VolumeMode:       ptr(corev1.PersistentVolumeBlock),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q}},
			StorageClassName: ptr(class),
		}},
	}
}

func ptr[T any](v T) *T { return &v }

// disk creates a finished DataVolume with its bound PVC and PV.
func (f *fleet) disk(ctx context.Context, dv *cdiv1.DataVolume, handle string, ev *clonerfleet.VolumeEvidence, cloneType string) error {
	created, err := f.createDataVolume(ctx, dv)
	if err != nil {
		return err
	}
	pvc := claimFor(created, handle, cloneType)
	pvc, err = f.kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Create(ctx, pvc, metav1.CreateOptions{FieldManager: "cdi-controller"})
	if err != nil {
		return fmt.Errorf("PVC %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	pv := volumeFor(pvc, handle, ev)
	if _, err = f.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{FieldManager: "csi-provisioner"}); err != nil {
		return fmt.Errorf("PV %s: %w", handle, err)
	}
	// kube-controller-manager binds the PV to the claim it names; the claim's
	// status is set here as it would be, retried when the controller wrote
	// in between.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := f.kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: cur.Spec.AccessModes,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: cur.Spec.Resources.Requests[corev1.ResourceStorage]}}
		_, err = f.kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: "kube-controller-manager"})
		return err
	})
	if err != nil {
		return fmt.Errorf("PVC %s/%s status: %w", pvc.Namespace, pvc.Name, err)
	}
	f.createMu.Lock()
	f.createdObjects += 3
	f.createMu.Unlock()
	return nil
}

// createDataVolume creates the DataVolume, then gives it the status CDI
// leaves on a finished clone or import.
func (f *fleet) createDataVolume(ctx context.Context, dv *cdiv1.DataVolume) (*cdiv1.DataVolume, error) {
	res := f.dyn.Resource(cluster.DataVolumeGVR).Namespace(dv.Namespace)
	u, err := toUnstructured(dv)
	if err != nil {
		return nil, err
	}
	got, err := res.Create(ctx, u, metav1.CreateOptions{FieldManager: "kubevirt-controller"})
	if err != nil {
		return nil, fmt.Errorf("DataVolume %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	done := metav1.NewTime(f.created.Add(time.Minute))
	status := cdiv1.DataVolumeStatus{Phase: cdiv1.Succeeded, Progress: "100.0%", ClaimName: dv.Name, Conditions: []cdiv1.DataVolumeCondition{
		{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionTrue, LastTransitionTime: done, LastHeartbeatTime: done, Reason: "Bound", Message: "PVC " + dv.Name + " Bound"},
		{Type: cdiv1.DataVolumeReady, Status: corev1.ConditionTrue, LastTransitionTime: done, LastHeartbeatTime: done},
		{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, LastTransitionTime: done, LastHeartbeatTime: done, Reason: "Completed", Message: "Clone Complete"},
	}}
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return nil, err
	}
	got.Object["status"] = st
	got, err = res.UpdateStatus(ctx, got, metav1.UpdateOptions{FieldManager: "cdi-controller"})
	if err != nil {
		return nil, fmt.Errorf("DataVolume %s/%s status: %w", dv.Namespace, dv.Name, err)
	}
	out := &cdiv1.DataVolume{}
	return out, runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, out)
}

func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	return &unstructured.Unstructured{Object: m}, err
}

// claimFor is the PVC CDI leaves bound to the volume after the rebind.
func claimFor(dv *cdiv1.DataVolume, handle, cloneType string) *corev1.PersistentVolumeClaim {
	ann := map[string]string{
		"cdi.kubevirt.io/createdForDataVolume":              string(dv.UID),
		"cdi.kubevirt.io/storage.contentType":               "kubevirt",
		"cdi.kubevirt.io/storage.pod.phase":                 "Succeeded",
		"cdi.kubevirt.io/storage.condition.running":         "false",
		"cdi.kubevirt.io/storage.condition.running.message": "Clone Complete",
		"cdi.kubevirt.io/storage.condition.running.reason":  "Completed",
		"cdi.kubevirt.io/storage.preallocation.requested":   "false",
		"cdi.kubevirt.io/storage.usePopulator":              "true",
		"pv.kubernetes.io/bind-completed":                   "yes",
		"volume.beta.kubernetes.io/storage-provisioner":     driver,
		"volume.kubernetes.io/storage-provisioner":          driver,
	}
	if cloneType != "" {
		ann["cdi.kubevirt.io/cloneType"] = cloneType
		ann["cdi.kubevirt.io/clonePhase"] = "Succeeded"
		ann["cdi.kubevirt.io/dataSourceNamespace"] = cluster.NamespaceGolden
		if cloneType == "copy" {
			ann["cdi.kubevirt.io/cloneFallbackReason"] = "No volume expansion is possible"
		}
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: dv.Namespace, Name: dv.Name, Annotations: ann,
			Labels: map[string]string{"app": "containerized-data-importer", "app.kubernetes.io/component": "storage",
				"app.kubernetes.io/managed-by": "cdi-controller"},
			Finalizers: []string{"kubernetes.io/pvc-protection"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume", Name: dv.Name, UID: dv.UID,
				Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      dv.Spec.Storage.AccessModes,
			VolumeMode:       dv.Spec.Storage.VolumeMode,
			StorageClassName: ptr(class),
			Resources:        dv.Spec.Storage.Resources,
			VolumeName:       handle,
		},
	}
}

// volumeFor is the PV the provisioner made, with the tap's evidence.
func volumeFor(pvc *corev1.PersistentVolumeClaim, handle string, ev *clonerfleet.VolumeEvidence) *corev1.PersistentVolume {
	ann := map[string]string{"pv.kubernetes.io/provisioned-by": driver, "volume.kubernetes.io/provisioner-deletion-secret-name": "",
		"volume.kubernetes.io/provisioner-deletion-secret-namespace": ""}
	if ev != nil {
		ann[clonerfleet.AnnCSIEvidence] = mustJSON(ev)
	}
	nodes := make([]string, 3)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%02d", i)
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: handle, Annotations: ann, Finalizers: []string{"kubernetes.io/pv-protection", "external-provisioner.volume.kubernetes.io/finalizer"}},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: pvc.Spec.AccessModes, VolumeMode: pvc.Spec.VolumeMode, StorageClassName: class,
			Capacity:                      pvc.Spec.Resources.Requests,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name,
				UID: pvc.UID, ResourceVersion: pvc.ResourceVersion},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle,
				FSType: "ext4", VolumeAttributes: map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "1733000000000-8081-" + driver}}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: nodes}}}}}},
		},
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs
	}
	return string(b)
}
