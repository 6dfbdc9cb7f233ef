package report

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// ReportData is what `csi-clone-sidecar report -o json` prints.
type ReportData struct {
	// Ledger names the ConfigMap the counters come from ("" when none exists yet).
	Ledger   string          `json:"ledger"`
	Flavors  []FlavorReport  `json:"flavors"`
	Pools    []PoolReport    `json:"pools"`
	BadDisks []BadDiskReport `json:"badDisks"`
	// Untrusted are the goldens that break the naming rules: not a flavor,
	// only a problem, with the disks that name them.
	Untrusted []UntrustedGoldenReport `json:"untrustedGoldens"`
	// Images are the goldens that are not a Talos flavor's (vm-default-images
	// and any other DataVolume of a golden namespace) that disks clone.
	Images []ImageReport `json:"images"`
	// ClonePaths is the predicted clone path of every golden on every CSI
	// class and the empty one (report_paths.go); ClonePathsError says why
	// it is missing when the prediction's objects cannot be read.
	ClonePaths      []verdict.ClonePathReport `json:"clonePaths"`
	ClonePathsError string                    `json:"clonePathsError,omitempty"`
	// SeenPaths are the paths the disks took, per golden and class: the
	// verdicts next to the prediction.
	SeenPaths []SeenPathReport `json:"seenPaths"`
	// Checks are the checks of the install that no verdict covers
	// (checks.go).
	Checks []CheckReport `json:"checks"`
}

// UntrustedGoldenReport is a golden that breaks the naming rules.
type UntrustedGoldenReport struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Problems  []string `json:"problems"`
	// Consumers are the worker disks ("namespace/name") that name it.
	Consumers []string `json:"consumers"`
	Fix       string   `json:"fix"`
}

// ImageReport is one golden that is not a Talos flavor's, with the disks
// that clone it by verdict.
type ImageReport struct {
	Namespace    string         `json:"namespace"`
	Name         string         `json:"name"`
	Image        string         `json:"image"`
	Phase        string         `json:"phase"`
	StorageClass string         `json:"storageClass"`
	SizeBytes    int64          `json:"sizeBytes"`
	Consumers    int            `json:"consumers"`
	Verdicts     map[string]int `json:"verdicts"`
}

// SeenPathReport counts the disks that clone one golden on one class by
// verdict.
type SeenPathReport struct {
	// Golden is "namespace/name", as in ClonePaths.
	Golden string `json:"golden"`
	// StorageClass is the disk's class, or "(default)" for a disk that names
	// none and has no claim yet.
	StorageClass string         `json:"storageClass"`
	Disks        int            `json:"disks"`
	Verdicts     map[string]int `json:"verdicts"`
}

// FlavorReport is one flavor: its golden(s), consumers and Factory fetches.
type FlavorReport struct {
	SchematicID    string         `json:"schematicID"`
	Version        string         `json:"version"`
	Goldens        []GoldenReport `json:"goldens"`
	Consumers      int            `json:"consumers"`
	GoldenImports  int64          `json:"goldenImports"`
	WorkerImports  int64          `json:"workerImports"`
	FetchesAvoided int64          `json:"fetchesAvoided"`
	BytesAvoided   int64          `json:"bytesAvoided"`
}

// GoldenReport is one golden DataVolume.
type GoldenReport struct {
	Namespace    string   `json:"namespace"`
	Name         string   `json:"name"`
	Phase        string   `json:"phase"`
	StorageClass string   `json:"storageClass"`
	SizeBytes    int64    `json:"sizeBytes"`
	Consumers    int      `json:"consumers"`
	Trusted      bool     `json:"trusted"`
	Problems     []string `json:"problems,omitempty"`
	// SafeToDelete: no worker disk DataVolume names it any more.
	SafeToDelete bool `json:"safeToDelete"`
}

// PoolReport counts one pool's disks by verdict, and says where their
// clones' time went.
type PoolReport struct {
	Namespace string         `json:"namespace"`
	Pool      string         `json:"pool"`
	Disks     int            `json:"disks"`
	Verdicts  map[string]int `json:"verdicts"`
	// PhaseSeconds is the median time per phase over the pool's disks
	// whose timeline dates that phase (record.Timeline.Steps); InFlight
	// counts the disks in flight per phase.
	PhaseSeconds map[string]float64 `json:"phaseSeconds,omitempty"`
	InFlight     map[string]int     `json:"inFlight,omitempty"`
}

// BadDiskReport is one bad disk with every reason and its fix.
type BadDiskReport struct {
	Namespace   string         `json:"namespace"`
	Name        string         `json:"name"`
	Pool        string         `json:"pool"`
	SchematicID string         `json:"schematicID"`
	Version     string         `json:"version"`
	Verdict     string         `json:"verdict"`
	Reasons     []ReasonReport `json:"reasons"`
}

// ReasonReport is one bad reason.
type ReasonReport struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
}

// VerdictUnjudged marks a disk the leader has not written a verdict on yet.
const VerdictUnjudged = "unjudged"

// Report prints the catalog, the pools and the bad disks from the verdicts
// persisted on worker PVCs and the ledger. It changes nothing and needs no
// leadership. cfg.LedgerNamespace may be empty: the ledger is then found by
// its label. format is "table", "json" or "html" (one self-contained page,
// html.go).
func Report(ctx context.Context, clients config.Clients, cfg config.Config, w io.Writer, format string) error {
	if err := checkFormat(format, "table", "json", FormatHTML); err != nil {
		return err
	}
	data, err := gatherReport(ctx, clients, cfg)
	if err != nil {
		return err
	}
	if format == FormatHTML {
		return WriteHTML(w, data, cfg.Clock())
	}
	return writeReport(w, format, data, func(w io.Writer) error { return printTable(w, data) })
}

// checkFormat refuses a format that is not one of allowed.
func checkFormat(format string, allowed ...string) error {
	if !slices.Contains(allowed, format) {
		return fmt.Errorf("unknown output format %q: use %s", format, strings.Join(allowed, " or "))
	}
	return nil
}

// writeReport prints v as indented JSON, or as a table through table.
func writeReport(w io.Writer, format string, v any, table func(io.Writer) error) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return table(w)
}

// readInventory lists everything once, straight from the API server.
func readInventory(ctx context.Context, clients config.Clients, cfg config.Config) (*fleet.Inventory, error) {
	if err := clients.Validate(); err != nil {
		return nil, err
	}
	objs, err := listObjects(ctx, clients)
	if err != nil {
		return nil, err
	}
	if cfg.GoldenNamespace == "" {
		cfg.GoldenNamespace = config.DefaultGoldenNamespace
	}
	return fleet.BuildInventory(objs, cfg.GoldenNamespaces()), nil
}

func gatherReport(ctx context.Context, clients config.Clients, cfg config.Config) (*ReportData, error) {
	inv, err := readInventory(ctx, clients, cfg)
	if err != nil {
		return nil, err
	}
	ledger, name, err := findLedger(ctx, clients, cfg)
	if err != nil {
		return nil, err
	}
	data := &ReportData{Ledger: name}
	data.Flavors = ReportFlavors(inv, ledger)
	// A claimless disk is judged with the prediction when it can be read:
	// too-small is what the model of CDI's rules says.
	pred, err := readPredictor(ctx, clients, inv)
	if err != nil {
		data.ClonePathsError = err.Error()
	} else {
		data.ClonePaths = pathsOn(pred, inv, "")
	}
	ev := JudgeClaimless(inv, cfg, pred)
	data.Pools, data.BadDisks = ReportDisks(inv, ev)
	data.Images = ReportImages(inv, ev)
	data.SeenPaths = ReportSeenPaths(inv, ev)
	data.Untrusted = ReportUntrusted(inv)
	data.Checks = []CheckReport{checkDashboard(ctx, clients, cfg.LedgerNamespace)}
	return data, nil
}

// listObjects reads everything once, straight from the API server.
func listObjects(ctx context.Context, clients config.Clients) (fleet.Objects, error) {
	var o fleet.Objects
	dvs, err := clients.Dynamic.Resource(fleet.DataVolumeGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("listing DataVolumes (is CDI installed?): %w", err)
	}
	for i := range dvs.Items {
		o.DataVolumes = append(o.DataVolumes, fleet.ReadDataVolume(&dvs.Items[i]))
	}
	pvcs, err := clients.Kube.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("listing PersistentVolumeClaims: %w", err)
	}
	for i := range pvcs.Items {
		o.Claims = append(o.Claims, &pvcs.Items[i])
	}
	pvs, err := clients.Kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("listing PersistentVolumes: %w", err)
	}
	for i := range pvs.Items {
		o.Volumes = append(o.Volumes, &pvs.Items[i])
	}
	scs, err := clients.Kube.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("listing StorageClasses: %w", err)
	}
	for i := range scs.Items {
		o.Classes = append(o.Classes, &scs.Items[i])
	}
	sources, err := clients.Dynamic.Resource(fleet.DataSourceGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("listing DataSources (a disk's sourceRef names one): %w", err)
	}
	var unreadable []fleet.MalformedObject // as the leader, which reports them, leaves them out
	o.DataSources = fleet.ConvertAll[cdiv1.DataSource](fleet.UnstructuredList(itemsOf(sources.Items)), &unreadable)
	// Golden VolumeSnapshots and their contents, where the snapshot API is
	// served (a cluster without it has no snapshot goldens).
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		into *[]*unstructured.Unstructured
	}{{fleet.VolumeSnapshotGVR, &o.Snapshots}, {fleet.VolumeSnapshotContentGVR, &o.SnapshotContents}} {
		list, err := clients.Dynamic.Resource(r.gvr).List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return o, fmt.Errorf("listing %s: %w", r.gvr.Resource, err)
		}
		*r.into = fleet.UnstructuredList(itemsOf(list.Items))
	}
	return o, nil
}

// findLedger reads the ledger named by cfg, or the one ConfigMap carrying
// the ledger label when no namespace is given.
func findLedger(ctx context.Context, clients config.Clients, cfg config.Config) (*ledger.Ledger, string, error) {
	name := cfg.LedgerName
	if name == "" {
		name = config.DefaultLedgerName
	}
	cms, err := clients.Kube.CoreV1().ConfigMaps(cfg.LedgerNamespace).List(ctx, metav1.ListOptions{LabelSelector: fleet.LabelLedger + "=" + ledger.LedgerLabelRoot})
	if err != nil {
		return nil, "", fmt.Errorf("listing ledger ConfigMaps: %w", err)
	}
	var found []*corev1.ConfigMap
	for i := range cms.Items {
		if cfg.LedgerNamespace == "" || cms.Items[i].Name == name {
			found = append(found, &cms.Items[i])
		}
	}
	switch len(found) {
	case 0:
		return ledger.NewLedger(), "", nil
	case 1:
		b, err := ledger.ReadLedgerBook(ctx, clients.Kube, found[0].Namespace, found[0].Name)
		if err != nil {
			return nil, "", err
		}
		// A format-1 root still holds its marks: the sum is right either way.
		return b.Merged(false), found[0].Namespace + "/" + found[0].Name, nil
	}
	var names []string
	for _, cm := range found {
		names = append(names, cm.Namespace+"/"+cm.Name)
	}
	return nil, "", fmt.Errorf("several ledgers found (%s): pick one with --ledger-namespace", strings.Join(names, ", "))
}

// reportFlavors joins the catalog with the ledger; a flavor whose goldens are
// gone still shows its counters.
func ReportFlavors(inv *fleet.Inventory, l *ledger.Ledger) []FlavorReport {
	byKey := map[string]*FlavorReport{}
	get := func(f fleet.Flavor) *FlavorReport {
		r := byKey[f.Key()]
		if r == nil {
			r = &FlavorReport{SchematicID: f.SchematicID, Version: f.Version, Goldens: []GoldenReport{}}
			byKey[f.Key()] = r
		}
		return r
	}
	cons := inv.Consumers()
	for _, g := range inv.Goldens {
		if !g.Trusted() {
			continue // a problem, not a flavor: see reportUntrusted
		}
		r := get(g.Flavor)
		n := cons[g.Ref()]
		r.Goldens = append(r.Goldens, GoldenReport{Namespace: g.Namespace, Name: g.Name, Phase: g.Phase,
			StorageClass: g.Class.Name, SizeBytes: g.SizeBytes(), Consumers: n, Trusted: g.Trusted(),
			Problems: g.Problems, SafeToDelete: n == 0})
		r.Consumers += n
	}
	for k, t := range l.Flavors {
		r := get(ledger.SplitFlavorKey(k))
		r.GoldenImports, r.WorkerImports = t.GoldenImports, t.WorkerImports
		r.FetchesAvoided, r.BytesAvoided = t.FetchesAvoided, t.BytesAvoided
	}
	out := make([]FlavorReport, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		return fleet.Flavor{SchematicID: out[i].SchematicID, Version: out[i].Version}.Key() < fleet.Flavor{SchematicID: out[j].SchematicID, Version: out[j].Version}.Key()
	})
	return out
}

// reportUntrusted lists the goldens that break the naming rules and the
// worker disks that name each.
func ReportUntrusted(inv *fleet.Inventory) []UntrustedGoldenReport {
	out := []UntrustedGoldenReport{}
	for _, g := range inv.Goldens {
		if g.Trusted() {
			continue
		}
		u := UntrustedGoldenReport{Namespace: g.Namespace, Name: g.Name, Problems: g.Problems,
			Consumers: []string{}, Fix: record.Fix(record.ReasonInvalidGolden)}
		for _, d := range inv.Disks {
			if d.Kind == fleet.DiskClone && d.GoldenRef == g.Ref() {
				u.Consumers = append(u.Consumers, d.Namespace+"/"+d.Name)
			}
		}
		out = append(out, u)
	}
	return out
}

// judgeClaimless judges the disks CDI made no claim for (it refused the
// clone, or has not got to it): the leader's verdict on them has no object
// to be persisted on, and depends only on the DataVolume and its golden,
// which the report reads as the leader does.
func JudgeClaimless(inv *fleet.Inventory, cfg config.Config, pred *verdict.Predictor) map[types.UID]*record.Record {
	out := map[types.UID]*record.Record{}
	for _, a := range verdict.EvaluateWith(inv, cfg, cfg.Clock(), pred).Assessments {
		if inv.ClaimOf(a.Disk.Namespace, a.Disk.ClaimName) == nil {
			out[a.Disk.UID] = a.Record
		}
	}
	return out
}

// reportDisks reads each worker disk's persisted record: the report shows
// what the leader decided, it does not judge again, except a disk with no
// claim to persist on (claimless, from judgeClaimless).
func ReportDisks(inv *fleet.Inventory, claimless map[types.UID]*record.Record) ([]PoolReport, []BadDiskReport) {
	pools := map[[2]string]*PoolReport{}
	steps := map[[2]string]map[string][]time.Duration{}
	bad := []BadDiskReport{}
	for _, d := range inv.Disks {
		rec := diskRecord(inv, d, claimless)
		key := [2]string{d.Namespace, d.Pool}
		p := pools[key]
		if p == nil {
			p = &PoolReport{Namespace: d.Namespace, Pool: d.Pool, Verdicts: map[string]int{}}
			pools[key] = p
			steps[key] = map[string][]time.Duration{}
		}
		p.Disks++
		p.Verdicts[rec.Verdict]++
		for _, st := range rec.Timeline.Steps() {
			steps[key][st.Phase] = append(steps[key][st.Phase], st.Duration)
		}
		if rec.Phase != "" {
			if p.InFlight == nil {
				p.InFlight = map[string]int{}
			}
			p.InFlight[rec.Phase]++
		}
		if reasons := rec.BadReasons(); len(reasons) > 0 {
			b := BadDiskReport{Namespace: d.Namespace, Name: d.Name, Pool: d.Pool, SchematicID: rec.SchematicID,
				Version: rec.Version, Verdict: rec.Verdict}
			for _, r := range reasons {
				b.Reasons = append(b.Reasons, ReasonReport{Reason: r, Message: rec.MessageFor(r), Fix: record.Fix(r)})
			}
			bad = append(bad, b)
		}
	}
	out := make([]PoolReport, 0, len(pools))
	for key, p := range pools {
		p.PhaseSeconds = medianSeconds(steps[key])
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Pool < out[j].Namespace+"/"+out[j].Pool
	})
	sort.Slice(bad, func(i, j int) bool {
		return bad[i].Namespace+"/"+bad[i].Name < bad[j].Namespace+"/"+bad[j].Name
	})
	return out, bad
}

// diskRecord is a disk's verdict as the leader persisted it, or as the
// report judged it when it has no claim yet.
func diskRecord(inv *fleet.Inventory, d *fleet.WorkerDisk, claimless map[types.UID]*record.Record) *record.Record {
	if r, ok := claimless[d.UID]; ok {
		return r
	}
	rec, err := record.ReadRecord(inv.ClaimOf(d.Namespace, d.ClaimName))
	if err != nil || rec == nil {
		return &record.Record{Verdict: VerdictUnjudged}
	}
	return rec
}

// ReportImages lists the non-Talos goldens that disks clone, each with its
// disks by verdict.
func ReportImages(inv *fleet.Inventory, claimless map[types.UID]*record.Record) []ImageReport {
	out := []ImageReport{}
	for _, g := range inv.Images {
		r := ImageReport{Namespace: g.Namespace, Name: g.Name, Image: g.Image, Phase: g.Phase,
			StorageClass: g.Class.Name, SizeBytes: g.SizeBytes(), Verdicts: map[string]int{}}
		for _, d := range inv.Disks {
			if d.Kind == fleet.DiskClone && d.GoldenRef == g.Ref() {
				r.Consumers++
				r.Verdicts[diskRecord(inv, d, claimless).Verdict]++
			}
		}
		if r.Consumers > 0 { // a golden only once a disk clones it
			out = append(out, r)
		}
	}
	return out
}

// ReportSeenPaths counts the clone disks by golden, class and verdict.
func ReportSeenPaths(inv *fleet.Inventory, claimless map[types.UID]*record.Record) []SeenPathReport {
	byKey := map[[2]string]*SeenPathReport{}
	for _, d := range inv.Disks {
		if d.Kind != fleet.DiskClone {
			continue
		}
		rec := diskRecord(inv, d, claimless)
		key := [2]string{d.GoldenRef.String(), diskClass(inv, d, rec)}
		s := byKey[key]
		if s == nil {
			s = &SeenPathReport{Golden: key[0], StorageClass: key[1], Verdicts: map[string]int{}}
			byKey[key] = s
		}
		s.Disks++
		s.Verdicts[rec.Verdict]++
	}
	out := make([]SeenPathReport, 0, len(byKey))
	for _, s := range byKey {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Golden+"\x00"+out[i].StorageClass < out[j].Golden+"\x00"+out[j].StorageClass
	})
	return out
}

// diskClass is the class a disk landed on: the record's, else its claim's,
// else the one its DataVolume asks for, else predict.EmptyClass.
func diskClass(inv *fleet.Inventory, d *fleet.WorkerDisk, rec *record.Record) string {
	if rec.Class != "" {
		return rec.Class
	}
	if c := inv.ClaimOf(d.Namespace, d.ClaimName); c != nil && c.Spec.StorageClassName != nil && *c.Spec.StorageClassName != "" {
		return *c.Spec.StorageClassName
	}
	if d.RequestedClass != nil && *d.RequestedClass != "" {
		return *d.RequestedClass
	}
	return predict.EmptyClass
}

// printTable writes the report for a terminal: flavors, pools, bad disks.
func printTable(w io.Writer, d *ReportData) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LEDGER\t%s\n\n", verdict.OrNone(d.Ledger))
	fmt.Fprintln(tw, "FLAVOR\tGOLDEN\tPHASE\tCLASS\tSIZE\tCONSUMERS\tFETCHES(golden/worker)\tAVOIDED\tBYTES AVOIDED\tNOTE")
	for _, f := range d.Flavors {
		name := shortFlavor(f.SchematicID, f.Version)
		fetches := fmt.Sprintf("%d/%d", f.GoldenImports, f.WorkerImports)
		if len(f.Goldens) == 0 {
			fmt.Fprintf(tw, "%s\t(none)\t-\t-\t-\t%d\t%s\t%d\t%s\t\n", name, f.Consumers, fetches, f.FetchesAvoided, bytesText(f.BytesAvoided))
		}
		for _, g := range f.Goldens {
			fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", name, g.Namespace, g.Name, verdict.OrNone(g.Phase),
				verdict.OrNone(g.StorageClass), bytesText(g.SizeBytes), g.Consumers, fetches, f.FetchesAvoided, bytesText(f.BytesAvoided), goldenNote(g))
		}
	}
	if len(d.Images) > 0 {
		fmt.Fprintln(tw, "\nIMAGE\tGOLDEN\tPHASE\tCLASS\tSIZE\tCONSUMERS\tVERDICTS")
		for _, g := range d.Images {
			fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\t%d\t%s\n", g.Image, g.Namespace, g.Name, verdict.OrNone(g.Phase),
				verdict.OrNone(g.StorageClass), bytesText(g.SizeBytes), g.Consumers, verdictsText(g.Verdicts))
		}
	}
	fmt.Fprintln(tw, "\nNAMESPACE\tPOOL\tDISKS\tVERDICTS")
	for _, p := range d.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", p.Namespace, verdict.OrNone(p.Pool), p.Disks, verdictsText(p.Verdicts))
	}
	printPhases(tw, d.Pools)
	if len(d.Untrusted) > 0 {
		fmt.Fprintln(tw, "\nUNTRUSTED GOLDEN\tPROBLEMS\tCONSUMERS\tFIX")
		for _, u := range d.Untrusted {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\n", u.Namespace, u.Name, oneLine(strings.Join(u.Problems, "; ")),
				verdict.OrNone(strings.Join(u.Consumers, " ")), u.Fix)
		}
	}
	fmt.Fprintln(tw, "\nBAD DISK\tPOOL\tVERDICT\tREASON\tWHAT\tFIX")
	for _, b := range d.BadDisks {
		for _, r := range b.Reasons {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\n", b.Namespace, b.Name, verdict.OrNone(b.Pool), b.Verdict, r.Reason,
				oneLine(r.Message), r.Fix)
		}
	}
	fmt.Fprintln(tw, "\nCLONE PATHS (predicted for the next disk larger than the golden)")
	if d.ClonePathsError != "" {
		fmt.Fprintf(tw, "unavailable: %s\n", oneLine(d.ClonePathsError))
	}
	printClonePaths(tw, d.ClonePaths)
	fmt.Fprintln(tw, "\nCHECK\tSTATUS\tWHAT\tFIX")
	for _, c := range d.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Check, c.Status, oneLine(c.Message), c.Fix)
	}
	return tw.Flush()
}

func goldenNote(g GoldenReport) string {
	var notes []string
	if !g.Trusted {
		notes = append(notes, "NOT TRUSTED: "+strings.Join(g.Problems, "; "))
	}
	if g.SafeToDelete {
		notes = append(notes, "safe to delete (nothing clones it any more)")
	}
	return strings.Join(notes, "; ")
}

func shortFlavor(sid, ver string) string {
	return fleet.Clip(sid, 12) + "/" + ver
}

func bytesText(b int64) string {
	if b == 0 {
		return "0"
	}
	return resource.NewQuantity(b, resource.BinarySI).String()
}

func verdictsText(v map[string]int) string {
	keys := slices.Sorted(maps.Keys(v))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v[k]))
	}
	return strings.Join(parts, " ")
}

// oneLine keeps tabs and newlines from objects out of the table.
func oneLine(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}
