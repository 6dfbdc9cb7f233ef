package report

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// ReportClonePaths prints the predicted clone path of every golden on
// class (every CSI class and the empty one when class is ""), in format
// "table" or "json". It reads the objects once and changes nothing.
func ReportClonePaths(ctx context.Context, clients config.Clients, cfg config.Config, w io.Writer, format, class string) error {
	if err := checkFormat(format, "table", "json"); err != nil {
		return err
	}
	inv, err := readInventory(ctx, clients, cfg)
	if err != nil {
		return err
	}
	paths, err := clonePaths(ctx, clients, inv, class)
	if err != nil {
		return err
	}
	return writeReport(w, format, paths, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		printClonePaths(tw, paths)
		return tw.Flush()
	})
}

// clonePaths predicts from the API's objects; with class set, only that
// class (a name, or predict.EmptyClass), predicted even if it is not a CSI
// class or does not exist.
func clonePaths(ctx context.Context, clients config.Clients, inv *fleet.Inventory, class string) ([]verdict.ClonePathReport, error) {
	p, err := readPredictor(ctx, clients, inv)
	if err != nil {
		return nil, err
	}
	return pathsOn(p, inv, class), nil
}

// readPredictor predicts from the prediction's objects, read once.
func readPredictor(ctx context.Context, clients config.Clients, inv *fleet.Inventory) (*verdict.Predictor, error) {
	in, err := listPredictionInputs(ctx, clients)
	if err != nil {
		return nil, err
	}
	return verdict.BuildPredictor(in, inv), nil
}

// pathsOn is what clonePaths reports of a predictor.
// Both kinds of golden: the Talos catalog's and the image goldens.
func pathsOn(p *verdict.Predictor, inv *fleet.Inventory, class string) []verdict.ClonePathReport {
	pairs := append(append([]predict.Pair(nil), p.Pairs...), p.ImagePairs...)
	if class != "" {
		t := predict.Target{Class: class}
		if class == predict.EmptyClass {
			t = verdict.TargetOfClass(p.StorageDefault)
		}
		all := p.AllGoldens()
		goldens := make([]predict.Golden, 0, len(inv.Goldens)+len(inv.Images))
		for _, g := range slices.Concat(inv.Goldens, inv.Images) {
			goldens = append(goldens, all[g.Ref()])
		}
		pairs = p.State.PairsOn(goldens, class, t)
	}
	out := p.Reports(pairs)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Golden < out[j].Golden })
	return out
}

// listPredictionInputs reads what the prediction needs, straight from the
// API server. VolumeSnapshotClasses not served means none, as for CDI.
func listPredictionInputs(ctx context.Context, clients config.Clients) (predict.Inputs, error) {
	var in predict.Inputs
	drivers, err := clients.Kube.StorageV1().CSIDrivers().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing CSIDrivers: %w", err)
	}
	for _, d := range drivers.Items {
		in.CSIDrivers = append(in.CSIDrivers, d.Name)
	}
	sps, err := clients.Dynamic.Resource(fleet.StorageProfileGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing StorageProfiles (is CDI installed?): %w", err)
	}
	cdis, err := clients.Dynamic.Resource(fleet.CDIGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing CDI resources: %w", err)
	}
	// Unreadable objects are left out; the sidecar reports them as malformed.
	var unreadable []fleet.MalformedObject
	in.Profiles = fleet.ConvertAll[cdiv1.StorageProfile](fleet.UnstructuredList(itemsOf(sps.Items)), &unreadable)
	in.CDIs = fleet.ConvertAll[cdiv1.CDI](fleet.UnstructuredList(itemsOf(cdis.Items)), &unreadable)
	configs, err := clients.Dynamic.Resource(fleet.CDIConfigGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing CDIConfigs: %w", err)
	}
	in.CDIConfigs = fleet.ConvertAll[cdiv1.CDIConfig](fleet.UnstructuredList(itemsOf(configs.Items)), &unreadable)
	sources, err := clients.Dynamic.Resource(fleet.DataSourceGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing DataSources: %w", err)
	}
	in.DataSources = fleet.ConvertAll[cdiv1.DataSource](fleet.UnstructuredList(itemsOf(sources.Items)), &unreadable)
	vscs, err := clients.Dynamic.Resource(fleet.VolumeSnapshotClassGVR).List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		in.SnapshotClasses = fleet.SnapshotClasses(fleet.UnstructuredList(itemsOf(vscs.Items)))
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
	default:
		return in, fmt.Errorf("listing VolumeSnapshotClasses: %w", err)
	}
	return in, nil
}

func itemsOf[T any](items []T) []any {
	out := make([]any, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// printClonePaths writes the "clone paths" table.
func printClonePaths(tw io.Writer, paths []verdict.ClonePathReport) {
	fmt.Fprintln(tw, "GOLDEN\tCLASS\tPATH\tREASON\tAT GOLDEN SIZE\tACCESS MODES\tFLAGS\tFIX")
	for _, p := range paths {
		class := p.StorageClass
		if p.StorageClass == predict.EmptyClass {
			class += " -> " + verdict.OrNone(p.ResolvedClass)
		}
		path := p.Path
		if len(p.Uncertain) > 0 {
			path += " (uncertain)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Golden, class, path, p.Reason, p.AtGoldenSize,
			verdict.OrNone(strings.Join(p.AccessModes, ",")), verdict.OrNone(strings.Join(p.Flags, ", ")), verdict.OrNone(p.Fix))
	}
}
