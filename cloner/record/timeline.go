package record

import (
	"time"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// Phases of a clone in flight, in the order a clone goes through them
// (csi_clone_in_flight's phase label; a closed set).
const (
	// PhaseGoldenImport: the golden is still importing.
	PhaseGoldenImport = "golden-import"
	// PhasePlanning: CDI has not made the claim the volume is provisioned
	// for yet (clone token, PrepClaim, a golden in use, a quota, or a
	// WaitForFirstConsumer class: CDI's clone populator makes its tmp-pvc
	// only once the scheduler has picked a node for a pod that mounts the
	// disk, populators/util.go claimReadyForPopulation).
	PhasePlanning = "planning"
	// PhaseProvisioning: the claim exists and the driver has answered no
	// CreateVolume for it (the external-provisioner's queue, a class no
	// provisioner serves, a host-assisted copy's WaitForFirstConsumer
	// claim, a first call still running: nothing records a call before its
	// answer).
	PhaseProvisioning = "provisioning"
	// PhaseCreateVolume: the driver refused the CreateVolume at least once
	// and has not succeeded yet.
	PhaseCreateVolume = "create-volume"
	// PhaseExpand: the volume is smaller than the disk, or the driver
	// failed its ControllerExpandVolume (CDI's PrepClaim resizes the
	// clone's volume before it hands it over).
	PhaseExpand = "expand"
	// PhaseBind: the volume is whole and not the disk's yet (CDI's rebind
	// of the clone's volume to the disk's claim).
	PhaseBind = "bind"
	// PhaseFinishing: the disk's claim is bound, CDI's DataVolume is not
	// done (a host-assisted copy's pods, CDI's own status).
	PhaseFinishing = "finishing"
)

// Phases lists every phase in order.
var Phases = []string{PhaseGoldenImport, PhasePlanning, PhaseProvisioning, PhaseCreateVolume, PhaseExpand, PhaseBind, PhaseFinishing}

// Timeline is when a clone disk passed each point that objects or the tap
// date. Every time is an object's timestamp or the tap's, never the time a
// pass looked, so a restart rebuilds the same timeline. A zero time is a
// point not reached, or one whose object is gone (CDI deletes its
// tmp-pvc once the disk is bound).
type Timeline struct {
	// Requested is when CDI could start the clone: the later of the
	// disk's creation and its golden's import finishing.
	Requested time.Time `json:"requested,omitzero"`
	// Claimed is when CDI made the claim the clone's volume is
	// provisioned for (its tmp-pvc); zero for a disk CDI makes without one
	// (a host-assisted copy), whose planning then counts as provisioning.
	Claimed time.Time `json:"claimed,omitzero"`
	// FirstCreateVolume is the first CreateVolume's start, VolumeCreated
	// the end of the one that succeeded (as the tap saw them).
	FirstCreateVolume time.Time `json:"firstCreateVolume,omitzero"`
	VolumeCreated     time.Time `json:"volumeCreated,omitzero"`
	// CreateVolumeAttempts counts the CreateVolume calls that made the
	// volume, Refusals those the driver refused first, each with its code
	// (the last 8), as the tap saw them: a clone's create-volume phase
	// in the driver's words.
	CreateVolumeAttempts int             `json:"createVolumeAttempts,omitempty"`
	Refusals             []fleet.Refusal `json:"refusals,omitempty"`
	// ExpandRequested is the start of the first ControllerExpandVolume,
	// Expanded the end of the last successful one; ExpandRefusals are the
	// calls the driver failed before it (the last 8), each with its code:
	// the expand phase in the driver's words.
	ExpandRequested time.Time       `json:"expandRequested,omitzero"`
	Expanded        time.Time       `json:"expanded,omitzero"`
	ExpandRefusals  []fleet.Refusal `json:"expandRefusals,omitempty"`
	// Bound is when CDI saw the disk's claim bound (for a clone, once it
	// has handed the volume over; for a host-assisted copy, before the
	// copy runs).
	Bound time.Time `json:"bound,omitzero"`
	// Ready is when CDI declared the disk ready.
	Ready time.Time `json:"ready,omitzero"`
}

// MaxExpandRefusals bounds Timeline.ExpandRefusals, as the tap bounds a
// volume's CreateVolume refusals.
const MaxExpandRefusals = 8

// IsZero reports whether no point is known.
func (t Timeline) IsZero() bool {
	return t.Requested.IsZero() && t.Claimed.IsZero() && t.FirstCreateVolume.IsZero() && t.VolumeCreated.IsZero() &&
		t.CreateVolumeAttempts == 0 && len(t.Refusals) == 0 && t.ExpandRequested.IsZero() && t.Expanded.IsZero() && len(t.ExpandRefusals) == 0 && t.Bound.IsZero() &&
		t.Ready.IsZero()
}

// Step is the time between two points of a timeline, attributed to the
// phase the clone was in.
type Step struct {
	Phase    string
	Duration time.Duration
}

// Steps are the timeline's known points in order, each step the time from
// the previous known point to it: a point that is missing merges its phase
// into the next known one.
func (t Timeline) Steps() []Step {
	points := []struct {
		at    time.Time
		phase string // the phase that ends at this point
	}{
		{t.Claimed, PhasePlanning},
		{t.FirstCreateVolume, PhaseProvisioning},
		{t.VolumeCreated, PhaseCreateVolume},
		{t.Expanded, PhaseExpand},
		{t.Bound, PhaseBind},      // CDI's rebind of the volume to the disk's claim
		{t.Ready, PhaseFinishing}, // a host-assisted copy, CDI's own finish
	}
	var out []Step
	prev := t.Requested
	for _, p := range points {
		if p.at.IsZero() || prev.IsZero() || p.at.Before(prev) {
			continue
		}
		out = append(out, Step{Phase: p.phase, Duration: p.at.Sub(prev)})
		prev = p.at
	}
	return out
}
