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
	"sort"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
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
	// validateAdvancedClonePVC compares; RequestedBytes its request, what
	// validateSourcePVC compares.
	CapacityBytes, RequestedBytes int64
	// PinnedNodes are the nodes its PV's nodeAffinity allows (nil: any).
	PinnedNodes []string
}

// Target is a disk that would be cloned from the golden.
type Target struct {
	// Class is the resolved StorageClass; Unresolved when the disk names
	// none and no default exists.
	Class      string
	Unresolved bool
	// VolumeMode of the target claim; "" means as CDI renders it (the
	// StorageProfile's first claimPropertySet, else Filesystem).
	VolumeMode string
	// Bytes is the target claim's request; 0 means "larger than the
	// golden", the size a pool's diskSize normally has.
	Bytes int64
}

// SnapshotClass is the part of a VolumeSnapshotClass that decides whether
// CDI finds one: any class of the driver will do (GetVolumeSnapshotClass
// prefers the default one, then the first by name).
type SnapshotClass struct {
	Name, Driver string
}

// Inputs are the cluster objects the planner reads.
type Inputs struct {
	Classes         []*storagev1.StorageClass
	Profiles        []*cdiv1.StorageProfile
	CDIs            []*cdiv1.CDI
	SnapshotClasses []SnapshotClass
	// CSIDrivers are the names of the CSIDriver objects.
	CSIDrivers []string
}

// State indexes Inputs for many predictions; build it once per change.
type State struct {
	classes     map[string]*storagev1.StorageClass
	profiles    map[string]*cdiv1.StorageProfile
	snapClasses []SnapshotClass
	csiDrivers  map[string]bool
	// override is the active CDI's cloneStrategyOverride (nil: none);
	// cdiProblem is why no active CDI can be found ("" when one is).
	override   *cdiv1.CDICloneStrategy
	cdiProblem string
}

// NewState indexes the inputs.
func NewState(in Inputs) *State {
	s := &State{classes: map[string]*storagev1.StorageClass{}, profiles: map[string]*cdiv1.StorageProfile{},
		csiDrivers: map[string]bool{}, snapClasses: append([]SnapshotClass(nil), in.SnapshotClasses...)}
	for _, sc := range in.Classes {
		s.classes[sc.Name] = sc
	}
	for _, p := range in.Profiles {
		s.profiles[p.Name] = p
	}
	for _, d := range in.CSIDrivers {
		s.csiDrivers[d] = true
	}
	sort.Slice(s.snapClasses, func(i, j int) bool { return s.snapClasses[i].Name < s.snapClasses[j].Name })
	s.override, s.cdiProblem = activeOverride(in.CDIs)
	return s
}

// activeOverride follows common/util.go GetActiveCDI: one CDI resource is
// the active one; among several, the only one not in phase Error.
func activeOverride(cdis []*cdiv1.CDI) (*cdiv1.CDICloneStrategy, string) {
	active := cdis
	if len(cdis) > 1 {
		active = nil
		for _, c := range cdis {
			if c.Status.Phase != "Error" {
				active = append(active, c)
			}
		}
	}
	switch len(active) {
	case 0:
		if len(cdis) == 0 {
			return nil, "no CDI resource exists"
		}
		return nil, "every CDI resource is in phase Error"
	case 1:
		return active[0].Spec.CloneStrategyOverride, ""
	}
	return nil, "several CDI resources are active"
}

// CSIClasses lists the StorageClasses whose provisioner has a CSIDriver
// object, sorted by name: the classes a golden can be cloned onto with CDI's
// populators.
func (s *State) CSIClasses() []string {
	var out []string
	for name, sc := range s.classes {
		if s.csiDrivers[sc.Provisioner] {
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

// Predict applies CDI's rules, in CDI's order, to one golden and target.
func (s *State) Predict(g Golden, t Target) Prediction {
	var p Prediction
	if g.Phase == "Failed" {
		return blocked(ReasonGoldenFailed, "golden "+g.ref()+" failed to import; CDI waits for a source that will never be ready")
	}
	if t.Unresolved {
		// validateTargetStorageClassAssignment: a claim without a class
		// makes CDI wait, for ever when no default class exists.
		return blocked(ReasonClassUnresolved, "the disk names no StorageClass and no default class exists: the claim never gets a class")
	}
	sc := s.classes[t.Class]
	if sc == nil {
		return blocked(ReasonClassNotFound, "StorageClass "+quote(t.Class)+" does not exist: CDI reports \"target storage class not found\"")
	}
	if !s.csiDrivers[sc.Provisioner] {
		// datavolume/util.go storageClassCSIDriverExists: no CSIDriver
		// object, no populator; clone-controller-base.go then copies
		// host-assisted with reason NoPopulator.
		p = fallback(ReasonNoPopulator, "provisioner "+sc.Provisioner+" of class "+t.Class+" has no CSIDriver object: CDI does not use its clone populator and copies host-assisted")
	} else if s.cdiProblem != "" {
		// GetGlobalCloneStrategyOverride fails without one active CDI.
		p = blocked(ReasonNoActiveCDI, s.cdiProblem+": CDI cannot choose a clone strategy")
	} else if msg := tooSmall(g, t); msg != "" {
		p = blocked(ReasonTargetTooSmall, msg)
	} else {
		p = s.plan(g, t, sc)
	}
	s.addFlags(&p, g, t, sc)
	s.addUncertainty(&p, g, t)
	return p
}

// tooSmall is validateSourcePVC's check (ValidateRequestedCloneSize): the
// target's request may not be below the source claim's.
func tooSmall(g Golden, t Target) string {
	if t.Bytes == 0 || g.RequestedBytes == 0 || t.Bytes >= g.RequestedBytes {
		return ""
	}
	return "the disk asks " + bytesText(t.Bytes) + ", less than golden " + g.ref() + "'s " + bytesText(g.RequestedBytes) +
		": CDI refuses the clone (target smaller than the source)"
}

// plan is computeStrategyForSourcePVC: the strategy, then the checks that
// turn it into a host-assisted fallback, in CDI's order.
func (s *State) plan(g Golden, t Target, sc *storagev1.StorageClass) Prediction {
	strategy, why := s.strategy(t.Class)
	if strategy == cdiv1.CloneStrategyHostAssisted {
		return Prediction{Path: PathHostAssisted, Reason: ReasonCopyStrategy, Strategy: string(strategy),
			Message: "the clone strategy is copy (" + why + "): CDI always copies host-assisted"}
	}
	srcDriver := g.Driver
	if srcDriver == "" {
		if gsc := s.classes[g.Class]; gsc != nil {
			srcDriver = gsc.Provisioner
		}
	}
	if strategy == cdiv1.CloneStrategySnapshot {
		// GetCompatibleVolumeSnapshotClass runs before the provisioner
		// check: different drivers end here as NoVolumeSnapshotClass.
		if srcDriver != sc.Provisioner {
			return withStrategy(fallback(ReasonNoVolumeSnapshotClass, "snapshot strategy ("+why+") but the golden's driver "+
				quote(srcDriver)+" is not the class's "+quote(sc.Provisioner)+": no VolumeSnapshotClass serves both"), strategy)
		}
		if p, ok := s.snapshotClassProblem(g.Class, t.Class, sc.Provisioner, why); ok {
			return withStrategy(p, strategy)
		}
	}
	// validateAdvancedClonePVC: common driver, volume mode, expansion.
	if srcDriver != sc.Provisioner {
		return withStrategy(fallback(ReasonIncompatibleProvisioners, "the golden's CSI driver "+quote(srcDriver)+
			" is not class "+t.Class+"'s "+quote(sc.Provisioner)+": CDI copies host-assisted (IncompatibleProvisioners)"), strategy)
	}
	if tm := s.targetVolumeMode(g, t); g.VolumeMode != "" && tm != g.VolumeMode {
		return withStrategy(fallback(ReasonIncompatibleVolumeModes, "the golden is "+g.VolumeMode+" and the disk "+tm+
			": CDI copies host-assisted (IncompatibleVolumeModes)"), strategy)
	}
	if larger(g, t) && (sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion) {
		return withStrategy(fallback(ReasonNoVolumeExpansion, "the disk is larger than golden "+g.ref()+" and class "+t.Class+
			" has no allowVolumeExpansion: CDI copies host-assisted (NoVolumeExpansion)"), strategy)
	}
	p := Prediction{Path: PathCSIClone, Reason: strategyReason(why), Strategy: string(strategy),
		Message: "CDI asks the driver for a CSI clone of the golden's volume (" + why + ")"}
	if strategy == cdiv1.CloneStrategySnapshot {
		p.Path, p.Message = PathSnapshotClone, "CDI snapshots the golden's volume and restores the snapshot ("+why+")"
	}
	return p
}

// strategy follows computeStrategyForSourcePVC: the CDI resource's
// cloneStrategyOverride, else the target class's StorageProfile
// status.cloneStrategy, else snapshot. why names the source.
func (s *State) strategy(class string) (cdiv1.CDICloneStrategy, string) {
	if s.override != nil {
		return *s.override, whyOverride
	}
	if sp := s.profiles[class]; sp != nil && sp.Status.CloneStrategy != nil {
		return *sp.Status.CloneStrategy, whyProfile
	}
	return cdiv1.CloneStrategySnapshot, whyDefault
}

const (
	whyOverride = "CDI's cloneStrategyOverride"
	whyProfile  = "the StorageProfile's cloneStrategy"
	whyDefault  = "CDI's default strategy, snapshot"
)

func strategyReason(why string) string {
	switch why {
	case whyOverride:
		return ReasonCDIOverride
	case whyProfile:
		return ReasonStorageProfile
	}
	return ReasonDefaultSnapshot
}

// snapshotClassProblem follows GetCompatibleVolumeSnapshotClass and
// common/util.go GetVolumeSnapshotClass: when both StorageProfiles name the
// same status.snapshotClass, that one (it must exist, and be of the driver);
// otherwise the driver's default VolumeSnapshotClass, else its first by name.
func (s *State) snapshotClassProblem(goldenClass, class, driver, why string) (Prediction, bool) {
	if named := s.commonSnapshotClass(goldenClass, class); named != "" {
		for _, vsc := range s.snapClasses {
			if vsc.Name != named {
				continue
			}
			if vsc.Driver == driver {
				return Prediction{}, false
			}
			return fallback(ReasonNoVolumeSnapshotClass, "snapshot strategy ("+why+"): the StorageProfiles name VolumeSnapshotClass "+
				named+", which is not of driver "+driver+": CDI copies host-assisted (NoVolumeSnapshotClass)"), true
		}
		return blocked(ReasonSnapshotClassNotFound, "snapshot strategy ("+why+"): the StorageProfiles name VolumeSnapshotClass "+
			named+", which does not exist: CDI cannot plan the clone"), true
	}
	for _, vsc := range s.snapClasses {
		if vsc.Driver == driver {
			return Prediction{}, false
		}
	}
	return fallback(ReasonNoVolumeSnapshotClass, "snapshot strategy ("+why+") and no VolumeSnapshotClass of driver "+driver+
		": CDI copies host-assisted (NoVolumeSnapshotClass)"), true
}

// commonSnapshotClass is getCommonSnapshotClass: the StorageProfiles of
// source and target must both name the same class.
func (s *State) commonSnapshotClass(goldenClass, class string) string {
	var names []string
	for _, c := range []string{goldenClass, class} {
		sp := s.profiles[c]
		if sp == nil || sp.Status.SnapshotClass == nil {
			return ""
		}
		names = append(names, *sp.Status.SnapshotClass)
	}
	if names[0] != names[1] {
		return ""
	}
	return names[0]
}

// targetVolumeMode is the volume mode the target claim gets.
func (s *State) targetVolumeMode(g Golden, t Target) string {
	if t.VolumeMode != "" {
		return t.VolumeMode
	}
	if m := s.profileVolumeMode(t.Class); m != "" {
		return m
	}
	return "Filesystem"
}

func (s *State) profileVolumeMode(class string) string {
	sp := s.profiles[class]
	if sp == nil {
		return ""
	}
	for _, cps := range sp.Status.ClaimPropertySets {
		if cps.VolumeMode != nil {
			return string(*cps.VolumeMode)
		}
	}
	return ""
}

// larger: the target asks more than the golden's capacity, so the clone
// must be expanded (validateAdvancedClonePVC compares the source's
// status.capacity with the target's request).
func larger(g Golden, t Target) bool {
	if t.Bytes == 0 {
		return true
	}
	c := g.CapacityBytes
	if c == 0 {
		c = g.RequestedBytes
	}
	return t.Bytes > c
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
func (s *State) addUncertainty(p *Prediction, g Golden, t Target) {
	if p.Path == PathBlocked && p.Reason != ReasonNodeLocalTarget {
		return
	}
	if g.Phase != "Succeeded" {
		p.Uncertain = append(p.Uncertain, "golden not imported yet: its driver, volume mode and capacity are taken from its class and request")
	}
	if (p.Path == PathCSIClone || p.Path == PathSnapshotClone) && p.HasFlag(FlagClassMismatch) {
		p.Uncertain = append(p.Uncertain, "CDI asks the driver for a cross-class clone; the driver may perform it, refuse it or hang")
	}
	if t.VolumeMode == "" && s.profileVolumeMode(t.Class) == "" && g.VolumeMode != "Filesystem" {
		p.Uncertain = append(p.Uncertain, "the disk's volume mode is not known: neither the disk nor the StorageProfile sets one")
	}
	if g.VolumeMode != "Block" && t.Bytes != 0 && !larger(g, t) {
		p.Uncertain = append(p.Uncertain, "a Filesystem claim gets CDI's filesystem overhead added: a disk of the golden's size may still need an expansion")
	}
}

func blocked(reason, msg string) Prediction {
	return Prediction{Path: PathBlocked, Reason: reason, Message: msg}
}

func fallback(reason, msg string) Prediction {
	return Prediction{Path: PathHostAssisted, Reason: reason, Message: msg}
}

func withStrategy(p Prediction, s cdiv1.CDICloneStrategy) Prediction {
	p.Strategy = string(s)
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
