package fleet

import (
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// VolumeEvidence is what the tap saw of the CSI calls that made and grew one
// volume. It is written as compact JSON on the volume's PV (AnnCSIEvidence),
// so it survives restarts, follows the PV through CDI's rebind and reaches
// whichever replica leads. Only names, sizes, handles and gRPC status codes
// are kept: never parameters or secrets.
type VolumeEvidence struct {
	// Name is the CreateVolume name (pvc-<uid of the claim it was made for>).
	Name string `json:"name,omitempty"`
	// Claim is the claim the provisioner created it for ("ns/name", from
	// csi.storage.k8s.io/pvc/*): CDI's tmp-pvc-<target uid> for a clone.
	Claim string `json:"claim,omitempty"`
	// FirstAttempt is the start of the first CreateVolume for Name, Created
	// the end of the one that succeeded; Attempts counts them all.
	FirstAttempt time.Time `json:"firstAttempt,omitzero"`
	Created      time.Time `json:"created,omitzero"`
	Attempts     int       `json:"attempts,omitempty"`
	// RequiredBytes was asked, CapacityBytes returned.
	RequiredBytes int64 `json:"requiredBytes,omitempty"`
	CapacityBytes int64 `json:"capacityBytes,omitempty"`
	// SourceVolume / SourceSnapshot is the content source the driver was
	// asked to copy; SnapshotOf is the volume that snapshot was cut from.
	SourceVolume   string `json:"sourceVolume,omitempty"`
	SourceSnapshot string `json:"sourceSnapshot,omitempty"`
	SnapshotOf     string `json:"snapshotOf,omitempty"`
	Block          bool   `json:"block,omitempty"`
	// Refusals are the CreateVolume calls for Name the driver refused
	// before the one that succeeded, oldest first, the last maxRefusals
	// kept (Attempts counts them all).
	Refusals []Refusal `json:"refusals,omitempty"`
	// Expansions are the ControllerExpandVolume calls on the volume, oldest
	// first, the last maxExpansions kept.
	Expansions []Expansion `json:"expansions,omitempty"`
}

// Refusal is one refused CreateVolume: when it ended, and the driver's
// gRPC code.
type Refusal struct {
	At   time.Time `json:"at"`
	Code string    `json:"code"`
}

// Expansion is one ControllerExpandVolume call: At its end, Millis how
// long it took (so it was asked for at At less Millis).
type Expansion struct {
	At            time.Time `json:"at"`
	Millis        int64     `json:"ms,omitempty"`
	RequiredBytes int64     `json:"requiredBytes"`
	CapacityBytes int64     `json:"capacityBytes,omitempty"`
	Code          string    `json:"code"`
	Message       string    `json:"message,omitempty"`
}

// DriverError is the last failed CreateVolume for a clone, written as JSON on
// the clone's target PVC (AnnDriverError): a clone that never succeeds has no
// PV, and a stuck verdict must carry the driver's own words.
type DriverError struct {
	Method   string    `json:"method"`
	Code     string    `json:"code"`
	Message  string    `json:"message,omitempty"`
	Claim    string    `json:"claim"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	Attempts int       `json:"attempts"`
}

const (
	maxExpansions      = 8
	maxRefusals        = 8
	MaxMessageBytes    = 300
	maxPendingEntries  = 10000
	DriverErrorRefresh = time.Minute
)

// created reports whether the evidence holds a successful CreateVolume.
func (e *VolumeEvidence) CreateSeen() bool { return !e.Created.IsZero() }

// finalCapacity is the largest capacity the driver reported for the volume,
// and when it reported it.
func (e *VolumeEvidence) FinalCapacity() (int64, time.Time) {
	capBytes, at := e.CapacityBytes, e.Created
	for _, x := range e.Expansions {
		if x.Code != codes.OK.String() {
			continue
		}
		c := x.CapacityBytes
		if c == 0 {
			c = x.RequiredBytes
		}
		if c > capBytes {
			capBytes, at = c, x.At
		}
	}
	return capBytes, at
}

// expandedTo reports whether a successful ControllerExpandVolume reached
// want bytes, and the last failed expansion if none did.
func (e *VolumeEvidence) ExpandedTo(want int64) (bool, *Expansion) {
	var failed *Expansion
	for i := range e.Expansions {
		x := &e.Expansions[i]
		if x.Code != codes.OK.String() {
			failed = x
			continue
		}
		if x.CapacityBytes >= want || x.RequiredBytes >= want {
			return true, nil
		}
	}
	return false, failed
}

// merge folds other (seen by this replica) into e (already on the PV). The
// create fields come from whichever side saw the successful CreateVolume;
// expansions are unioned.
func (e *VolumeEvidence) Merge(other *VolumeEvidence) {
	if !e.CreateSeen() && other.CreateSeen() {
		exp := e.Expansions
		*e = *other
		e.Expansions = exp
		e.addExpansions(other.Expansions)
		return
	}
	if e.CreateSeen() && other.CreateSeen() {
		if other.FirstAttempt.Before(e.FirstAttempt) {
			e.FirstAttempt = other.FirstAttempt
		}
		e.Attempts = max(e.Attempts, other.Attempts)
	}
	if e.SnapshotOf == "" {
		e.SnapshotOf = other.SnapshotOf
	}
	e.addExpansions(other.Expansions)
}

func (e *VolumeEvidence) addExpansions(xs []Expansion) {
	seen := map[string]bool{}
	key := func(x Expansion) string { return x.At.UTC().Format(time.RFC3339Nano) + "/" + x.Code }
	for _, x := range e.Expansions {
		seen[key(x)] = true
	}
	for _, x := range xs {
		if !seen[key(x)] {
			e.Expansions = append(e.Expansions, x)
			seen[key(x)] = true
		}
	}
	sort.SliceStable(e.Expansions, func(i, j int) bool { return e.Expansions[i].At.Before(e.Expansions[j].At) })
	if n := len(e.Expansions); n > maxExpansions {
		e.Expansions = e.Expansions[n-maxExpansions:]
	}
}

// attempt tracks the CreateVolume calls for one volume name.
type attempt struct {
	first    time.Time
	count    int
	seen     time.Time
	refusals []Refusal
}

// pendingVolume is evidence waiting for its PV.
type pendingVolume struct {
	Ev   VolumeEvidence
	seen time.Time
}

// pendingError is a driver error waiting to be written on its target PVC.
type pendingError struct {
	Err         DriverError
	Written     time.Time
	LastWritten string
	Dirty       bool
}

// evidenceBook holds what this replica saw and has not yet persisted. It is
// owned by the evidence goroutine: no locking.
type EvidenceBook struct {
	ttl       time.Duration
	attempts  map[string]*attempt        // CreateVolume name
	Volumes   map[string]*pendingVolume  // volume handle
	Snapshots map[string]pendingSnapshot // snapshot handle
	Errors    map[string]*pendingError   // claim "ns/name" the provisioner served
	// cleared holds claims whose CreateVolume succeeded, and when: a driver
	// error left on them by an earlier attempt no longer holds.
	Cleared map[string]time.Time
	Expired int64
}

type pendingSnapshot struct {
	Source string
	seen   time.Time
}

func NewEvidenceBook(ttl time.Duration) *EvidenceBook {
	return &EvidenceBook{
		ttl:       ttl,
		attempts:  map[string]*attempt{},
		Volumes:   map[string]*pendingVolume{},
		Snapshots: map[string]pendingSnapshot{},
		Errors:    map[string]*pendingError{},
		Cleared:   map[string]time.Time{},
	}
}

// apply records one observation. Calls that failed are kept only as driver
// errors; everything else irrelevant to clones is ignored.
func (b *EvidenceBook) Apply(o sidecar.Observation) {
	switch o.Method {
	case sidecar.MethodCreateVolume:
		b.applyCreate(o)
	case sidecar.MethodControllerExpandVolume:
		b.applyExpand(o)
	case sidecar.MethodCreateSnapshot:
		if o.Code == codes.OK && o.Response.SnapshotID != "" && o.Request.SourceVolumeID != "" {
			b.Snapshots[o.Response.SnapshotID] = pendingSnapshot{Source: o.Request.SourceVolumeID, seen: o.End}
		}
	case sidecar.MethodDeleteVolume:
		if o.Code == codes.OK {
			delete(b.Volumes, o.Request.VolumeID)
		}
	}
}

func (b *EvidenceBook) applyCreate(o sidecar.Observation) {
	a := b.attempts[o.Request.Name]
	if a == nil {
		a = &attempt{first: o.Start}
		b.attempts[o.Request.Name] = a
		b.evictIfFull(len(b.attempts), func() { evictOldest(b.attempts, func(a *attempt) time.Time { return a.seen }) })
	}
	a.count++
	a.seen = o.End
	claim := claimParam(o.Request.Parameters)
	if o.Code != codes.OK || o.Response.VolumeID == "" {
		if len(a.refusals) == maxRefusals {
			a.refusals = append(a.refusals[:0], a.refusals[1:]...)
		}
		a.refusals = append(a.refusals, Refusal{At: o.End, Code: o.Code.String()})
		b.recordError(o, claim, a)
		return
	}
	if claim != "" {
		// The retry succeeded: the error of an earlier attempt, written by
		// this replica or another, is void.
		delete(b.Errors, claim)
		b.Cleared[claim] = o.End
		b.evictIfFull(len(b.Cleared), func() { evictOldest(b.Cleared, func(t time.Time) time.Time { return t }) })
	}
	pv := &pendingVolume{seen: o.End, Ev: VolumeEvidence{
		Name: o.Request.Name, Claim: claim,
		FirstAttempt: a.first, Created: o.End, Attempts: a.count, Refusals: slices.Clone(a.refusals),
		RequiredBytes: o.Request.RequiredBytes, CapacityBytes: o.Response.CapacityBytes,
		SourceVolume:   firstNonEmpty(o.Response.SourceVolumeID, o.Request.SourceVolumeID),
		SourceSnapshot: firstNonEmpty(o.Response.SourceSnapshotID, o.Request.SourceSnapshotID),
		Block:          o.Request.Block,
	}}
	if prev := b.Volumes[o.Response.VolumeID]; prev != nil {
		pv.Ev.Merge(&prev.Ev)
	}
	b.Volumes[o.Response.VolumeID] = pv
	b.evictIfFull(len(b.Volumes), func() { evictOldest(b.Volumes, func(p *pendingVolume) time.Time { return p.seen }) })
}

func (b *EvidenceBook) recordError(o sidecar.Observation, claim string, a *attempt) {
	if claim == "" {
		return
	}
	pe := b.Errors[claim]
	if pe == nil {
		pe = &pendingError{Err: DriverError{First: a.first}}
		b.Errors[claim] = pe
		b.evictIfFull(len(b.Errors), func() { evictOldest(b.Errors, func(p *pendingError) time.Time { return p.Err.Last }) })
	}
	pe.Err.Method = "CreateVolume"
	pe.Err.Code = o.Code.String()
	pe.Err.Message = Clip(o.Message, MaxMessageBytes)
	pe.Err.Claim = claim
	pe.Err.Last = o.End
	pe.Err.Attempts = a.count
	pe.Dirty = true
}

func (b *EvidenceBook) applyExpand(o sidecar.Observation) {
	id := o.Request.VolumeID
	if id == "" {
		return
	}
	x := Expansion{At: o.End, Millis: max(o.End.Sub(o.Start), 0).Milliseconds(), RequiredBytes: o.Request.RequiredBytes, CapacityBytes: o.Response.CapacityBytes,
		Code: o.Code.String()}
	if o.Code != codes.OK {
		x.Message = Clip(o.Message, MaxMessageBytes)
	}
	pv := b.Volumes[id]
	if pv == nil {
		pv = &pendingVolume{}
		b.Volumes[id] = pv
		b.evictIfFull(len(b.Volumes), func() { evictOldest(b.Volumes, func(p *pendingVolume) time.Time { return p.seen }) })
	}
	pv.seen = o.End
	pv.Ev.addExpansions([]Expansion{x})
}

// expire drops what waited longer than the TTL for its object; it is
// counted, never silently lost.
func (b *EvidenceBook) Expire(now time.Time) {
	cut := now.Add(-b.ttl)
	for k, a := range b.attempts {
		if a.seen.Before(cut) {
			delete(b.attempts, k)
		}
	}
	for k, p := range b.Volumes {
		if p.seen.Before(cut) {
			delete(b.Volumes, k)
			b.Expired++
		}
	}
	for k, s := range b.Snapshots {
		if s.seen.Before(cut) {
			delete(b.Snapshots, k)
		}
	}
	for k, at := range b.Cleared {
		if at.Before(cut) {
			delete(b.Cleared, k)
		}
	}
	for k, e := range b.Errors {
		if e.Err.Last.Before(cut) {
			if e.Dirty {
				b.Expired++
			}
			delete(b.Errors, k)
		}
	}
}

func (b *EvidenceBook) evictIfFull(n int, evict func()) {
	if n > maxPendingEntries {
		evict()
		b.Expired++
	}
}

func evictOldest[V any](m map[string]V, seen func(V) time.Time) {
	var oldest string
	var at time.Time
	for k, v := range m {
		if t := seen(v); oldest == "" || t.Before(at) {
			oldest, at = k, t
		}
	}
	delete(m, oldest)
}

// claimParam is "namespace/name" of the claim the external-provisioner
// served, from --extra-create-metadata's parameters; only these two
// parameters are ever read.
func claimParam(p map[string]string) string {
	name, ns := p[ParamPVCName], p[ParamPVCNamespace]
	if name == "" {
		return ""
	}
	return ns + "/" + name
}

// targetOfClaim resolves the claim a CreateVolume served to the claim the
// verdict is about: CDI's tmp-pvc-<uid> stands for the target with that UID;
// any other claim is its own target.
func TargetOfClaim(claim string) (uid types.UID, ref types.NamespacedName) {
	ns, name, _ := strings.Cut(claim, "/")
	if rest, ok := strings.CutPrefix(name, CdiTmpPVCPrefix); ok && rest != "" {
		return types.UID(rest), types.NamespacedName{}
	}
	return "", types.NamespacedName{Namespace: ns, Name: name}
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// changed reports whether the error differs from the one last written.
func (pe *pendingError) Changed() bool { return pe.LastWritten != pe.Err.Code+"\x00"+pe.Err.Message }

// volumesSeenSince counts the volumes whose evidence waits for its PV and
// was observed at or after since.
func (b *EvidenceBook) VolumesSeenSince(since time.Time) int {
	n := 0
	for _, p := range b.Volumes {
		if !p.seen.Before(since) {
			n++
		}
	}
	return n
}
