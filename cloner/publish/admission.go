package publish

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cozystack/csi-clone-sidecar/cloner/cdirules"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// AdmissionParamsName is the ConfigMap, in the sidecar's namespace, that the
// admission guard (deploy/admission, a ValidatingAdmissionPolicy) reads as
// its parameters. The leader keeps it current with --admission-params.
const AdmissionParamsName = "csi-clone-sidecar-admission"

// States of the admission parameters in the snapshot.
const (
	AdmissionParamsSynced = "synced"
	AdmissionParamsFailed = "failed"
)

// Keys of the parameters. CEL reads a ConfigMap's data as a flat string map:
//
//	<golden>.phase, .class, .contentType      the golden's facts
//	<golden>.id                               "_g<n>", the golden's id in its regions' keys
//	<id>.<kind>.<mode>.<class>                "<n>": the regions are row _regions.<n>
//	<id>.<kind>.<mode>.<class>.<variant>      the same for a disk with per-disk inputs (guardVariants),
//	                                          only where it differs from the key it falls back to
//	_regions.<n>                              "<min>:<fit>:<sizeless>:<small>:<atSize>:<larger>"
//	<golden>.path.<class>                     the pool disk's path, larger than the golden (readable summary)
//	class.<class>.provisioner                 the class exists
//	class.<class>.mode                        the volume mode of its StorageProfile's claimPropertySets[0]
//	class.<class>.modes                       the modes its claimPropertySets offer, comma-separated
//	class.<class>.am.<accessMode>             "<index>:<mode>" of the first claimPropertySet with the access mode
//	fix.<reason>                              each bad reason's fix
//	dataSource.<namespace>.<name>             "<pvcNamespace>/<pvcName>" the DataSource clones ("" namespace: the
//	                                          DataVolume's, and the variant unqualified); of a DataSource of a
//	                                          VolumeSnapshot, "<namespace>/_snapshot.<name>"
//	rule.class-mismatch                       "guard": a disk onto another class than its golden's is warned about
//	                                          or refused; "allow": admitted (predict.GuardRules)
//	<golden>.worker                           "true": a Talos flavor's golden, whose clones are worker disks
//	class.<class>.accessModes                 the access modes CDI renders for a spec.storage disk naming neither
//	                                          access modes nor a volume mode, comma-separated (the worker template's)
//	class.<class>.accessModes.<mode>          the same for one naming only the volume mode <mode>
//
// The last three are the worker access-mode warning's
// (deploy/admission/warn/access-modes-policy.yaml, bound Warn whatever the guard's
// mode: a worker disk without ReadWriteMany clones at the storage layer all
// the same, so it is never refused).
//
// A golden VolumeSnapshot's keys are those of a golden named
// "_snapshot.<name>" (SnapshotGoldenKey), its class the class of the claim
// it was cut from.
//
// <kind> is pvc or storage, <mode> the claim's volume mode (Block or
// Filesystem: the guard resolves a DataVolume's as CDI does, from the class
// keys), each path "<path>/<reason>". A DataVolume's size b picks one: no
// size: sizeless; b < min: small (CDI refuses the size); b <= fit: atSize
// (the claim fits the golden); else larger (predict.Regions).
const (
	paramGoldenNamespace = "goldenNamespace"
	// paramDefaultStorage is what an empty class of a spec.storage
	// DataVolume of content kubevirt resolves to, paramDefaultPVC that of a
	// spec.pvc one or an archive (the Kubernetes default).
	paramDefaultStorage = "defaultClass.storage"
	paramDefaultPVC     = "defaultClass.pvc"
	// paramClassMismatch switches the guard's class-mismatch rule:
	// ruleGuard or ruleAllow.
	paramClassMismatch = "rule.class-mismatch"
	ruleGuard          = "guard"
	ruleAllow          = "allow"
)

// guardKinds and guardModes are the claim shapes the guard's keys cover.
var (
	guardKinds = []cdirules.SpecKind{cdirules.KindPVC, cdirules.KindStorage}
	guardModes = []string{cdirules.Block, cdirules.Filesystem}
)

// admissionData renders the prediction as the guard's parameters. A key
// that would break ConfigMap key rules is left out: the guard then checks
// nothing for it (fail open).
func AdmissionData(p *verdict.Predictor, goldenNamespace string, rules predict.GuardRules) map[string]string {
	d := map[string]string{paramGoldenNamespace: goldenNamespace, paramClassMismatch: ruleGuard}
	if rules.AllowClassMismatch {
		d[paramClassMismatch] = ruleAllow
	}
	put := func(k, v string) {
		if len(validation.IsConfigMapKey(k)) == 0 {
			d[k] = v
		}
	}
	if p.StorageDefault.Resolved() {
		put(paramDefaultStorage, p.StorageDefault.Name)
	}
	if p.PvcDefault.Resolved() {
		put(paramDefaultPVC, p.PvcDefault.Name)
	}
	classes := p.State.ClassNames()
	csi := map[string]bool{}
	for _, c := range p.State.CSIClasses() {
		csi[c] = true
	}
	for _, c := range classes {
		for k, v := range p.State.ClassModes(c) {
			put("class."+c+"."+k, v)
		}
	}
	w := goldenWriter{state: p.State, classes: classes, csi: csi, put: put, bad: map[string]bool{}, rows: map[string]string{}}
	for _, g := range inNamespace(p.AllGoldens(), goldenNamespace) {
		w.golden(g.Name, g)
	}
	for _, g := range inNamespace(p.SnapshotGoldens(), goldenNamespace) {
		w.golden(SnapshotGoldenKey(g.Name), g)
	}
	bad := w.bad
	for _, r := range perDiskBadReasons {
		bad[r] = true
	}
	for r := range bad {
		put("fix."+r, predict.Fix(r))
	}
	workerAccessModes(p, goldenNamespace, put)
	for _, ds := range p.DataSources {
		if pvc := cdirules.DataSourcePVC(ds); pvc != nil {
			put("dataSource."+ds.Namespace+"."+ds.Name, pvc.Namespace+"/"+pvc.Name)
		} else if vs := cdirules.DataSourceSnapshot(ds); vs != nil {
			put("dataSource."+ds.Namespace+"."+ds.Name, vs.Namespace+"/"+SnapshotGoldenKey(vs.Name))
		}
	}
	return d
}

// SnapshotGoldenKey is the name a golden VolumeSnapshot's keys start with:
// kept apart from a golden DataVolume of the same name by a prefix no
// object name can have (names are DNS subdomains: no underscore).
func SnapshotGoldenKey(name string) string { return snapshotKeyPrefix + name }

const snapshotKeyPrefix = "_snapshot."

// inNamespace are the goldens of one namespace, by name: the order fixes
// their ids and rows (goldenWriter), so an unchanged fleet writes the same
// parameters on every pass.
func inNamespace(goldens map[types.NamespacedName]predict.Golden, namespace string) []predict.Golden {
	var out []predict.Golden
	for ref, g := range goldens {
		if ref.Namespace == namespace {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b predict.Golden) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// goldenWriter writes the goldens' keys; bad collects the bad reasons met,
// for their fixes.
//
// The regions are most of the parameters (some 16 keys per golden and
// class), so they are written short: under the golden's id ("<golden>.id",
// "_g<n>", not a Talos golden's 90-character name in every key), each
// naming a row of the regions table ("_regions.<n>", the value), which the
// goldens of one size and shape share. TestAdmissionParamsFitOneConfigMap
// measures what that buys.
type goldenWriter struct {
	state   *predict.State
	classes []string
	csi     map[string]bool // classes with a CSIDriver object
	put     func(k, v string)
	bad     map[string]bool
	// rows numbers the regions values written so far; ids counts goldens.
	rows map[string]string
	ids  int
}

// row is the number of a regions value's row, written the first time.
func (w *goldenWriter) row(regions string) string {
	n, ok := w.rows[regions]
	if !ok {
		n = strconv.Itoa(len(w.rows))
		w.rows[regions] = n
		w.put(regionsRowPrefix+n, regions)
	}
	return n
}

// The id's and the rows' prefixes start with an underscore, which no object
// name has: no golden's own keys can be mistaken for them.
const (
	goldenIDPrefix   = "_g"
	regionsRowPrefix = "_regions."
)

// golden writes one golden's facts and, per class, spec kind and volume
// mode, its regions and their per-disk variants under name's id.
func (w *goldenWriter) golden(name string, g predict.Golden) {
	put, bad := w.put, w.bad
	id := goldenIDPrefix + strconv.Itoa(w.ids)
	w.ids++
	put(name+".id", id)
	put(name+".phase", g.Phase)
	if g.Class != "" {
		put(name+".class", g.Class)
	}
	put(name+".contentType", cdirules.ContentType(g.ContentType))
	for _, c := range w.classes {
		for _, kind := range guardKinds {
			for _, mode := range guardModes {
				t := predict.Target{Class: c, Kind: kind, VolumeMode: mode, AccessModes: []string{"ReadWriteOnce"}, ContentType: g.ContentType}
				r := w.state.Regions(g, t)
				key := id + "." + string(kind) + "." + mode + "." + c
				put(key, w.row(regionsValue(r)))
				variants := perDiskRegions(w.state, g, t, regionsValue(r), w.csi[c])
				for _, k := range slices.Sorted(maps.Keys(variants)) {
					v := variants[k]
					put(key+"."+k, w.row(v))
					for _, reason := range badRegionReasons(v) {
						bad[reason] = true
					}
				}
				for _, pr := range []predict.Prediction{r.Sizeless, r.Small, r.AtSize, r.Larger} {
					if pr.Bad() {
						bad[pr.Reason] = true
					}
				}
				if kind == cdirules.KindStorage && mode == resolvedGoldenMode(g) {
					put(name+".path."+c, pathValue(r.Larger))
				}
			}
		}
	}
}

// workerAccessModes writes the worker access-mode warning's parameters: which
// goldens are worker goldens, and per class the access modes CDI renders
// (cdirules.RenderClaim, the model the CDI differential compares with every
// claim cdi-controller makes) for a disk that leaves them to the
// StorageProfile. A class CDI renders no claim for gets no key: the warning
// then says nothing (the guard names the unrenderable claim).
func workerAccessModes(p *verdict.Predictor, goldenNamespace string, put func(k, v string)) {
	for ref := range p.Goldens {
		if ref.Namespace == goldenNamespace {
			put(ref.Name+".worker", "true")
		}
	}
	for _, c := range p.State.ClassNames() {
		for _, mode := range []string{"", cdirules.Block, cdirules.Filesystem} {
			claim, err := p.State.Claim(predict.Target{Class: c, Kind: cdirules.KindStorage, VolumeMode: mode})
			if err != nil || len(claim.AccessModes) == 0 {
				continue
			}
			key := "class." + c + ".accessModes"
			if mode != "" {
				key += "." + mode
			}
			put(key, strings.Join(claim.AccessModes, ","))
		}
	}
	put("fix."+record.ReasonNotReadWriteMany, record.Fix(record.ReasonNotReadWriteMany))
}

func regionsValue(r predict.Regions) string {
	return strconv.FormatInt(r.MinBytes, 10) + ":" + strconv.FormatInt(r.FitBytes, 10) + ":" + pathValue(r.Sizeless) + ":" +
		pathValue(r.Small) + ":" + pathValue(r.AtSize) + ":" + pathValue(r.Larger)
}

func pathValue(p predict.Prediction) string { return p.Path + "/" + p.Reason }

// badRegionReasons are the reasons of a regions value's paths that are not
// a clone at the storage layer (predict.Prediction.Bad's paths).
func badRegionReasons(regions string) []string {
	var out []string
	fields := strings.Split(regions, ":")
	for _, f := range fields[min(2, len(fields)):] {
		if path, reason, ok := strings.Cut(f, "/"); ok && (predict.Prediction{Path: path}).Bad() {
			out = append(out, reason)
		}
	}
	return out
}

func resolvedGoldenMode(g predict.Golden) string {
	if g.VolumeMode == cdirules.Block {
		return cdirules.Block
	}
	return cdirules.Filesystem
}

// guardVariants are the per-disk inputs whose effect depends on the
// disk's size and class, so the guard reads regions for them: the
// cloneType CDI obeys as is (csi-clone, snapshot), permissiveClone, and a
// DataSource naming the golden without a namespace (unqualified: decided
// before the populator reads any cloneType, so it takes precedence). On a
// class without a CSIDriver object each also gets a "pop." variant, with
// usePopulator true (the populators all the same); on one with a CSIDriver
// that is the variant itself. The other values decide the path alone and
// the policy spells them out: usePopulator false (populator-off) or
// unparsable (use-populator-invalid), cloneType copy (clone-type-copy) or
// any other (unknown-strategy).
var guardVariants = []struct {
	name        string
	perDisk     cdirules.PerDisk
	unqualified bool
}{
	{cdirules.StrategyCSIClone, cdirules.PerDisk{CloneType: ptrTo(cdirules.StrategyCSIClone)}, false},
	{cdirules.StrategySnapshot, cdirules.PerDisk{CloneType: ptrTo(cdirules.StrategySnapshot)}, false},
	{"permissive", cdirules.PerDisk{Permissive: true}, false},
	{"unqualified", cdirules.PerDisk{}, true},
}

func ptrTo(s string) *string { return &s }

// perDiskBadReasons are the reasons the policy names itself; their fixes
// are always published.
var perDiskBadReasons = []string{predict.ReasonCloneTypeCopy, predict.ReasonPopulatorOff, predict.ReasonUsePopulatorInvalid,
	predict.ReasonUnknownStrategy}

// perDiskRegions are the variants' regions for one target, by key suffix,
// each only where it differs from what the policy falls back to without
// it: "<variant>" falls back to the base, "pop" to the base, "pop.<variant>"
// to "<variant>". csiClass: the target's class has a CSIDriver object (no
// "pop." variants: usePopulator true changes nothing there).
func perDiskRegions(s *predict.State, g predict.Golden, t predict.Target, base string, csiClass bool) map[string]string {
	out := map[string]string{}
	at := func(pd cdirules.PerDisk, unqualified bool) string {
		t.PerDisk, t.UnqualifiedSource = pd, unqualified
		return regionsValue(s.Regions(g, t))
	}
	yes := "true"
	if !csiClass {
		if v := at(cdirules.PerDisk{UsePopulator: &yes}, false); v != base {
			out["pop"] = v
		}
	}
	for _, gv := range guardVariants {
		if gv.perDisk.Permissive && strings.HasPrefix(base, "1:") && csiClass {
			// No size is refused: skipping the size check changes nothing.
			continue
		}
		plain := at(gv.perDisk, gv.unqualified)
		if plain != base {
			out[gv.name] = plain
		}
		if csiClass {
			continue
		}
		withPop := gv.perDisk
		withPop.UsePopulator = &yes
		if v := at(withPop, gv.unqualified); v != plain {
			out["pop."+gv.name] = v
		}
	}
	return out
}
