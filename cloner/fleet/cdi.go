package fleet

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// What CDI (v1.65) leaves behind about a clone, read as CDI writes it. The
// storage layer's record says what was done; these say why CDI did or did
// not do it. CDI's Warning events carry nothing these do not: the fallback
// events' messages are the cloneFallbackReason annotation, the clone
// populator's errors are cloneError and the Running condition, and the
// DataVolume controller's refusals are its Bound and Ready conditions.
const (
	// AnnCDIClonePhase is the clone populator's phase on the target PVC
	// (Pending, CSIClone, PrepClaim, Rebind, Succeeded, Error).
	AnnCDIClonePhase = "cdi.kubevirt.io/clonePhase"
	// AnnCDICloneError is the populator's last error on the target PVC,
	// present while clonePhase is Error.
	AnnCDICloneError = "cdi.kubevirt.io/cloneError"

	CdiClonePhaseError = "Error"
	// CDI's reasons on a DataVolume's conditions.
	CdiReasonError            = "Error"
	CdiReasonValidationFailed = "CloneValidationFailed"
	CdiReasonWithoutSource    = "CloneWithoutSource"
)

// cdiFallbackEvents maps the message CDI writes as cloneFallbackReason to
// the reason of the Warning event it emits with it on the target claim.
var CdiFallbackEvents = map[string]string{
	"Provisioners are incompatible":                                                "IncompatibleProvisioners",
	"The volume modes of source and target are incompatible":                       "IncompatibleVolumeModes",
	"No volume expansion is possible":                                              "NoVolumeExpansion",
	"No compatible volumesnapshotclass found":                                      "NoVolumeSnapshotClass",
	"The storageclass provisioner does not match the volumesnapshotcontent driver": "NoProvisionerMatch",
	"In tree storage class does not support snapshot/clone":                        "NoPopulator",
}

// fallbackText is CDI's fallback reason as the event would show it:
// "NoVolumeExpansion: No volume expansion is possible".
func FallbackText(message string) string {
	if ev, ok := CdiFallbackEvents[message]; ok {
		return ev + ": " + message
	}
	return message
}

// CDICondition is one of CDI's conditions on a DataVolume.
type CDICondition struct {
	Type, Status, Reason, Message string
	// Since is when CDI last changed the condition's status, reason or
	// message (its heartbeat, else its transition time).
	Since time.Time
}

func cdiConditions(dv *cdiv1.DataVolume) []CDICondition {
	var out []CDICondition
	for _, c := range dv.Status.Conditions {
		since := c.LastHeartbeatTime.Time
		if since.IsZero() {
			since = c.LastTransitionTime.Time
		}
		out = append(out, CDICondition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason,
			Message: Clip(c.Message, MaxMessageBytes), Since: since})
	}
	return out
}

// condition is the disk's condition of a type, with reason, or nil.
func (d *WorkerDisk) condition(typ cdiv1.DataVolumeConditionType, reason string) *CDICondition {
	for i := range d.Conditions {
		if c := &d.Conditions[i]; c.Type == string(typ) && c.Reason == reason {
			return c
		}
	}
	return nil
}

// cdiRefusal: CDI's DataVolume controller validated the clone against its
// source and refused it (e.g. a target smaller than the source). It checks
// again on every pass and the DataVolume's spec does not change, so the disk
// will not be made from this DataVolume.
func CdiRefusal(d *WorkerDisk) *CDICondition {
	return d.condition(cdiv1.DataVolumeBound, CdiReasonValidationFailed)
}

// cdiCloneError is the clone populator's error on the target claim
// (clonePhase Error, cloneError), as the DataVolume's Running condition
// mirrors it. CDI maps this phase to Failed but leaves the DataVolume's phase
// alone and retries; an update conflict also passes through Error for a
// moment, which is why the caller waits for the error to last.
func CdiCloneError(d *WorkerDisk, pvc *corev1.PersistentVolumeClaim) (msg string, since time.Time, ok bool) {
	if pvc == nil || pvc.Annotations[AnnCDIClonePhase] != CdiClonePhaseError {
		return "", time.Time{}, false
	}
	running := d.condition(cdiv1.DataVolumeRunning, CdiReasonError)
	if running == nil {
		// The DataVolume does not show it yet: not settled.
		return "", time.Time{}, false
	}
	msg = Clip(pvc.Annotations[AnnCDICloneError], MaxMessageBytes)
	if msg == "" {
		msg = running.Message
	}
	return msg, running.Since, true
}

// cdiWaitsForSource: CDI looked for the clone's source claim and it does not
// exist; CDI waits for it (CloneWithoutSource).
func CdiWaitsForSource(d *WorkerDisk) *CDICondition {
	return d.condition(cdiv1.DataVolumeBound, CdiReasonWithoutSource)
}

// cdiExplanation is CDI's own word on an unfinished disk, "" when CDI says
// nothing beyond its phase: the first condition that is not true and
// carries a message, Running before Bound before Ready.
func CdiExplanation(d *WorkerDisk) string {
	for _, typ := range []cdiv1.DataVolumeConditionType{cdiv1.DataVolumeRunning, cdiv1.DataVolumeBound, cdiv1.DataVolumeReady} {
		for _, c := range d.Conditions {
			if c.Type != string(typ) || c.Status == string(corev1.ConditionTrue) || c.Message == "" || boring(c) {
				continue
			}
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	return ""
}

// boring: conditions every clone passes through on its way. A Pending
// Bound condition is CDI's plain "PVC <name> Pending" unless CDI added why:
// "target PVC <name> Pending and <the claim's latest event>", e.g. "pod
// <ns>/<name> using PersistentVolumeClaim <golden>" while a pod holds the
// golden (datavolume/conditions.go updateBoundCondition, from
// common/util.go UpdatePVCBoundContionFromEvents).
func boring(c CDICondition) bool {
	switch c.Reason {
	case "Pending":
		return !strings.Contains(c.Message, " Pending and ")
	case "Bound", "Completed", "TransferRunning", "NotFound", "Populator is running":
		return true
	}
	return c.Message == "Clone Pending"
}
