package cdirules

import (
	"errors"
	"math"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Volume modes, content types and the annotations CDI reads.
const (
	Block      = "Block"
	Filesystem = "Filesystem"

	ContentKubeVirt = string(cdiv1.DataVolumeKubeVirt)
	ContentArchive  = string(cdiv1.DataVolumeArchive)

	AnnDefaultVirtClass = "storageclass.kubevirt.io/is-default-virt-class"
	AnnDefaultClass     = "storageclass.kubernetes.io/is-default-class"
	AnnCloneStrategy    = "cdi.kubevirt.io/clone-strategy"
	AnnMinimumSize      = "cdi.kubevirt.io/minimumSupportedPvcSize"
	AnnContentType      = "cdi.kubevirt.io/storage.contentType"
	// The image size CDI's size-detection pod recorded on a source claim,
	// valid while the recorded capacity is the claim's
	// (datavolume/clone-controller-base.go; CDI spells them so).
	AnnVirtualSize    = "cdi.Kubervirt.io/virtualSize"
	AnnSourceCapacity = "cdi.Kubervirt.io/sourceCapacity"

	// DefaultOverhead is the filesystem overhead CDI's config controller
	// writes into CDIConfig status.filesystemOverhead.global unless the CDI
	// resource sets one (pkg/common/common.go DefaultGlobalOverhead).
	DefaultOverhead = 0.06

	// alignment is pkg/util/util.go DefaultAlignBlockSize.
	alignment = 1 << 20
)

// SpecKind is how a DataVolume spells its claim.
type SpecKind string

// The two spellings: spec.pvc (copied as it is) and spec.storage (rendered).
const (
	KindPVC     SpecKind = "pvc"
	KindStorage SpecKind = "storage"
)

// DataVolume is what CDI reads of a clone DataVolume to render its claim.
type DataVolume struct {
	Kind SpecKind
	// Class is spec.<kind>.storageClassName (nil: unset).
	Class *string
	// VolumeMode is spec.<kind>.volumeMode ("" unset).
	VolumeMode  string
	AccessModes []string
	// Bytes is spec.<kind>.resources.requests.storage; 0: none.
	Bytes       int64
	ContentType string
	// PerDisk are its per-disk annotations (copied onto its claim).
	PerDisk PerDisk
	// UnqualifiedSource: its source, as CDI copies it from a DataSource
	// (populateSourceIfSourceRef), names no namespace (ErrEmptySourceNamespace).
	UnqualifiedSource bool
}

// Env is the cluster state claim rendering reads.
type Env struct {
	Classes  map[string]*storagev1.StorageClass
	Profiles map[string]*cdiv1.StorageProfile
	// Overhead is CDIConfig status.filesystemOverhead; nil when there is no
	// CDIConfig or it has none (no overhead: see OverheadFor).
	Overhead *cdiv1.FilesystemOverhead
}

// Defaults are the classes an empty class falls back to.
type Defaults struct{ Virt, Kubernetes string }

// DefaultClasses finds the virtualization and the Kubernetes default class
// (common/util.go GetPlatformDefaultStorageClass): among the classes
// annotated "true", the newest by creationTimestamp, ties by name.
func DefaultClasses(classes []*storagev1.StorageClass) Defaults {
	return Defaults{Virt: platformDefault(classes, AnnDefaultVirtClass), Kubernetes: platformDefault(classes, AnnDefaultClass)}
}

func platformDefault(classes []*storagev1.StorageClass, ann string) string {
	var cands []*storagev1.StorageClass
	for _, sc := range classes {
		if sc.Annotations[ann] == "true" {
			cands = append(cands, sc)
		}
	}
	if len(cands) == 0 {
		return ""
	}
	sort.Slice(cands, func(i, j int) bool {
		ti, tj := cands[i].CreationTimestamp.UnixNano(), cands[j].CreationTimestamp.UnixNano()
		if ti == tj {
			return cands[i].Name < cands[j].Name
		}
		return ti > tj
	})
	return cands[0].Name
}

// ContentType is the content type CDI uses for a written one
// (common/util.go GetContentType): anything but archive is kubevirt.
func ContentType(written string) string {
	if written == ContentArchive {
		return ContentArchive
	}
	return ContentKubeVirt
}

// FallbackClass is the class an unset class becomes ("" none). spec.storage
// goes through datavolume/util.go renderPvcSpecVolumeModeAndAccessModesAndStorageClass
// and common/util.go getFallbackStorageClass: the virtualization default
// unless the content type is archive, then the Kubernetes default. spec.pvc
// is copied as it is (renderPvcSpec), so only Kubernetes' DefaultStorageClass
// admission fills the class in.
func FallbackClass(kind SpecKind, contentType string, d Defaults) string {
	if kind == KindStorage && ContentType(contentType) == ContentKubeVirt && d.Virt != "" {
		return d.Virt
	}
	return d.Kubernetes
}

// Claim is the claim CDI creates for a DataVolume.
type Claim struct {
	// Class is the claim's class ("" with HasClass false: none, CDI waits).
	Class    string
	HasClass bool
	// VolumeMode is Block or Filesystem (an unset one reads as Filesystem,
	// pkg/util ResolveVolumeMode).
	VolumeMode string
	// Bytes is the request; 0 for a spec.storage clone without a size, sized
	// later at the source (CloneSize).
	Bytes int64
	// PerDisk are the claim's per-disk annotations (the DataVolume's,
	// copied; permissiveClone also when CDI sized the clone).
	PerDisk PerDisk
	// AccessModes are the claim's: the DataVolume's, or for a spec.storage
	// one that names none, its class's StorageProfile's; empty when CDI
	// leaves them unset (a spec.pvc DataVolume naming none).
	AccessModes []string
	// UnqualifiedSource is its DataVolume's.
	UnqualifiedSource bool
}

// Errors of rendering: the DataVolume never gets a claim.
var (
	ErrArchiveBlock    = errors.New("ContentType Archive cannot have block volumeMode")
	ErrNoAccessMode    = errors.New("no accessMode specified in StorageProfile")
	ErrNoMatchingMode  = errors.New("no matching accessMode specified in StorageProfile")
	ErrNoClass         = errors.New("storage class not found and no accessMode given")
	ErrTooSmall        = errors.New("PVC Spec is not valid - storage size should be at least 1MiB")
	ErrNoProfileForCPS = errors.New("cannot get StorageProfile")
)

// RenderClaim renders a DataVolume's claim as datavolume/util.go renderPvcSpec
// does: spec.pvc is copied; spec.storage (pvcFromStorage) gets its class
// defaulted, its volume mode and access modes from the class's
// StorageProfile, and its size inflated by the filesystem overhead and raised
// to the minimum supported size (renderPvcSpecVolumeSize). A spec.pvc claim
// without a class takes the Kubernetes default at admission.
func RenderClaim(dv DataVolume, d Defaults, env Env) (Claim, error) {
	c := Claim{VolumeMode: resolveMode(dv.VolumeMode), Bytes: dv.Bytes, PerDisk: dv.PerDisk, AccessModes: dv.AccessModes,
		UnqualifiedSource: dv.UnqualifiedSource}
	if dv.Class != nil {
		c.Class, c.HasClass = *dv.Class, true
	} else if fb := FallbackClass(dv.Kind, dv.ContentType, d); fb != "" {
		c.Class, c.HasClass = fb, true
	}
	if dv.Kind == KindPVC {
		return c, nil
	}
	mode := dv.VolumeMode
	if ContentType(dv.ContentType) == ContentArchive {
		if mode == Block {
			return c, ErrArchiveBlock
		}
		mode = Filesystem
	}
	if sc := env.Classes[c.Class]; c.HasClass && sc != nil {
		m, ams, err := profileModes(env.Profiles[c.Class], mode, dv.AccessModes)
		if err != nil {
			return c, err
		}
		mode, c.AccessModes = m, ams
	} else if len(dv.AccessModes) == 0 {
		// renderPvcSpecFromAvailablePv finds nothing for a missing class.
		return c, ErrNoClass
	}
	c.VolumeMode = resolveMode(mode)
	if dv.Bytes == 0 {
		return c, nil
	}
	if dv.Bytes < alignment {
		return c, ErrTooSmall
	}
	c.Bytes = Inflate(dv.Bytes, c.VolumeMode, c.Class, c.HasClass, d, env)
	if c.HasClass {
		c.Bytes = EffectiveSize(c.Bytes, env.Profiles[c.Class])
	}
	return c, nil
}

// profileModes are the volume mode and access modes a spec.storage claim
// gets from the class's StorageProfile status.claimPropertySets
// (datavolume/util.go renderPvcSpecVolumeModeAndAccessModesAndStorageClass:
// getDefaultVolumeAndAccessMode when it names neither, the first set's;
// getDefaultAccessModes when it names a volume mode only, the first set of
// that mode that has access modes; getDefaultVolumeMode when it names
// access modes only, the mode of the first set sharing one of them, else
// Kubernetes' default).
func profileModes(sp *cdiv1.StorageProfile, mode string, accessModes []string) (string, []string, error) {
	var sets []cdiv1.ClaimPropertySet
	if sp != nil {
		sets = sp.Status.ClaimPropertySets
	}
	switch {
	case mode == "" && len(accessModes) == 0:
		if sp == nil {
			return "", nil, ErrNoProfileForCPS
		}
		if len(sets) == 0 || len(sets[0].AccessModes) == 0 {
			return "", nil, ErrNoAccessMode
		}
		return modeOf(sets[0]), accessModeNames(sets[0].AccessModes), nil
	case len(accessModes) == 0:
		if sp == nil {
			return "", nil, ErrNoProfileForCPS
		}
		for _, s := range sets {
			if s.VolumeMode != nil && string(*s.VolumeMode) == mode && len(s.AccessModes) > 0 {
				return mode, accessModeNames(s.AccessModes), nil
			}
		}
		return "", nil, ErrNoMatchingMode
	case mode == "":
		if sp == nil {
			return "", nil, ErrNoProfileForCPS
		}
		for _, s := range sets {
			for _, am := range s.AccessModes {
				for _, want := range accessModes {
					if string(am) == want {
						return modeOf(s), accessModes, nil
					}
				}
			}
		}
		return "", accessModes, nil // Kubernetes' default, Filesystem
	}
	return mode, accessModes, nil
}

func accessModeNames(ams []corev1.PersistentVolumeAccessMode) []string {
	out := make([]string, len(ams))
	for i, am := range ams {
		out[i] = string(am)
	}
	return out
}

func modeOf(s cdiv1.ClaimPropertySet) string {
	if s.VolumeMode == nil {
		return ""
	}
	return string(*s.VolumeMode)
}

func resolveMode(m string) string {
	if m == Block {
		return Block
	}
	return Filesystem
}

// OverheadFor is the filesystem overhead of a class (common/util.go
// GetFilesystemOverheadForStorageClass): the per-class value of CDIConfig
// status.filesystemOverhead, else the global one; a class that does not
// exist reads as the Kubernetes default's. No CDIConfig, or one whose status
// the config controller has not written yet, is no overhead: CDI reads "0".
func OverheadFor(class string, hasClass bool, d Defaults, env Env) float64 {
	if hasClass && class == "" {
		return 0
	}
	if env.Overhead == nil {
		return 0
	}
	name := class
	if !hasClass || env.Classes[class] == nil {
		name = d.Kubernetes
	}
	v := env.Overhead.Global
	if per, ok := env.Overhead.StorageClass[name]; ok && name != "" {
		v = per
	}
	f, _ := strconv.ParseFloat(string(v), 64)
	return f
}

// Inflate is common/util.go InflateSizeWithOverhead: a Filesystem claim
// needs the image aligned to 1MiB plus the overhead (pkg/util
// GetRequiredSpace); a Block one the image size.
func Inflate(bytes int64, mode, class string, hasClass bool, d Defaults, env Env) int64 {
	if mode != Filesystem {
		return bytes
	}
	return RequiredSpace(OverheadFor(class, hasClass, d, env), bytes)
}

// RequiredSpace is pkg/util/util.go GetRequiredSpace.
func RequiredSpace(overhead float64, bytes int64) int64 {
	aligned := int64(math.Ceil(float64(bytes)/float64(alignment))) * alignment
	return int64(math.Ceil(float64(aligned) * (1 + overhead)))
}

// EffectiveSize raises a request to the class's StorageProfile annotation
// cdi.kubevirt.io/minimumSupportedPvcSize (common/util.go GetEffectiveVolumeSize).
func EffectiveSize(bytes int64, sp *cdiv1.StorageProfile) int64 {
	if sp == nil {
		return bytes
	}
	q, err := resource.ParseQuantity(sp.Annotations[AnnMinimumSize])
	if err != nil {
		return bytes
	}
	if m := q.Value(); bytes < m {
		return m
	}
	return bytes
}
