// Package predict says, before any worker disk exists, which path CDI's
// clone planner (v1.65) will take for a disk cloned from a golden onto a
// StorageClass: csi-clone, snapshot-clone, host-assisted or blocked, with
// the reason, the risks CDI does not check (a node-local target, a class
// other than the golden's) and what makes the answer uncertain. It is a pure
// function of objects already in the API: StorageClasses, StorageProfiles,
// the CDI resource, VolumeSnapshotClasses, CSIDrivers and the golden.
//
// The rules follow CDI v1.65.0's pkg/controller/clone/planner.go
// (Planner.computeStrategyForSourcePVC, validateTargetStorageClassAssignment,
// validateSourcePVC, validateAdvancedClonePVC) and clone/common.go
// (GetGlobalCloneStrategyOverride, GetCommonDriver,
// GetCompatibleVolumeSnapshotClass), plus the DataVolume controller's choice
// of the populator path (datavolume/util.go storageClassCSIDriverExists).
package predict

import (
	"slices"
	"sort"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
)

// Paths a clone can take; blocked means CDI will not (or the driver cannot)
// make the disk at all.
const (
	PathCSIClone      = "csi-clone"
	PathSnapshotClone = "snapshot-clone"
	PathHostAssisted  = "host-assisted"
	PathBlocked       = "blocked"
)

// Paths lists every path, the label values of csi_clone_path_predicted.
var Paths = []string{PathCSIClone, PathSnapshotClone, PathHostAssisted, PathBlocked}

// Flags: risks on top of the path that CDI itself does not check.
const (
	// FlagCrossNode: the target class is node-local or topology-constrained
	// (or the golden's volume is pinned to nodes), so a clone made on one
	// node may be unreachable from the node the VM runs on.
	FlagCrossNode = "risk: cross-node"
	// FlagClassMismatch: the target class is not the golden's, even where
	// the driver can clone across classes.
	FlagClassMismatch = "class-mismatch"
	// FlagNotReadWriteMany: a worker disk's claim would not be
	// ReadWriteMany, so KubeVirt cannot live-migrate the worker's VM
	// (Pair.AccessModes).
	FlagNotReadWriteMany = "risk: not ReadWriteMany"
)

// ReadWriteMany is the access mode a live-migrating VM's disk needs.
const ReadWriteMany = "ReadWriteMany"

// Golden is what the planner reads of a clone source.
type Golden struct {
	Namespace, Name string
	// Class is the golden's resolved StorageClass ("" while unknown).
	Class string
	Phase string
	// Driver is the CSI driver of its bound PV ("" before it is bound: the
	// class's provisioner is used then, as GetCommonDriver does).
	Driver string
	// VolumeMode is Block or Filesystem ("" unknown).
	VolumeMode string
	// CapacityBytes is the bound claim's status.capacity, what
	// validateAdvancedClonePVC compares; RequestedBytes its claim's request
	// (not the DataVolume's: a spec.storage Filesystem golden's claim has the
	// overhead added), what validateClone and validateSourcePVC compare.
	CapacityBytes, RequestedBytes int64
	// ContentType is its claim's cdi.kubevirt.io/storage.contentType ("" none).
	ContentType string
	// VirtualSize is the image size CDI recorded on its claim (0 unknown).
	VirtualSize int64
	// PinnedNodes are the nodes its PV's nodeAffinity allows (nil: any).
	PinnedNodes []string
	// Snapshot is set when the golden is a VolumeSnapshot (a DataVolume's
	// source.snapshot): what CDI reads of it and its bound content. Class
	// is then its source claim's class, Driver the content's driver.
	Snapshot *cdirules.Snapshot
}

// Target is a disk that would be cloned from the golden: a DataVolume CDI
// has not rendered yet, or (Claimed) the claim CDI created for it.
type Target struct {
	// Class is the resolved StorageClass; Unresolved when the disk names
	// none and no default exists.
	Class      string
	Unresolved bool
	// Kind is how the DataVolume spells its claim ("" is spec.storage, the
	// platform's).
	Kind cdirules.SpecKind
	// VolumeMode and AccessModes are the DataVolume's ("" / nil: as CDI
	// renders them: from the StorageProfile for spec.storage, Filesystem for
	// spec.pvc).
	VolumeMode  string
	AccessModes []string
	// Bytes is the DataVolume's request; 0 means none (CDI sizes the clone
	// at the golden).
	Bytes       int64
	ContentType string
	// Claimed: Class, VolumeMode and Bytes are the claim's, rendered.
	Claimed bool
	// PerDisk are the DataVolume's per-disk annotations CDI reads; for a
	// Claimed target, the claim's permissiveClone (CDI's own, from
	// detectCloneSize, or the user's, copied).
	PerDisk cdirules.PerDisk
	// UnqualifiedSource: the DataVolume reaches its golden through a
	// DataSource that names the golden without a namespace
	// (cdirules.ErrEmptySourceNamespace).
	UnqualifiedSource bool
	// DataSource: the disk is a bare claim whose dataSourceRef names the
	// golden: the external-provisioner clones or restores it, CDI has no
	// part (Class, VolumeMode and Bytes are the claim's).
	DataSource bool
}

func (t Target) dataVolume() cdirules.DataVolume {
	kind := t.Kind
	if kind == "" {
		kind = cdirules.KindStorage
	}
	class := t.Class
	return cdirules.DataVolume{Kind: kind, Class: &class, VolumeMode: t.VolumeMode, AccessModes: t.AccessModes,
		Bytes: t.Bytes, ContentType: t.ContentType, PerDisk: t.PerDisk, UnqualifiedSource: t.UnqualifiedSource}
}

// SnapshotClass is the part of a VolumeSnapshotClass that decides whether
// CDI finds one.
type SnapshotClass = cdirules.SnapshotClass

// Inputs are the cluster objects the planner reads.
type Inputs struct {
	Classes         []*storagev1.StorageClass
	Profiles        []*cdiv1.StorageProfile
	CDIs            []*cdiv1.CDI
	SnapshotClasses []SnapshotClass
	// CDIConfigs are the CDIConfig objects (CDI keeps one, "config"): their
	// status.filesystemOverhead sizes Filesystem claims.
	CDIConfigs []*cdiv1.CDIConfig
	// CSIDrivers are the names of the CSIDriver objects.
	CSIDrivers []string
	// DataSources are what a DataVolume's sourceRef clones through
	// (cdirules.DataSourcePVC); the admission guard reads them.
	DataSources []*cdiv1.DataSource
}

// State indexes Inputs for many predictions; build it once per change.
type State struct {
	classes  map[string]*storagev1.StorageClass
	profiles map[string]*cdiv1.StorageProfile
	cluster  cdirules.Cluster
	// cdiProblem is why no active CDI can be found ("" when one is).
	cdiProblem string
}

// NewState indexes the inputs.
func NewState(in Inputs) *State {
	s := &State{classes: map[string]*storagev1.StorageClass{}, profiles: map[string]*cdiv1.StorageProfile{}}
	for _, sc := range in.Classes {
		s.classes[sc.Name] = sc
	}
	for _, p := range in.Profiles {
		s.profiles[p.Name] = p
	}
	drivers := map[string]bool{}
	for _, d := range in.CSIDrivers {
		drivers[d] = true
	}
	env := cdirules.Env{Classes: s.classes, Profiles: s.profiles}
	for _, c := range in.CDIConfigs {
		if c.Status.FilesystemOverhead != nil {
			env.Overhead = c.Status.FilesystemOverhead
		}
	}
	s.cluster = cdirules.Cluster{Env: env, Defaults: cdirules.DefaultClasses(in.Classes), CDIs: in.CDIs,
		SnapshotClasses: in.SnapshotClasses, CSIDrivers: drivers}
	_, s.cdiProblem = cdirules.ActiveCDI(in.CDIs)
	return s
}

// CSIClasses lists the StorageClasses whose provisioner has a CSIDriver
// object, sorted by name: the classes a golden can be cloned onto with CDI's
// populators.
func (s *State) CSIClasses() []string {
	var out []string
	for name, sc := range s.classes {
		if s.cluster.CSIDrivers[sc.Provisioner] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Prediction is the path one disk would take and why.
type Prediction struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Strategy is what CDI picks before any fallback (csi-clone, snapshot,
	// copy), "" when CDI does not get that far.
	Strategy string `json:"strategy,omitempty"`
	// Message says why in words, naming the objects.
	Message string `json:"message"`
	// Flags are risks CDI does not check (FlagCrossNode, FlagClassMismatch).
	Flags []string `json:"flags,omitempty"`
	// Uncertain lists what could make the prediction wrong; empty when the
	// rules CDI applies decide it from objects that exist.
	Uncertain []string `json:"uncertain,omitempty"`
	// AccessModes are the access modes of the disk's claim: the claim's own
	// once CDI made it, else what CDI renders (cdirules.RenderClaim); nil
	// when it renders none.
	AccessModes []string `json:"accessModes,omitempty"`
}

// Bad reports whether the path defeats the golden: a copy over the network
// or no disk at all.
func (p Prediction) Bad() bool { return p.Path == PathHostAssisted || p.Path == PathBlocked }

// GuardRules are the admission guard's switches beyond the path: the
// sidecar's --admission-* flags, written into its parameters.
type GuardRules struct {
	// AllowClassMismatch admits a disk onto another class than its
	// golden's (--admission-allow-class-mismatch); by default the guard
	// warns about it (Warn) or refuses it (Deny), as Cozystack's render does.
	AllowClassMismatch bool
}

// GuardRefuses reports whether the admission guard in Deny refuses a disk
// so predicted: a bad path, or a class other than the golden's unless the
// rules allow it. The verdict of either carries a bad reason.
func (p Prediction) GuardRefuses(r GuardRules) bool {
	return p.Bad() || (p.HasFlag(FlagClassMismatch) && !r.AllowClassMismatch)
}

// HasFlag reports whether a flag is set.
func (p Prediction) HasFlag(f string) bool {
	for _, x := range p.Flags {
		if x == f {
			return true
		}
	}
	return false
}

// Predict applies CDI's rules (package cdirules), in CDI's order, to one
// golden and target.
func (s *State) Predict(g Golden, t Target) Prediction {
	if g.Phase == "Failed" {
		return blocked(ReasonGoldenFailed, "golden "+g.ref()+" failed to import; CDI waits for a source that will never be ready")
	}
	if t.Unresolved {
		// validateTargetStorageClassAssignment: a claim without a class
		// makes CDI wait, for ever when no default class exists.
		return blocked(ReasonClassUnresolved, "the disk names no StorageClass and no default class exists: the claim never gets a class")
	}
	sc := s.classes[t.Class]
	if t.DataSource {
		return s.predictDataSource(g, t, sc)
	}
	src, assumed := s.source(g)
	var o cdirules.Outcome
	// The access modes the disk's claim has (a Claimed target's own) or
	// gets as CDI renders it (nil when CDI renders none).
	var accessModes []string
	claimed := cdirules.Claim{Class: t.Class, HasClass: true, VolumeMode: resolvedMode(t.VolumeMode), Bytes: t.Bytes, PerDisk: t.PerDisk,
		UnqualifiedSource: t.UnqualifiedSource}
	var claim cdirules.Claim // Claim{} when none is rendered
	switch {
	case t.Claimed && g.Snapshot != nil:
		o, accessModes = s.cluster.PlanSnapshotClaim(*g.Snapshot, claimed), t.AccessModes
	case t.Claimed:
		o, accessModes = s.cluster.PlanClaim(src, claimed), t.AccessModes
	case g.Snapshot != nil:
		o, claim, _ = s.cluster.CloneFromSnapshotWithClaim(t.dataVolume(), *g.Snapshot)
		accessModes = claim.AccessModes
	default:
		o, claim, _ = s.cluster.CloneWithClaim(t.dataVolume(), src)
		accessModes = claim.AccessModes
	}
	// CDI renders and validates the DataVolume and waits for its source
	// snapshot before it looks for the class's CSIDriver.
	if sc == nil && o.Validation == "" && !o.Render && !strings.HasPrefix(o.Error, cdirules.AnnUsePopulator) && o.Waits != cdirules.WaitsSourceSnapshot {
		// CDI renders and validates the DataVolume first; then it finds no
		// CSIDriver for the missing class and takes its legacy path, whose
		// claim never binds.
		return blocked(ReasonClassNotFound, "StorageClass "+quote(t.Class)+" does not exist: the disk's claim is never provisioned")
	}
	p := s.fromOutcome(g, t, o)
	s.addFlags(&p, g, t, sc)
	s.addUncertainty(&p, g, t, assumed)
	p.AccessModes = accessModes
	return p
}

// LacksReadWriteMany reports whether known access modes leave out
// ReadWriteMany (false when none are known).
func LacksReadWriteMany(modes []string) bool {
	return len(modes) > 0 && !slices.Contains(modes, ReadWriteMany)
}
