package predict

import (
	"strings"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
)

// From CDI's outcome for one disk to a Prediction in words: its path,
// reason and message, then the flags and doubts CDI itself does not check.

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
	case o.Validation != "" && g.Snapshot != nil && cdirules.SnapshotUnusable(*g.Snapshot) != nil:
		return blocked(ReasonSnapshotUnusable, "golden VolumeSnapshot "+g.ref()+" cannot be cloned yet: CDI refuses the clone (CloneValidationFailed: "+o.Validation+")")
	case o.Validation != "" && g.Snapshot != nil:
		return blocked(ReasonTargetTooSmall, "the disk's claim would be smaller than golden VolumeSnapshot "+g.ref()+"'s restore size ("+
			bytesText(g.Snapshot.RestoreBytes)+"): CDI refuses the clone (CloneValidationFailed: "+o.Validation+")")
	case o.Validation != "" && strings.Contains(o.Validation, "contentType"):
		return blocked(ReasonContentTypeMismatch, "CDI refuses the clone (CloneValidationFailed): "+o.Validation)
	case o.Validation != "":
		return blocked(ReasonTargetTooSmall, "the disk's claim would be smaller than golden "+g.ref()+"'s ("+bytesText(g.RequestedBytes)+
			"): CDI refuses the clone (CloneValidationFailed: "+o.Validation+")")
	case o.Waits == cdirules.WaitsSourceSnapshot:
		return blocked(ReasonGoldenMissing, "golden VolumeSnapshot "+g.ref()+" does not exist: CDI waits for it (CloneWithoutSource) and makes no claim")
	case o.Waits != "":
		return blocked(ReasonClassUnresolved, "CDI waits for "+o.Waits)
	case o.Error != "" && strings.HasPrefix(o.Error, cdirules.AnnUsePopulator):
		return blocked(ReasonUsePopulatorInvalid, "the DataVolume's annotation "+o.Error+
			": CDI fails every sync of it and retries for ever; the DataVolume stays Pending without a claim")
	case o.Error != "" && s.cdiProblem != "" && o.CloneType == "" && o.Fallback == "" && o.Error == s.cdiProblem:
		return blocked(ReasonNoActiveCDI, s.cdiProblem+": CDI cannot choose a clone strategy")
	case o.Stuck != "":
		return withStrategy(blocked(ReasonCloneTypeRefused, "the DataVolume's annotation "+cdirules.AnnCloneType+": "+o.CloneType+
			" is obeyed as is onto class "+t.Class+", whose "+o.Stuck+" is not golden "+g.ref()+
			"'s: the external-provisioner refuses CDI's clone claim for ever (ProvisioningFailed on its tmp-pvc)"), o.CloneType)
	case o.Error == cdirules.ErrEmptySourceNamespace:
		return blocked(ReasonSourceNamespaceUnset, "the disk's DataSource names golden "+g.Name+" without a namespace: CDI finds it in the disk's namespace "+
			"and makes the claim, then fails every sync creating its VolumeCloneSource (\""+o.Error+"\"); the clone never starts")
	case o.Error == cdirules.ErrResizeRefused:
		return withStrategy(blocked(ReasonCloneTypeNoExpansion, "the DataVolume's annotation "+cdirules.AnnCloneType+": "+o.CloneType+
			" is obeyed as is: CDI clones at golden "+g.ref()+"'s capacity, then the API server refuses to grow the claim on class "+t.Class+
			", which has no allowVolumeExpansion: the clone fails (\""+o.Error+"\")"), o.CloneType)
	case o.Error != "" && o.CloneType == cdirules.StrategySnapshot:
		return withStrategy(blocked(ReasonSnapshotClassNotFound, "snapshot strategy ("+s.strategyWhy(t, o)+
			"): no VolumeSnapshotClass for the disk's claim: CDI cannot plan the clone ("+o.Error+")"), o.CloneType)
	case o.Error != "" && g.Snapshot != nil && o.StrategyFrom == cdirules.FromAnnotation && o.CloneType != cdirules.StrategySnapshot:
		return withStrategy(blocked(ReasonUnknownStrategy, "the DataVolume's annotation "+cdirules.AnnCloneType+": "+quote(o.CloneType)+
			" is obeyed as is, and CDI restores a VolumeSnapshot only with snapshot or copy: every clone fails with \""+o.Error+"\""), o.CloneType)
	case o.Error != "" && o.StrategyFrom != "" && !cdirules.KnownStrategy(o.CloneType):
		return withStrategy(blocked(ReasonUnknownStrategy, "the clone strategy "+quote(o.CloneType)+" ("+s.strategyWhy(t, o)+
			") is not one CDI knows: every clone fails with \""+o.Error+"\""), o.CloneType)
	case o.Error != "":
		return blocked(ReasonClaimInvalid, "CDI cannot render or plan the disk's claim: "+o.Error)
	case o.Fallback != "":
		return s.fallbackPrediction(g, t, o)
	case o.CloneType == cdirules.StrategyCopy && o.StrategyFrom == cdirules.FromAnnotation:
		return withStrategy(fallback(ReasonCloneTypeCopy, "the DataVolume's annotation "+cdirules.AnnCloneType+
			": copy is obeyed as is: CDI copies host-assisted"), o.CloneType)
	case o.CloneType == cdirules.StrategyCopy:
		return s.copyPrediction(t, o)
	case o.CloneType == cdirules.StrategySnapshot && o.StrategyFrom == cdirules.FromSource:
		return Prediction{Path: PathSnapshotClone, Reason: ReasonSnapshotSource, Strategy: o.CloneType,
			Message: "CDI restores golden VolumeSnapshot " + g.ref() + " into the disk's class (the source is a snapshot: no strategy is chosen)"}
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
		if p := s.classes[t.Class].Provisioner; cdirules.AdvisesCopy(p) {
			return Prediction{Path: PathHostAssisted, Reason: ReasonDerivedCopy, Strategy: o.CloneType,
				Message: "CDI derived the clone strategy copy for class " + t.Class + ": its capabilities table advises copy for driver " + quote(p) +
					" (a VolumeSnapshotClass does not change that): every clone onto it is host-assisted, from any class"}
		}
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
		if t.PerDisk.UsePopulator != nil {
			return fallback(ReasonPopulatorOff, "the DataVolume's annotation "+cdirules.AnnUsePopulator+": "+quote(*t.PerDisk.UsePopulator)+
				": CDI takes its legacy path and copies host-assisted (NoPopulator: "+cdirules.NoPopulatorMessage+")")
		}
		p = fallback(ReasonNoPopulator, "provisioner "+sc.Provisioner+" of class "+t.Class+
			" has no CSIDriver object: CDI does not use its clone populator and copies host-assisted")
	case cdirules.FallbackNoVolumeSnapshotClass:
		p = fallback(ReasonNoVolumeSnapshotClass, "snapshot strategy ("+s.strategyWhy(t, o)+") and no VolumeSnapshotClass CDI can use for the golden's driver "+
			quote(g.Driver)+" and class "+t.Class+"'s "+quote(sc.Provisioner)+": CDI copies host-assisted (NoVolumeSnapshotClass)")
	case cdirules.FallbackIncompatibleProvisioners:
		p = fallback(ReasonIncompatibleProvisioners, "the golden's CSI driver "+quote(g.Driver)+
			" is not class "+t.Class+"'s "+quote(sc.Provisioner)+": CDI copies host-assisted (IncompatibleProvisioners)")
	case cdirules.FallbackNoProvisionerMatch:
		p = fallback(ReasonNoProvisionerMatch, "golden VolumeSnapshot "+g.ref()+"'s content is driver "+quote(g.Snapshot.Driver)+
			"'s, not class "+t.Class+"'s "+quote(sc.Provisioner)+": CDI copies host-assisted (NoProvisionerMatch)")
	case cdirules.FallbackIncompatibleVolumeModes:
		p = fallback(ReasonIncompatibleVolumeModes, "the golden is "+s.goldenMode(g)+" and the disk's claim "+
			s.claimMode(t)+": CDI copies host-assisted (IncompatibleVolumeModes)")
	case cdirules.FallbackNoVolumeExpansion:
		if g.Snapshot != nil {
			p = fallback(ReasonNoVolumeExpansion, "the disk's claim is larger than golden VolumeSnapshot "+g.ref()+"'s restore size ("+
				bytesText(g.Snapshot.RestoreBytes)+") and class "+t.Class+" has no allowVolumeExpansion: CDI copies host-assisted (NoVolumeExpansion)")
			break
		}
		fallthrough
	default:
		p = fallback(ReasonNoVolumeExpansion, "the disk's claim is larger than golden "+g.ref()+"'s capacity and class "+t.Class+
			" has no allowVolumeExpansion: CDI copies host-assisted (NoVolumeExpansion)")
	}
	p.Strategy = o.Strategy
	return p
}

// goldenMode is the golden's volume mode as CDI compares it: a snapshot's
// is its content's spec.sourceVolumeMode (unset read as Filesystem).
func (s *State) goldenMode(g Golden) string {
	if g.Snapshot != nil {
		return resolvedMode(g.Snapshot.SourceVolumeMode)
	}
	return resolvedMode(g.VolumeMode)
}

// claimMode is the volume mode the disk's claim gets, for messages.
func (s *State) claimMode(t Target) string {
	if t.Claimed {
		return resolvedMode(t.VolumeMode)
	}
	c, err := s.Claim(t)
	if err != nil {
		return "unknown"
	}
	return c.VolumeMode
}

// Claim is the claim CDI renders for a DataVolume target
// (cdirules.RenderClaim); an error when CDI renders none.
func (s *State) Claim(t Target) (cdirules.Claim, error) {
	return cdirules.RenderClaim(t.dataVolume(), s.cluster.Defaults, s.cluster.Env)
}

// strategyWhy names where the strategy came from.
func (s *State) strategyWhy(t Target, o cdirules.Outcome) string {
	switch o.StrategyFrom {
	case cdirules.FromOverride:
		return whyOverride
	case cdirules.FromAnnotation:
		return "the DataVolume's annotation " + cdirules.AnnCloneType + ", obeyed as is"
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
	case cdirules.FromAnnotation:
		return ReasonCloneTypeAnnotation
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
		asker := "CDI"
		if t.DataSource {
			asker = "the external-provisioner"
		}
		p.Message = "class " + t.Class + " is node-local (" + how + ") and not the golden's class " + quote(g.Class) +
			": " + asker + " asks the driver for a cross-class " + p.Path + " into a node-local pool, which it cannot satisfy"
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
		p.Uncertain = append(p.Uncertain, "no CDIConfig read: a Filesystem claim is taken to get no overhead, as CDI sizes it without one")
	}
}

// predictDataSource is the path of a bare claim of the golden: the
// external-provisioner's checks (cdirules.ClaimCloneRefusal,
// ClaimRestoreRefusal), then the driver's clone or restore at the claim's
// size; a claim of a class that does not exist is never provisioned.
func (s *State) predictDataSource(g Golden, t Target, sc *storagev1.StorageClass) Prediction {
	if sc == nil {
		return blocked(ReasonClassNotFound, "StorageClass "+quote(t.Class)+" does not exist: the claim is never provisioned")
	}
	claim := cdirules.Claim{Class: t.Class, HasClass: true, VolumeMode: resolvedMode(t.VolumeMode), Bytes: t.Bytes}
	path, refusal := PathCSIClone, ""
	if g.Snapshot != nil {
		path, refusal = PathSnapshotClone, s.cluster.ClaimRestoreRefusal(*g.Snapshot, claim)
	} else {
		src, _ := s.source(g)
		refusal = s.cluster.ClaimCloneRefusal(src, claim)
	}
	var p Prediction
	if refusal != "" {
		p = blocked(ReasonProvisionerRefuses, "the external-provisioner refuses the claim's data source "+g.ref()+" for ever ("+
			refusalText[refusal]+"): the claim stays Pending")
	} else {
		p = Prediction{Path: path, Reason: ReasonDataSource, Message: "the claim names " + g.ref() +
			" as its data source: the external-provisioner asks the driver for the " + path + " at the claim's size, without CDI"}
	}
	s.addFlags(&p, g, t, sc)
	return p
}

// refusalText says each of the external-provisioner's refusals in words.
var refusalText = map[string]string{
	cdirules.StuckTooSmall:   "the claim asks less than its source",
	cdirules.StuckDriver:     "the source is another CSI driver's than the claim's class",
	cdirules.StuckVolumeMode: "the claim asks another volume mode than its source's",
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
