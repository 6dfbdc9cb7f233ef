package record

import "time"

// Record is the verdict of one worker disk and the evidence behind it,
// written as compact JSON on the disk's PVC (AnnCloneEvidence; the verdict
// word alone goes to AnnCloneVerdict).
type Record struct {
	Verdict string `json:"verdict"`
	// Source says where the mechanism came from: csi-tap, cdi-annotations,
	// datavolume-spec or none.
	Source      string `json:"source"`
	Message     string `json:"message,omitempty"`
	Golden      string `json:"golden,omitempty"`
	SchematicID string `json:"schematicID,omitempty"`
	Version     string `json:"version,omitempty"`
	Pool        string `json:"pool,omitempty"`
	// Volume is the disk's volume handle, GoldenVolume the golden's;
	// ContentSource what the driver was asked to copy ("volume:<h>",
	// "snapshot:<h>", "none").
	Volume        string `json:"volume,omitempty"`
	GoldenVolume  string `json:"goldenVolume,omitempty"`
	ContentSource string `json:"contentSource,omitempty"`
	Class         string `json:"class,omitempty"`
	GoldenClass   string `json:"goldenClass,omitempty"`
	// DiskBytes is the DataVolume's size, GoldenBytes the golden's,
	// CapacityBytes the volume's final capacity.
	DiskBytes      int64  `json:"diskBytes,omitempty"`
	GoldenBytes    int64  `json:"goldenBytes,omitempty"`
	CapacityBytes  int64  `json:"capacityBytes,omitempty"`
	CDICloneType   string `json:"cdiCloneType,omitempty"`
	FallbackReason string `json:"fallbackReason,omitempty"`
	// CloneClaim is "namespace/name" of the claim CDI makes the disk on
	// while the disk's own claim is unbound (tmp-pvc-<uid> in the golden's
	// namespace); its events hold the external-provisioner's and resizer's.
	CloneClaim string `json:"cloneClaim,omitempty"`
	// DriverError is the driver's last error on the disk's volume:
	// "<method> <code>: <message>", from a CreateVolume or a
	// ControllerExpandVolume that no later call of the same kind undid.
	DriverError     string    `json:"driverError,omitempty"`
	DurationSeconds float64   `json:"durationSeconds,omitempty"`
	Findings        []Finding `json:"findings,omitempty"`
	// Since is when this verdict was first decided. Findings that come or
	// go under the same verdict (a driver error, a prediction found wrong)
	// keep it: it says how long the disk has been pending, stuck or cloned.
	Since time.Time `json:"since,omitzero"`

	// Predicted is the clone path predicted for this disk when it was first
	// judged, PredictedReason why (package predict); a decided verdict that
	// contradicts it is the finding prediction-wrong.
	Predicted       string `json:"predicted,omitempty"`
	PredictedReason string `json:"predictedReason,omitempty"`

	// Phase is where a clone in flight is (one of Phases), "" once CDI
	// finished or failed it; Timeline when it passed each point.
	Phase    string   `json:"phase,omitempty"`
	Timeline Timeline `json:"timeline,omitzero"`
}

// Finding is one problem found on top of the verdict.
type Finding struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// BadReasons lists the disk's bad reasons: its verdict's, then its findings'.
func (r *Record) BadReasons() []string {
	var out []string
	if b := badVerdict(r.Verdict); b != "" {
		out = append(out, b)
	}
	for _, f := range r.Findings {
		out = append(out, f.Reason)
	}
	return out
}

// messageFor is the message of a bad reason on this record.
func (r *Record) MessageFor(reason string) string {
	if reason == badVerdict(r.Verdict) {
		return r.Message
	}
	for _, f := range r.Findings {
		if f.Reason == reason {
			return f.Message
		}
	}
	return ""
}
