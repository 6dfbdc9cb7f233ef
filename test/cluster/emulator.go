package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// CDI's pod roles, from the value of the "cdi.kubevirt.io" label on its pods.
const (
	podRolePrep     = "cdi-populator-prep"
	podRoleImporter = "importer"
	podRoleUpload   = "cdi-upload-server"
	podRoleSource   = "cdi-clone-source"
	cdiRoleLabel    = "cdi.kubevirt.io"
)

// emulator stands in for the kubelet for the pods cdi-controller creates and
// waits on. It never writes CDI's own objects: it only moves pods through the
// states a kubelet would report (through the pod status subresource), and the
// real cdi-controller turns those into PVC annotations and DataVolume phases.
//
//   - prep pod: Succeeded, as its one "echo" container would, but only once
//     no controller-side resize of its claim is under way (see
//     resizeUnderway: the one place the emulator waits for an event where a
//     kubelet would just be slow).
//   - importer pod: Running, then it does the importer's network part for
//     real (GET of IMPORTER_ENDPOINT, checksum if asked) and reports the
//     outcome exactly as cdi-importer does: exit 0 with the JSON termination
//     message "Import Complete" (the fetched bytes written at the start of
//     the volume's data file); exit 1 with "Unable to connect to http data
//     source: ..." and a restart after a back-off; exit 0 with "Unable to
//     process data: checksum mismatch" (fatal).
//   - upload server pod (host-assisted clone target): Running and Ready.
//   - clone source pod: Running; the source volume's data is copied into
//     the target's (what the source and upload pods stream over the pod
//     network); Succeeded; its upload pod then Succeeded.
//
// A pod starts only once every PVC it mounts is Bound, as with a kubelet.
type emulator struct {
	c      *Cluster
	log    *log.Logger
	logf   *os.File
	pods   corelisters.PodLister
	pvcs   corelisters.PersistentVolumeClaimLister
	http   *http.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	state map[types.UID]*importState
	noted map[types.UID]bool // pods of roles we do not emulate, logged once
	// held counts, per pod, the ticks that saw it and kept it as it was (a
	// claim not Bound, a resize under way): a test waits on it before it
	// checks that a pod did not start.
	held map[types.UID]int
}

// importState tracks one importer pod between ticks.
type importState struct {
	inFlight bool
	// done: the import succeeded; the pod never runs again, whatever a
	// lagging cache still shows of it.
	done     bool
	restarts int32
	next     time.Time // when the next attempt may start
}

// importBackoff mirrors the kubelet's crash-loop back-off, scaled down.
func importBackoff(restarts int32) time.Duration {
	d := time.Second << min(restarts, 4)
	return min(d, 10*time.Second)
}

func (c *Cluster) startEmulator() error {
	f, err := os.OpenFile(filepath.Join(c.logDir, "emulator.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cdiRoleLabel }))
	e := &emulator{
		c: c, log: log.New(f, "", log.LstdFlags|log.Lmicroseconds), logf: f,
		pods:   factory.Core().V1().Pods().Lister(),
		http:   &http.Client{Timeout: 30 * time.Second},
		cancel: cancel,
		state:  map[types.UID]*importState{},
		noted:  map[types.UID]bool{},
		held:   map[types.UID]int{},
	}
	pvcFactory := informers.NewSharedInformerFactory(c.Client, 0)
	e.pvcs = pvcFactory.Core().V1().PersistentVolumeClaims().Lister()
	factory.Start(ctx.Done())
	pvcFactory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	pvcFactory.WaitForCacheSync(ctx.Done())
	c.emu = e
	e.wg.Add(1)
	go e.run(ctx)
	return nil
}

// stop ends the loop and every in-flight import, then closes the log.
func (e *emulator) stop() {
	e.cancel()
	e.wg.Wait()
	e.http.CloseIdleConnections()
	e.logf.Close()
}

func (e *emulator) run(ctx context.Context) {
	defer e.wg.Done()
	t := time.NewTicker(150 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pods, err := e.pods.List(labels.Everything())
		if err != nil {
			e.log.Printf("list pods: %v", err)
			continue
		}
		for _, p := range pods {
			if err := e.step(ctx, p); err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				e.log.Printf("%s/%s: %v", p.Namespace, p.Name, err)
			}
		}
	}
}

// step moves one pod on by at most one state.
func (e *emulator) step(ctx context.Context, p *corev1.Pod) error {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil
	}
	if !e.claimsBound(p) {
		e.hold(p)
		return nil
	}
	running := p.Status.Phase == corev1.PodRunning
	switch role := p.Labels[cdiRoleLabel]; role {
	case podRolePrep:
		if e.resizeUnderway(p) {
			e.hold(p)
			return nil
		}
		return e.finish(ctx, p, 0, "", corev1.PodSucceeded)
	case podRoleImporter:
		return e.importStep(ctx, p)
	case podRoleUpload:
		if !running {
			return e.setRunning(ctx, p, 0, nil)
		}
		if e.sourceDone(p) {
			return e.finish(ctx, p, 0, termJSON("Clone Complete"), corev1.PodSucceeded)
		}
	case podRoleSource:
		if !running {
			return e.setRunning(ctx, p, 0, nil)
		}
		if err := e.copyClone(p); err != nil {
			return e.finish(ctx, p, 1, err.Error(), corev1.PodFailed)
		}
		return e.finish(ctx, p, 0, "", corev1.PodSucceeded)
	default:
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.noted[p.UID] {
			e.noted[p.UID] = true
			e.log.Printf("%s/%s: role %q is not emulated; it stays Pending", p.Namespace, p.Name, role)
		}
	}
	return nil
}

// hold notes a tick that left the pod as it was.
func (e *emulator) hold(p *corev1.Pod) {
	e.mu.Lock()
	e.held[p.UID]++
	e.mu.Unlock()
}

// heldTicks is how many ticks saw the pod and left it as it was.
func (e *emulator) heldTicks(uid types.UID) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.held[uid]
}

// claimsBound is the kubelet's precondition: every mounted PVC is Bound.
func (e *emulator) claimsBound(p *corev1.Pod) bool {
	claims, err := e.mountedClaims(p)
	if err != nil {
		return false
	}
	for _, pvc := range claims {
		if pvc.Status.Phase != corev1.ClaimBound {
			return false
		}
	}
	return true
}

// mountedClaims are the PVCs the pod mounts, as the informer has them.
func (e *emulator) mountedClaims(p *corev1.Pod) ([]*corev1.PersistentVolumeClaim, error) {
	var out []*corev1.PersistentVolumeClaim
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := e.pvcs.PersistentVolumeClaims(p.Namespace).Get(v.PersistentVolumeClaim.ClaimName)
		if err != nil {
			return nil, err
		}
		out = append(out, pvc)
	}
	return out, nil
}

// resizeUnderway reports whether a claim the pod mounts asks for more than it
// has and the resize is still the controller's (csi-resizer's) to do: not
// started, or ControllerResizeInProgress.
//
// CDI's prep pod exists to get a claim's resize finished: while the claim's
// capacity is below its request, cdi-controller deletes every prep pod that
// succeeded and creates it again. A kubelet needs seconds to run one
// (scheduling, attach, mount, sandbox, the PLEG noticing the exit), and a
// controller-side resize ends well inside them, so in a cluster one prep pod
// nearly always sees it through. The emulator runs a pod in one tick; each
// pod's start and end makes kube-controller-manager write the claim's status
// (the Unused condition, Kubernetes 1.37's PersistentVolumeClaimUnusedSinceTime,
// on by default), and csi-resizer's status patches carry the resourceVersion
// it read, rate limited by its client: with prep pods cycling every few
// hundred milliseconds every patch conflicted, csi-resizer backed off for
// minutes, and cdi-controller re-created the pod over a thousand times
// (bench-e2e's first run stalled so). So the emulator keeps a prep pod
// Pending until that resize ended, instead of timing a kubelet's start.
// Node-side states (NodeResizePending and after) are a kubelet's to act on at
// mount; the test driver has no node service, so csi-resizer never asks.
func (e *emulator) resizeUnderway(p *corev1.Pod) bool {
	claims, err := e.mountedClaims(p)
	if err != nil {
		return true // claimsBound just saw them: a deletion; look again next tick
	}
	for _, pvc := range claims {
		want, have := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pvc.Status.Capacity[corev1.ResourceStorage]
		if want.Cmp(have) <= 0 {
			continue
		}
		switch pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] {
		case "", corev1.PersistentVolumeClaimControllerResizeInProgress:
			return true
		}
	}
	return false
}

// sourceDone reports whether the clone source pod feeding this upload pod has
// finished. The upload pod's PVC names the source pod and, in its clone
// request, the source namespace.
func (e *emulator) sourceDone(upload *corev1.Pod) bool {
	for _, v := range upload.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := e.pvcs.PersistentVolumeClaims(upload.Namespace).Get(v.PersistentVolumeClaim.ClaimName)
		if err != nil {
			continue
		}
		name := pvc.Annotations["cdi.kubevirt.io/storage.sourceClonePodName"]
		srcNS, _, ok := strings.Cut(pvc.Annotations["k8s.io/CloneRequest"], "/")
		if name == "" || !ok {
			continue
		}
		src, err := e.pods.Pods(srcNS).Get(name)
		if err == nil && src.Status.Phase == corev1.PodSucceeded {
			return true
		}
	}
	return false
}

// importStep runs the importer pod's life: start, fetch, report, restart.
func (e *emulator) importStep(ctx context.Context, p *corev1.Pod) error {
	e.mu.Lock()
	st := e.state[p.UID]
	if st == nil {
		st = &importState{}
		e.state[p.UID] = st
	}
	if st.inFlight || st.done || time.Now().Before(st.next) {
		e.mu.Unlock()
		return nil
	}
	st.inFlight = true
	restarts := st.restarts
	e.mu.Unlock()

	var last *corev1.ContainerState
	if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Terminated != nil {
		last = &p.Status.ContainerStatuses[0].State
	}
	if err := e.setRunning(ctx, p, restarts, last); err != nil {
		e.mu.Lock()
		st.inFlight = false
		e.mu.Unlock()
		return err
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		exit, msg := e.runImport(ctx, p)
		phase := corev1.PodSucceeded
		if exit != 0 {
			phase = corev1.PodRunning // restartPolicy OnFailure: the kubelet restarts it
		}
		err := e.finishWithRestarts(ctx, p, exit, msg, phase, restarts)
		if err != nil && ctx.Err() == nil {
			e.log.Printf("%s/%s: report import: %v", p.Namespace, p.Name, err)
		}
		// Only once the pod's status says how the attempt ended may another
		// start: a pod event seen in between (the pod still Running) must
		// not fetch the image a second time, which no kubelet would do.
		e.mu.Lock()
		st.inFlight, st.done = false, exit == 0
		if exit != 0 {
			st.restarts++
			st.next = time.Now().Add(importBackoff(st.restarts))
		}
		e.mu.Unlock()
	}()
	return nil
}

// runImport does what cdi-importer does on the network and returns the exit
// code and termination message it would.
func (e *emulator) runImport(ctx context.Context, p *corev1.Pod) (int32, string) {
	env := map[string]string{}
	for _, v := range p.Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	switch src := env["IMPORTER_SOURCE"]; src {
	case "none": // blank image
		return 0, termJSON("Import Complete")
	case "http":
	default:
		e.log.Printf("%s/%s: import source %q not emulated: failing it", p.Namespace, p.Name, src)
		return 1, fmt.Sprintf("Unknown data source: %s", src)
	}
	url := env["IMPORTER_ENDPOINT"]
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 1, fmt.Sprintf("Unable to connect to http data source: %v", err)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.log.Printf("%s/%s: GET %s: %v", p.Namespace, p.Name, url, err)
		return 1, fmt.Sprintf("Unable to connect to http data source: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.log.Printf("%s/%s: GET %s: %s", p.Namespace, p.Name, url, resp.Status)
		return 1, fmt.Sprintf("Unable to connect to http data source: expected status code %d, got %d. Status: %s",
			http.StatusOK, resp.StatusCode, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxImage+1))
	if err != nil {
		return 1, fmt.Sprintf("Unable to process data: %v", err)
	}
	if len(body) > maxImage {
		return 1, fmt.Sprintf("Unable to process data: image larger than the emulator's %d bytes", maxImage)
	}
	e.log.Printf("%s/%s: GET %s: %d bytes", p.Namespace, p.Name, url, len(body))
	h := sha256.New()
	h.Write(body)
	if want := env["IMPORTER_CHECKSUM"]; want != "" {
		algo, hash, _ := strings.Cut(want, ":")
		got := hex.EncodeToString(h.Sum(nil))
		if algo != "sha256" || !strings.EqualFold(hash, got) {
			// cdi-importer exits 0 with this JSON message; the controller marks it fatal.
			return 0, termJSON(fmt.Sprintf("Unable to process data: checksum mismatch: expected %s, got sha256:%s", want, got))
		}
	}
	if err := e.writeImage(p, body); err != nil {
		return 1, fmt.Sprintf("Unable to process data: %v", err)
	}
	return 0, termJSON("Import Complete")
}

// maxImage bounds what the emulated importer holds in memory.
const maxImage = 64 << 20

// writeImage writes the image at the start of the volume the importer pod
// mounts, as the importer writes the raw image to its block device. Nothing
// is decompressed: the bytes are the test's, not a real disk.
func (e *emulator) writeImage(p *corev1.Pod, body []byte) error {
	path, err := e.podVolumeFile(p.Namespace, p.Spec.Volumes)
	if errors.Is(err, errNoClaim) {
		return nil // a bare pod (the emulator's own tests): nowhere to write
	}
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(body, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// podVolumeFile is the test driver's data file of the (one) PVC a pod mounts.
func (e *emulator) podVolumeFile(ns string, vols []corev1.Volume) (string, error) {
	for _, v := range vols {
		if v.PersistentVolumeClaim != nil {
			return e.claimFile(ns, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return "", errNoClaim
}

var errNoClaim = errors.New("pod mounts no PVC")

// claimFile is the test driver's data file of a bound PVC's volume.
func (e *emulator) claimFile(ns, claim string) (string, error) {
	pvc, err := e.pvcs.PersistentVolumeClaims(ns).Get(claim)
	if err != nil {
		return "", err
	}
	pv, err := e.c.Client.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pv.Spec.CSI == nil {
		return "", fmt.Errorf("PV %s is not a CSI volume", pv.Name)
	}
	file, ok := e.c.volumeFileOf(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)
	if !ok {
		return "", fmt.Errorf("PV %s is not a volume of %s or of another test driver", pv.Name, e.c.DriverName)
	}
	return file, nil
}

// copyClone moves the data of a host-assisted clone: from the source PVC the
// clone source pod mounts to the target PVC whose clone it serves.
func (e *emulator) copyClone(src *corev1.Pod) error {
	from, err := e.podVolumeFile(src.Namespace, src.Spec.Volumes)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	pvcs, err := e.pvcs.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, pvc := range pvcs {
		ns, _, _ := strings.Cut(pvc.Annotations["k8s.io/CloneRequest"], "/")
		if pvc.Annotations["cdi.kubevirt.io/storage.sourceClonePodName"] != src.Name || ns != src.Namespace {
			continue
		}
		to, err := e.claimFile(pvc.Namespace, pvc.Name)
		if err != nil {
			return fmt.Errorf("target: %w", err)
		}
		e.log.Printf("%s/%s: copying %s to %s", src.Namespace, src.Name, from, to)
		return copySparse(to, from)
	}
	return fmt.Errorf("no PVC names %s/%s as its clone source pod", src.Namespace, src.Name)
}

// termJSON is cdi-importer's JSON termination message.
func termJSON(msg string) string {
	b, _ := json.Marshal(map[string]any{"message": msg, "preallocationApplied": false, "scratchSpaceRequired": false})
	return string(b)
}

// setRunning reports every container running and ready.
func (e *emulator) setRunning(ctx context.Context, p *corev1.Pod, restarts int32, last *corev1.ContainerState) error {
	now := metav1.Now()
	return e.updateStatus(ctx, p, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.StartTime = &now
		s.Conditions = podConditions(now, true)
		s.ContainerStatuses = nil
		for _, ctr := range p.Spec.Containers {
			cs := corev1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image,
				Ready: true, Started: ptr(true), RestartCount: restarts,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			}
			if last != nil {
				cs.LastTerminationState = *last
			}
			s.ContainerStatuses = append(s.ContainerStatuses, cs)
		}
	})
}

// finish reports the first container terminated with exit and msg.
func (e *emulator) finish(ctx context.Context, p *corev1.Pod, exit int32, msg string, phase corev1.PodPhase) error {
	return e.finishWithRestarts(ctx, p, exit, msg, phase, 0)
}

func (e *emulator) finishWithRestarts(ctx context.Context, p *corev1.Pod, exit int32, msg string, phase corev1.PodPhase, restarts int32) error {
	now := metav1.Now()
	err := e.updateStatus(ctx, p, func(s *corev1.PodStatus) {
		s.Phase = phase
		if s.StartTime == nil {
			s.StartTime = &now
		}
		s.Conditions = podConditions(now, false)
		s.ContainerStatuses = nil
		for i, ctr := range p.Spec.Containers {
			term := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}
			if i == 0 {
				term.ExitCode, term.Message = exit, msg
				if exit != 0 {
					term.Reason = "Error"
				}
			}
			s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image,
				Started: ptr(false), RestartCount: restarts,
				State: corev1.ContainerState{Terminated: term},
			})
		}
	})
	if err == nil {
		e.log.Printf("%s/%s: %s exit=%d %s", p.Namespace, p.Name, phase, exit, msg)
	}
	return err
}

func podConditions(now metav1.Time, ready bool) []corev1.PodCondition {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
	}
}

// updateStatus applies mutate to the pod's latest status and writes it
// through the status subresource, retrying on conflicts.
func (e *emulator) updateStatus(ctx context.Context, p *corev1.Pod, mutate func(*corev1.PodStatus)) error {
	pods := e.c.Client.CoreV1().Pods(p.Namespace)
	for range 5 {
		cur, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != p.UID || cur.DeletionTimestamp != nil {
			return nil
		}
		mutate(&cur.Status)
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("status of %s/%s: too many conflicts", p.Namespace, p.Name)
}
