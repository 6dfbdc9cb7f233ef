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
	"fmt"
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
)

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
}

func (t Target) dataVolume() cdirules.DataVolume {
	kind := t.Kind
	if kind == "" {
		kind = cdirules.KindStorage
	}
	class := t.Class
	return cdirules.DataVolume{Kind: kind, Class: &class, VolumeMode: t.VolumeMode, AccessModes: t.AccessModes,
		Bytes: t.Bytes, ContentType: t.ContentType}
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
}

// Bad reports whether the path defeats the golden: a copy over the network
// or no disk at all.
func (p Prediction) Bad() bool { return p.Path == PathHostAssisted || p.Path == PathBlocked }

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
	src, assumed := s.source(g)
	var o cdirules.Outcome
	if t.Claimed {
		o = s.cluster.PlanClaim(src, cdirules.Claim{Class: t.Class, HasClass: true, VolumeMode: resolvedMode(t.VolumeMode), Bytes: t.Bytes}, false)
	} else {
		o = s.cluster.Clone(t.dataVolume(), src)
	}
	if sc == nil && o.Validation == "" && !o.Render {
		// CDI renders and validates the DataVolume first; then it finds no
		// CSIDriver for the missing class and takes its legacy path, whose
		// claim never binds.
		return blocked(ReasonClassNotFound, "StorageClass "+quote(t.Class)+" does not exist: the disk's claim is never provisioned")
	}
	p := s.fromOutcome(g, t, o)
	s.addFlags(&p, g, t, sc)
	s.addUncertainty(&p, g, t, assumed)
	return p
}

// source is the golden as CDI reads its claim. Before the golden is bound
// its request stands for its capacity; a Filesystem golden whose image size
// CDI has not recorded is taken to hold an image that fills it (assumed).
func (s *State) source(g Golden) (src cdirules.Source, assumed bool) {
	src = cdirules.Source{Class: g.Class, Driver: g.Driver, VolumeMode: g.VolumeMode, RequestBytes: g.RequestedBytes,
		CapacityBytes: g.CapacityBytes, ContentType: g.ContentType, VirtualSize: g.VirtualSize}
	if src.CapacityBytes == 0 {
		src.CapacityBytes = src.RequestBytes
	}
	if src.NeedsImageSize() && src.VirtualSize == 0 {
		src.VirtualSize, assumed = cdirules.LargestImage(src.CapacityBytes, cdirules.OverheadFor(g.Class, true, s.cluster.Defaults, s.cluster.Env)), true
	}
	return src, assumed
}

func resolvedMode(m string) string {
	if m == cdirules.Block {
		return cdirules.Block
	}
	return cdirules.Filesystem
}

// fromOutcome says what CDI's outcome means for the disk, in words.
func (s *State) fromOutcome(g Golden, t Target, o cdirules.Outcome) Prediction {
	switch {
	case o.Validation != "" && strings.Contains(o.Validation, "contentType"):
		return blocked(ReasonContentTypeMismatch, "CDI refuses the clone (CloneValidationFailed): "+o.Validation)
	case o.Validation != "":
		return blocked(ReasonTargetTooSmall, "the disk's claim would be smaller than golden "+g.ref()+"'s ("+bytesText(g.RequestedBytes)+
			"): CDI refuses the clone (CloneValidationFailed: "+o.Validation+")")
	case o.Waits != "":
		return blocked(ReasonClassUnresolved, "CDI waits for "+o.Waits)
	case o.Error != "" && s.cdiProblem != "" && o.CloneType == "" && o.Fallback == "" && o.Error == s.cdiProblem:
		return blocked(ReasonNoActiveCDI, s.cdiProblem+": CDI cannot choose a clone strategy")
	case o.Error != "" && o.CloneType == cdirules.StrategySnapshot:
		return withStrategy(blocked(ReasonSnapshotClassNotFound, "snapshot strategy: the StorageProfiles name a VolumeSnapshotClass that does not exist: CDI cannot plan the clone"), o.CloneType)
	case o.Error != "" && o.StrategyFrom != "" && !cdirules.KnownStrategy(o.CloneType):
		return withStrategy(blocked(ReasonUnknownStrategy, "the clone strategy "+quote(o.CloneType)+" ("+s.strategyWhy(t, o)+
			") is not one CDI knows: every clone fails with \""+o.Error+"\""), o.CloneType)
	case o.Error != "":
		return blocked(ReasonClaimInvalid, "CDI cannot render or plan the disk's claim: "+o.Error)
	case o.Fallback != "":
		return s.fallbackPrediction(g, t, o)
	case o.CloneType == cdirules.StrategyCopy:
		return s.copyPrediction(t, o)
	case o.CloneType == cdirules.StrategySnapshot:
		return Prediction{Path: PathSnapshotClone, Reason: strategyReason(o.StrategyFrom), Strategy: o.CloneType,
			Message: "CDI snapshots the golden's volume and restores the snapshot (" + s.strategyWhy(t, o) + ")"}
	}
	return Prediction{Path: PathCSIClone, Reason: strategyReason(o.StrategyFrom), Strategy: o.CloneType,
		Message: "CDI asks the driver for a CSI clone of the golden's volume (" + s.strategyWhy(t, o) + ")"}
}

// copyPrediction: the strategy itself is copy. Where it comes from decides
// the fix: set by someone (override, profile spec, class annotation), or
// derived by CDI for a driver outside its capabilities table that has no
// VolumeSnapshotClass.
func (s *State) copyPrediction(t Target, o cdirules.Outcome) Prediction {
	if o.StrategyFrom == cdirules.FromProfile &&
		cdirules.ProfileStrategyOrigin(s.classes[t.Class], s.profiles[t.Class]) == cdirules.OriginDerived {
		return Prediction{Path: PathHostAssisted, Reason: ReasonDerivedCopy, Strategy: o.CloneType,
			Message: "CDI derived the clone strategy copy for class " + t.Class + " (its driver " + quote(s.classes[t.Class].Provisioner) +
				" is not in CDI's clone-strategy table and has no VolumeSnapshotClass): every clone onto it is host-assisted, from any class"}
	}
	return Prediction{Path: PathHostAssisted, Reason: ReasonCopyStrategy, Strategy: o.CloneType,
		Message: "the clone strategy is copy (" + s.strategyWhy(t, o) + "): CDI always copies host-assisted"}
}

func (s *State) fallbackPrediction(g Golden, t Target, o cdirules.Outcome) Prediction {
	sc := s.classes[t.Class]
	var p Prediction
	switch o.Fallback {
	case cdirules.FallbackNoPopulator:
		p = fallback(ReasonNoPopulator, "provisioner "+sc.Provisioner+" of class "+t.Class+
			" has no CSIDriver object: CDI does not use its clone populator and copies host-assisted")
	case cdirules.FallbackNoVolumeSnapshotClass:
		p = fallback(ReasonNoVolumeSnapshotClass, "snapshot strategy ("+s.strategyWhy(t, o)+") and no VolumeSnapshotClass CDI can use for the golden's driver "+
			quote(g.Driver)+" and class "+t.Class+"'s "+quote(sc.Provisioner)+": CDI copies host-assisted (NoVolumeSnapshotClass)")
	case cdirules.FallbackIncompatibleProvisioners:
		p = fallback(ReasonIncompatibleProvisioners, "the golden's CSI driver "+quote(g.Driver)+
			" is not class "+t.Class+"'s "+quote(sc.Provisioner)+": CDI copies host-assisted (IncompatibleProvisioners)")
	case cdirules.FallbackIncompatibleVolumeModes:
		p = fallback(ReasonIncompatibleVolumeModes, "the golden is "+resolvedMode(g.VolumeMode)+" and the disk's claim "+
			s.claimMode(t)+": CDI copies host-assisted (IncompatibleVolumeModes)")
	default:
		p = fallback(ReasonNoVolumeExpansion, "the disk's claim is larger than golden "+g.ref()+"'s capacity and class "+t.Class+
			" has no allowVolumeExpansion: CDI copies host-assisted (NoVolumeExpansion)")
	}
	p.Strategy = o.Strategy
	return p
}

// claimMode is the volume mode the disk's claim gets, for messages.
func (s *State) claimMode(t Target) string {
	if t.Claimed {
		return resolvedMode(t.VolumeMode)
	}
	c, err := cdirules.RenderClaim(t.dataVolume(), s.cluster.Defaults, s.cluster.Env)
	if err != nil {
		return "unknown"
	}
	return c.VolumeMode
}

// strategyWhy names where the strategy came from.
func (s *State) strategyWhy(t Target, o cdirules.Outcome) string {
	switch o.StrategyFrom {
	case cdirules.FromOverride:
		return whyOverride
	case cdirules.FromProfile:
		switch cdirules.ProfileStrategyOrigin(s.classes[t.Class], s.profiles[t.Class]) {
		case cdirules.OriginProfileSpec:
			return "the StorageProfile's spec.cloneStrategy"
		case cdirules.OriginClassAnnotation:
			return "the class's annotation " + cdirules.AnnCloneStrategy
		}
		return whyProfile
	}
	return whyDefault
}

const (
	whyOverride = "CDI's cloneStrategyOverride"
	whyProfile  = "the StorageProfile's cloneStrategy"
	whyDefault  = "CDI's default strategy, snapshot"
)

func strategyReason(from string) string {
	switch from {
	case cdirules.FromOverride:
		return ReasonCDIOverride
	case cdirules.FromProfile:
		return ReasonStorageProfile
	}
	return ReasonDefaultSnapshot
}

// addFlags adds the risks CDI does not check.
func (s *State) addFlags(p *Prediction, g Golden, t Target, sc *storagev1.StorageClass) {
	if g.Class != "" && t.Class != g.Class {
		p.Flags = append(p.Flags, FlagClassMismatch)
	}
	local, how := NodeLocal(sc)
	switch {
	case local && g.Class != t.Class && (p.Path == PathCSIClone || p.Path == PathSnapshotClone):
		// The driver is asked to clone (or restore a snapshot) into a pool
		// that does not hold the source: LINSTOR (and the test driver)
		// cannot, the clone hangs or fails, and CDI retries for ever
		// (cozystack#2908).
		p.Message = "class " + t.Class + " is node-local (" + how + ") and not the golden's class " + quote(g.Class) +
			": CDI asks the driver for a cross-class " + p.Path + " into a node-local pool, which it cannot satisfy"
		p.Path, p.Reason = PathBlocked, ReasonNodeLocalTarget
		p.Uncertain = append(p.Uncertain, "the driver decides whether a clone into a node-local pool from another pool works; LINSTOR's does not")
		p.Flags = append(p.Flags, FlagCrossNode)
	case local:
		p.Flags = append(p.Flags, FlagCrossNode)
	case len(g.PinnedNodes) > 0:
		p.Flags = append(p.Flags, FlagCrossNode)
	}
}

// NodeLocal reports whether a class's volumes are reachable only from some
// nodes, and how that is known: allowedTopologies, or LINSTOR's
// allowRemoteVolumeAccess "false" (no diskless access from other nodes).
func NodeLocal(sc *storagev1.StorageClass) (bool, string) {
	if sc == nil {
		return false, ""
	}
	if len(sc.AllowedTopologies) > 0 {
		return true, "allowedTopologies"
	}
	for k, v := range sc.Parameters {
		if strings.HasSuffix(k, "/allowRemoteVolumeAccess") && strings.EqualFold(v, "false") {
			return true, k + "=false"
		}
	}
	return false, ""
}

// addUncertainty records what the objects do not settle.
func (s *State) addUncertainty(p *Prediction, g Golden, t Target, assumedImage bool) {
	if p.Path == PathBlocked && p.Reason != ReasonNodeLocalTarget {
		return
	}
	if g.Phase != "Succeeded" {
		p.Uncertain = append(p.Uncertain, "golden not imported yet: its driver, volume mode and capacity are taken from its class and request")
	}
	if (p.Path == PathCSIClone || p.Path == PathSnapshotClone) && p.HasFlag(FlagClassMismatch) {
		p.Uncertain = append(p.Uncertain, "CDI asks the driver for a cross-class clone; the driver may perform it, refuse it or hang")
	}
	if assumedImage && t.Bytes == 0 && !t.Claimed {
		p.Uncertain = append(p.Uncertain, "CDI sizes this disk at the golden's image, read by a size-detection pod: the image is taken to fill the golden")
	}
	sized := p.Reason == ReasonNoVolumeExpansion || (t.Bytes != 0 && (p.Path == PathCSIClone || p.Path == PathSnapshotClone))
	if sized && s.cluster.Overhead == nil && s.claimMode(t) == cdirules.Filesystem {
		p.Uncertain = append(p.Uncertain, "no CDIConfig read: a Filesystem claim is taken to get CDI's default overhead, 0.06")
	}
}

func blocked(reason, msg string) Prediction {
	return Prediction{Path: PathBlocked, Reason: reason, Message: msg}
}

func fallback(reason, msg string) Prediction {
	return Prediction{Path: PathHostAssisted, Reason: reason, Message: msg}
}

func withStrategy(p Prediction, s string) Prediction {
	p.Strategy = s
	return p
}

func (g Golden) ref() string { return g.Namespace + "/" + g.Name }

func quote(s string) string { return "\"" + s + "\"" }

// ClassNames lists every StorageClass, sorted.
func (s *State) ClassNames() []string {
	out := make([]string, 0, len(s.classes))
	for name := range s.classes {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// ClassModes are the guard's keys for a class's StorageProfile: what CDI
// reads to give a spec.storage claim its volume mode (cdirules.RenderClaim).
// "provisioner" says the class exists; "mode" is claimPropertySets[0]'s
// (absent when it has no access modes: CDI cannot render a claim naming
// neither), "modes" the modes offered with access modes, "am.<mode>" the
// index and mode of the first set offering that access mode.
func (s *State) ClassModes(class string) map[string]string {
	sc := s.classes[class]
	if sc == nil {
		return nil
	}
	out := map[string]string{"provisioner": sc.Provisioner}
	sp := s.profiles[class]
	if sp == nil {
		return out
	}
	var modes []string
	for i, set := range sp.Status.ClaimPropertySets {
		mode := resolvedMode(modeOf(set))
		if len(set.AccessModes) == 0 {
			continue
		}
		if i == 0 {
			out["mode"] = mode
		}
		if !slices.Contains(modes, mode) && set.VolumeMode != nil {
			modes = append(modes, mode)
		}
		for _, am := range set.AccessModes {
			if _, ok := out["am."+string(am)]; !ok {
				out["am."+string(am)] = fmt.Sprintf("%02d:%s", i, mode)
			}
		}
	}
	out["modes"] = strings.Join(modes, ",")
	return out
}

func modeOf(set cdiv1.ClaimPropertySet) string {
	if set.VolumeMode == nil {
		return ""
	}
	return string(*set.VolumeMode)
}
