package fleet

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

// The platform's naming rules: both halves are interpolated into a
// DataVolume name and an image URL, so anything else is not trusted.
var (
	schematicIDRe = regexp.MustCompile(`^[a-z0-9]+$`)
	versionRe     = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)
)

// Flavor is one Talos image: (schematicID, version).
type Flavor struct {
	SchematicID string `json:"schematicID"`
	Version     string `json:"version"`
}

// Key is the flavor's ledger key, "<schematicID>/<version>".
func (f Flavor) Key() string { return f.SchematicID + "/" + f.Version }

// IsZero reports whether the flavor is unknown.
func (f Flavor) IsZero() bool { return f.SchematicID == "" && f.Version == "" }

// flavorProblems lists the naming rules the flavor breaks.
func flavorProblems(f Flavor) []string {
	var p []string
	if !schematicIDRe.MatchString(f.SchematicID) {
		p = append(p, fmt.Sprintf("schematic ID %q is not plain lowercase alphanumeric", Clip(f.SchematicID, 80)))
	}
	if !versionRe.MatchString(f.Version) {
		p = append(p, fmt.Sprintf("version %q is not a vMAJOR.MINOR.PATCH release", Clip(f.Version, 40)))
	}
	return p
}

// Golden is one golden DataVolume and the volume behind it: a Talos
// flavor's (Flavor set, Image empty) or any other DataVolume of a golden
// namespace (Image set, Flavor zero), which becomes a golden once a disk
// clones it.
type Golden struct {
	Namespace, Name string
	UID             types.UID
	Flavor          Flavor
	// Image is a non-Talos golden's identity: its vm-default-images name,
	// else its object name; "" for a Talos golden.
	Image string
	// Problems lists the naming rules the golden breaks; a golden with
	// problems is shown but not trusted: nothing is counted for its flavor.
	Problems     []string
	Phase        string
	RestartCount int32
	Created      time.Time
	// ReadySince is when the import finished (zero while it has not).
	ReadySince time.Time
	// RequestedBytes is the DataVolume's size, CapacityBytes the bound
	// claim's (0 until bound).
	RequestedBytes, CapacityBytes int64
	Class                         ClassResolution
	PVCName, PVName, VolumeHandle string
	VolumeMode                    string
	// ClaimRequestBytes is its claim's request (a spec.storage Filesystem
	// claim carries CDI's overhead), what CDI compares a clone's size with;
	// 0 before the claim exists. ContentType and VirtualSize are what CDI
	// recorded on the claim (see cdirules.Source).
	ClaimRequestBytes int64
	ContentType       string
	VirtualSize       int64
	// Snapshot is set for a golden VolumeSnapshot (an image golden): what
	// CDI reads of it and its content (ReadSnapshot). SnapshotHandle is its
	// content's status.snapshotHandle, the source of the restores the
	// driver is asked for.
	Snapshot       *cdirules.Snapshot
	SnapshotHandle string
	// FromClaim: a claim no DataVolume made (addClaimGoldens). Nothing
	// imports it, so a disk waits on its binding as on any clone source.
	FromClaim bool
}

// IsSnapshot reports whether the golden is a VolumeSnapshot.
func (g *Golden) IsSnapshot() bool { return g.Snapshot != nil }

// Trusted reports whether the golden follows the naming rules.
func (g *Golden) Trusted() bool { return len(g.Problems) == 0 }

// Ref is the golden's namespace/name.
func (g *Golden) Ref() types.NamespacedName {
	return types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
}

// SizeBytes is the golden's size as a clone source sees it: the bound
// capacity, or the requested size before it is bound.
func (g *Golden) SizeBytes() int64 {
	if g.CapacityBytes > 0 {
		return g.CapacityBytes
	}
	return g.RequestedBytes
}

// Imported reports whether the golden's import finished.
func (g *Golden) Imported() bool { return g.Phase == string(cdiv1.Succeeded) }

// Importing reports whether the golden's import (or its snapshot's cut) is
// yet to finish: its disks wait for it, never stuck meanwhile. A claim
// golden has no import: a disk of one that never binds is stuck after
// --stuck-after, as a disk of any source.
func (g *Golden) Importing() bool { return !g.Imported() && !g.FromClaim }

// IsImage reports whether the golden is not a Talos flavor's.
func (g *Golden) IsImage() bool { return g.Image != "" }

// isTalosGolden: a DataVolume named like a Talos golden or carrying either
// flavor annotation; in a golden namespace it is a golden of the catalog.
func isTalosGolden(dv *cdiv1.DataVolume) bool {
	_, hasSID := dv.Annotations[AnnSchematicID]
	_, hasVer := dv.Annotations[AnnTalosVersion]
	return strings.HasPrefix(dv.Name, goldenNamePrefix) || hasSID || hasVer
}

// parseGoldenName splits talos-worker-<schematicID>-<version>; a schematic ID
// has no dash, so the first dash after the prefix ends it.
func parseGoldenName(name string) (Flavor, bool) {
	rest, ok := strings.CutPrefix(name, goldenNamePrefix)
	if !ok {
		return Flavor{}, false
	}
	sid, ver, ok := strings.Cut(rest, "-")
	if !ok {
		return Flavor{}, false
	}
	return Flavor{SchematicID: sid, Version: ver}, true
}

// goldenFlavor reads the flavor from the annotations, falling back to the
// name, and lists every rule broken, including a name that does not match
// the annotations (both sides build the name from the same fields).
func GoldenFlavor(name string, ann map[string]string) (Flavor, []string) {
	fromName, nameOK := parseGoldenName(name)
	f := Flavor{SchematicID: ann[AnnSchematicID], Version: ann[AnnTalosVersion]}
	if f.SchematicID == "" {
		f.SchematicID = fromName.SchematicID
	}
	if f.Version == "" {
		f.Version = fromName.Version
	}
	problems := flavorProblems(f)
	if want := goldenNamePrefix + f.SchematicID + "-" + f.Version; !nameOK || name != want {
		problems = append(problems, fmt.Sprintf("name %q is not %q", name, Clip(want, 120)))
	}
	return f, problems
}

// ImageIdentity is a non-Talos golden's identity: the vm-default-images
// name when present, else the object's name.
func ImageIdentity(name string, ann map[string]string) string {
	if v := ann[AnnImageName]; v != "" {
		return v
	}
	return name
}

// newGolden builds the golden of a DataVolume of a golden namespace and
// joins its claim, volume and class.
func newGolden(dv *cdiv1.DataVolume, inv *Inventory) *Golden {
	g := &Golden{
		Namespace: dv.Namespace, Name: dv.Name, UID: dv.UID,
		Phase: string(dv.Status.Phase), RestartCount: dv.Status.RestartCount,
		Created:        dv.CreationTimestamp.Time,
		ReadySince:     readySince(dv),
		RequestedBytes: RequestedBytes(dv),
		PVCName:        ClaimName(dv),
	}
	if isTalosGolden(dv) {
		g.Flavor, g.Problems = GoldenFlavor(dv.Name, dv.Annotations)
	} else {
		g.Image = ImageIdentity(dv.Name, dv.Annotations)
	}
	pvc := inv.ClaimOf(g.Namespace, g.PVCName)
	g.Class = inv.Classes.resolveClassFor(pvc, inv.BoundPV(pvc), requestedClass(dv), string(dv.Spec.ContentType),
		dv.Spec.Storage == nil && dv.Spec.PVC != nil)
	// The golden's volume mode: its PV's once bound; before that its claim's,
	// and before CDI made the claim the DataVolume's own request. Left
	// empty, the prediction would render a not-yet-imported Block golden as
	// Filesystem and call every Block worker of it host-assisted.
	g.VolumeMode, _ = requestedModes(dv)
	inv.joinClaim(g, pvc)
	return g
}

// joinClaim fills in what a golden's claim and its volume say: the bound
// capacity, the request, the content type and image size CDI recorded, and
// the volume mode (the PV's over the claim's over what g holds).
func (inv *Inventory) joinClaim(g *Golden, pvc *corev1.PersistentVolumeClaim) {
	if pvc == nil {
		return
	}
	if pvc.Status.Phase == corev1.ClaimBound {
		g.CapacityBytes = claimCapacity(pvc)
	}
	g.ClaimRequestBytes = ClaimRequest(pvc)
	g.ContentType, g.VirtualSize = pvc.Annotations[cdirules.AnnContentType], recordedImageSize(pvc)
	if pvc.Spec.VolumeMode != nil {
		g.VolumeMode = string(*pvc.Spec.VolumeMode)
	}
	if pv := inv.BoundPV(pvc); pv != nil {
		g.PVName = pv.Name
		g.VolumeHandle = CsiHandle(pv)
		if pv.Spec.VolumeMode != nil {
			g.VolumeMode = string(*pv.Spec.VolumeMode)
		}
	}
}

// Claim goldens: a claim of a golden namespace that no DataVolume made (an
// operator's, or one restored from a snapshot) is a golden as soon as a
// DataSource or a disk names it, as CDI clones it all the same. CDI's own
// claims there (tmp-pvc, prime, scratch) are named by neither, and a
// Talos-named claim without its DataVolume stays a deleted catalog golden.

// addClaimGoldens makes a golden of each named claim of a golden namespace
// that exists, is no DataVolume's (dvClaims) and no golden yet.
func (inv *Inventory) addClaimGoldens(named []types.NamespacedName, goldenNamespaces config.Namespaces, dvClaims map[types.NamespacedName]bool) {
	slices.SortFunc(named, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	for _, ref := range slices.Compact(named) {
		if !goldenNamespaces.Has(ref.Namespace) || dvClaims[ref] || inv.GoldenByRef[ref] != nil || strings.HasPrefix(ref.Name, goldenNamePrefix) {
			continue
		}
		pvc := inv.ClaimOf(ref.Namespace, ref.Name)
		if pvc == nil {
			continue
		}
		g := &Golden{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, Created: pvc.CreationTimestamp.Time,
			Image: ImageIdentity(pvc.Name, pvc.Annotations), Phase: string(cdiv1.Pending), PVCName: pvc.Name,
			RequestedBytes: ClaimRequest(pvc), FromClaim: true}
		if pvc.Status.Phase == corev1.ClaimBound {
			g.Phase = string(cdiv1.Succeeded)
		}
		g.Class = inv.Classes.resolveClassFor(pvc, inv.BoundPV(pvc), pvc.Spec.StorageClassName, "", true)
		inv.joinClaim(g, pvc)
		inv.Images = append(inv.Images, g)
		inv.GoldenByRef[ref] = g
	}
}

// readySince is when the import finished: the Ready condition's last
// transition, or the creation time of a Succeeded DataVolume without one.
func readySince(dv *cdiv1.DataVolume) time.Time {
	if dv.Status.Phase != cdiv1.Succeeded {
		return time.Time{}
	}
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeReady && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	return dv.CreationTimestamp.Time
}

// boundSince is when CDI's DataVolume controller saw the claim bound: the
// Bound condition's last transition, set when it turns True
// (datavolume/conditions.go updateBoundCondition, updateCondition).
func boundSince(dv *cdiv1.DataVolume) time.Time {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeBound && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// recordedImageSize is the image size CDI recorded on a claim, valid while
// the capacity it recorded with it is the claim's (pvc-clone-controller.go
// getSizeFromAnnotations); 0 otherwise.
func recordedImageSize(pvc *corev1.PersistentVolumeClaim) int64 {
	size, err := strconv.ParseInt(pvc.Annotations[cdirules.AnnVirtualSize], 10, 64)
	if err != nil {
		return 0
	}
	recorded, err := resource.ParseQuantity(pvc.Annotations[cdirules.AnnSourceCapacity])
	if err != nil || recorded.Value() != claimCapacity(pvc) {
		return 0
	}
	return size
}
