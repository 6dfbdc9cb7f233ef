// Package publish is how a verdict leaves the process: the annotation
// patches (guarded by a resource version, their replies discarded), the
// Warning events' targets and messages, the bookkeeping that keeps a
// write from being repeated before its echo arrives or while only a
// clone's progress changed, and the count of malformed objects seen.
// The Controller sends; this package says what and when.
package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// annotationPatch is a JSON merge patch that sets (or, for nil, removes)
// annotations. With a resourceVersion the API server applies it only to that
// version: a read-modify-write that loses a race fails with a Conflict
// instead of overwriting another replica's evidence.
func AnnotationPatch(resourceVersion string, set map[string]*string) []byte {
	meta := map[string]any{"annotations": set}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	b, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		panic(err) // strings only: cannot happen
	}
	return b
}

func PtrTo(s string) *string { return &s }

// patchDiscardingReply sends a merge patch and reads the API server's reply
// only to discard it: a verdict write needs to know that it was applied,
// not the whole claim back. Decoding each reply (a full PVC with its
// managedFields) was a tenth of what the sidecar allocated while writing a
// fleet's verdicts (README, Scale). Errors come as the typed client gives
// them (a *StatusError for an API status).
func PatchDiscardingReply(ctx context.Context, rc *rest.RESTClient, namespace, resource, name string, patch []byte, opts metav1.PatchOptions) error {
	body, err := rc.Patch(types.MergePatchType).Namespace(namespace).Resource(resource).Name(name).
		VersionedParams(&opts, scheme.ParameterCodec).Body(patch).Stream(ctx)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, body)
	return errors.Join(err, body.Close())
}

// eventTarget is the object an Event is about.
type EventTarget struct {
	APIVersion, Kind, Namespace, Name string
	UID                               types.UID
}

// DiskTarget is the object a disk's events are about: its DataVolume, or a
// bare claim itself.
func DiskTarget(d *fleet.WorkerDisk) EventTarget {
	if d.BareClaim {
		return EventTarget{APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: d.Namespace, Name: d.Name, UID: d.UID}
	}
	return EventTarget{APIVersion: fleet.DataVolumeGVR.GroupVersion().String(), Kind: "DataVolume",
		Namespace: d.Namespace, Name: d.Name, UID: d.UID}
}

// clipName keeps an event name within a DNS subdomain's 253 characters.
func ClipName(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}

// warningMessage is the Event message of a bad reason: what is wrong, then the fix.
func WarningMessage(r *record.Record, reason string) string {
	return fmt.Sprintf("%s. Fix: %s", r.MessageFor(reason), record.Fix(reason))
}

// malformedTracker counts distinct malformed objects (per UID and
// resourceVersion) seen by this process, per kind.
type MalformedTracker struct {
	seen  map[string]bool
	count map[string]int64
}

func NewMalformedTracker() *MalformedTracker {
	return &MalformedTracker{seen: map[string]bool{}, count: map[string]int64{}}
}

// add records an object; it reports whether it is new.
func (m *MalformedTracker) Add(o fleet.MalformedObject) bool {
	key := fmt.Sprintf("%s/%s/%s/%s/%s", o.Kind, o.Namespace, o.Name, o.UID, o.ResourceVersion)
	if m.seen[key] {
		return false
	}
	m.seen[key] = true
	m.count[o.Kind]++
	return true
}

func (m *MalformedTracker) Snapshot() map[string]int64 {
	out := make(map[string]int64, len(m.count))
	for k, v := range m.count {
		out[k] = v
	}
	return out
}

// pendingEcho is a record this process wrote whose watch echo had not
// reached the claim cache when it was written: the claim's resource version
// the write was judged against, and the written record's hash.
type PendingEcho struct {
	Base string
	Same uint64
}

// progressRewriteAfter spaces the rewrites of a record that only follows a
// clone's progress. While CDI moves a clone on (its phase, the volume, the
// temporary claim, the capacity) a pending record changed about seven times
// per disk, and every patch of a PVC wakes every controller that watches
// PVCs: kube-controller-manager, CDI and the kubernetes-csi sidecars in the
// same pod. What an operator acts on is written at once: a new verdict, a
// new bad reason, a driver error, CDI's clone type and fallback reason.
const ProgressRewriteAfter = 30 * time.Second

// progressOnly reports whether rec, pending like old, differs from it only
// in how far the clone has got.
func ProgressOnly(rec, old *record.RecordDigest) bool {
	if old == nil || rec.Verdict != record.VerdictPending || old.Verdict != record.VerdictPending {
		return false
	}
	return rec.ProgressFree == old.ProgressFree
}
