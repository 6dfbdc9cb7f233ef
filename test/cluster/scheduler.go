package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// NodeName is the one Node a cluster with a WaitForFirstConsumer class has:
// the node the scheduler picks for every pod, and so the node
// kube-scheduler writes into a claim's volume.kubernetes.io/selected-node.
const NodeName = "node-a"

// needsScheduler: a WaitForFirstConsumer class binds a claim only once the
// scheduler has picked a node for a pod that mounts it, so such a cluster
// runs kube-scheduler and has a Node to pick; so does one whose test asks
// for the scheduler (Options.Scheduler).
func (c *Cluster) needsScheduler() bool {
	return c.opts.Scheduler || c.hasWaitForFirstConsumerClass()
}

func (c *Cluster) hasWaitForFirstConsumerClass() bool {
	for _, sc := range c.opts.StorageClasses {
		if sc.WaitForFirstConsumer {
			return true
		}
	}
	return false
}

// schedulingControllers are the kube-controller-manager controllers a
// cluster with a scheduler adds: the node lifecycle controller lifts the
// not-ready taint the API server's TaintNodesByCondition admission puts on
// a new Node, once the Node reports Ready, and puts it back if its
// heartbeat stops.
var schedulingControllers = []string{"node-lifecycle-controller"}

// startScheduler starts the real kube-scheduler and registers NodeName,
// Ready, with a kubelet's heartbeat (see registerNode).
func (c *Cluster) startScheduler() error {
	if !c.needsScheduler() {
		return nil
	}
	if err := c.registerNode(); err != nil {
		return err
	}
	if err := c.waitNodeSchedulable(); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	// No extension-apiserver-authentication ConfigMap exists here: its
	// /healthz needs no client certificates.
	args := []string{"--authentication-skip-lookup=true", "--v=2"}
	if c.opts.SchedulerBindTimeout > 0 {
		conf, err := c.writeSchedulerConfig(c.opts.SchedulerBindTimeout)
		if err != nil {
			return err
		}
		args = append(args, "--config="+conf)
	}
	return c.startKubeComponent("kube-scheduler", "scheduler", port, args...)
}

// writeSchedulerConfig writes a KubeSchedulerConfiguration whose
// VolumeBinding plugin gives up binding a pod's claims after bindTimeout
// (bindTimeoutSeconds, 600 by default), and returns its path. With --config
// the scheduler ignores --kubeconfig, so the file names it.
func (c *Cluster) writeSchedulerConfig(bindTimeout time.Duration) (string, error) {
	path := filepath.Join(c.Dir, "kube-scheduler.yaml")
	conf := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
leaderElection:
  leaderElect: false
profiles:
  - schedulerName: default-scheduler
    pluginConfig:
      - name: VolumeBinding
        args:
          bindTimeoutSeconds: %d
`, c.Kubeconfig, int64(bindTimeout/time.Second))
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return "", fmt.Errorf("kube-scheduler config: %w", err)
	}
	return path, nil
}

// registerNode creates NodeName with room for every pod a test makes,
// reports it Ready and renews its Lease every nodeHeartbeat: what a
// kubelet's registration, status and heartbeat do.
func (c *Cluster) registerNode() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	room := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("1000"),
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   NodeName,
		Labels: map[string]string{corev1.LabelHostname: NodeName, corev1.LabelOSStable: "linux"},
	}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("node %s: %w", NodeName, err)
	}
	now := metav1.Now()
	status := corev1.NodeStatus{
		Capacity:    room,
		Allocatable: room,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "registered by the test harness (no kubelet runs here)", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
	// A merge patch: the node lifecycle controller may have written the
	// Node (its taint) since it was created.
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, NodeName, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("node %s status: %w", NodeName, err)
	}
	if err := c.renewNodeLease(ctx); err != nil {
		return err
	}
	c.keepNodeAlive()
	return nil
}

// keepNodeAlive renews the Node's Lease every nodeHeartbeat until the
// cluster stops.
func (c *Cluster) keepNodeAlive() {
	beat, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		failed := 0
		for {
			select {
			case <-beat.Done():
				return
			case <-time.After(nodeHeartbeat):
			}
			err := c.renewNodeLease(beat)
			if err == nil {
				failed = 0
				continue
			}
			// One miss is the API server stopping before this goroutine
			// does at teardown; three are the node going NotReady.
			if failed++; failed == 3 && beat.Err() == nil {
				c.logf("cluster: node %s heartbeat failing: %v", NodeName, err)
			}
		}
	}()
	c.onStop(func() error { stop(); <-done; return nil })
}

// nodeHeartbeat is how often the Node's Lease is renewed: a kubelet's
// default (nodeLeaseDurationSeconds 40, renewed every quarter of it).
const nodeHeartbeat = 10 * time.Second

// renewNodeLease creates or renews NodeName's Lease in kube-node-lease,
// which the node lifecycle controller reads as the node's heartbeat.
func (c *Cluster) renewNodeLease(ctx context.Context) error {
	leases := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: NodeName, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr(NodeName), LeaseDurationSeconds: ptr(int32(40)), RenewTime: &now},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// waitNodeSchedulable waits for the node lifecycle controller to lift the
// not-ready taint from the Ready Node.
func (c *Cluster) waitNodeSchedulable() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var taints []corev1.Taint
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		taints = n.Spec.Taints
		return len(taints) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("node %s still has taints %v: %w", NodeName, taints, err)
	}
	return nil
}

// CreateConsumer creates a pod that mounts claim, as KubeVirt's virt-launcher
// mounts a VM's disk: the first consumer a WaitForFirstConsumer claim waits
// for. The scheduler binds it to NodeName; no kubelet ever starts it.
func (c *Cluster) CreateConsumer(ctx context.Context, ns, name, claim string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"kubevirt.io": "virt-launcher"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "compute", Image: "registry.invalid/virt-launcher",
				VolumeMounts: []corev1.VolumeMount{{Name: "disk", MountPath: "/disk"}},
			}},
			Volumes: []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("consumer pod %s/%s: %w", ns, name, err)
	}
	return nil
}
