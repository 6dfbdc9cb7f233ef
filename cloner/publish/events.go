package publish

import (
	"context"
	"fmt"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

const (
	maxEventMessage = 1000
	// ReasonMalformedObject is the Event reason for an object the cloner
	// cannot read.
	ReasonMalformedObject = "MalformedObject"
)

// Warn emits one Warning Event. Its name is derived from the object, the
// reason and occasion (what makes it a new warning), never from the message:
// a message that gains detail as the disk progresses (its class resolved
// from the claim, then the bound PV) is still the same warning. Emitting it
// twice (a restart between the event and the verdict write, two leaders
// overlapping, a claim that did not exist yet to persist on) creates it once.
func (w *Writer) Warn(ctx context.Context, t EventTarget, reason, occasion, message string) error {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%s", t.UID, reason, occasion)
	key := fmt.Sprintf("%s.%016x", ClipName(t.Name), h.Sum64())
	w.mu.Lock()
	done := w.emitted[t.Namespace+"/"+key]
	w.mu.Unlock()
	if done {
		return nil
	}
	now := metav1.NewTime(w.clock())
	ns := t.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault // where Kubernetes puts events of cluster-scoped objects
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: key, Namespace: ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: t.APIVersion, Kind: t.Kind,
			Namespace: t.Namespace, Name: t.Name, UID: t.UID},
		Reason: reason, Message: fleet.Clip(message, maxEventMessage), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: fleet.EventSourceComponent},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, err := w.kube.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("emitting %s event on %s %s/%s: %w", reason, t.Kind, t.Namespace, t.Name, err)
	}
	w.mu.Lock()
	w.emitted[t.Namespace+"/"+key] = true
	w.mu.Unlock()
	return nil
}
