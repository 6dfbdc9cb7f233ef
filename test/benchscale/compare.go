package main

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	clonerfleet "github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// With -baseline, the fleet is built once and the two binaries take turns
// on it (baseline first, then the sidecar, -rounds times), each starting
// as the first did: on a fleet without verdict records, ledger, admission
// parameters or events of its own. The comparison is then of two binaries
// on the same machine in the same hour, the only kind of speed figure the
// project reports.

// figures are one run's costs: the ones the README's scale table carries.
type figures struct {
	binary          string
	syncAfterStart  float64 // s
	firstBad        float64 // s after sync
	allVerdicts     float64 // s after sync
	cpuAll          float64 // CPU s until every verdict
	steadyPerMinute float64 // CPU s per minute, full pass spread in
	betweenPasses   float64 // CPU s per minute, clear of full passes
	fullPass        float64 // CPU s of one full pass
	peakRSS         float64 // MiB
	peakAnon        float64 // MiB
}

// runOrder is the binaries in the order they run: the sidecar alone, or
// baseline and sidecar alternating, baseline first.
func runOrder(o options) []string {
	if o.baseline == "" {
		return []string{o.sidecar}
	}
	var order []string
	for range o.rounds {
		order = append(order, o.baseline, o.sidecar)
	}
	return order
}

// forgetVerdicts removes what a measured sidecar wrote: the verdict records
// on the claims, the ledger, the admission parameters and its events.
func (f *fleet) forgetVerdicts(ctx context.Context, parallel int) error {
	claims, err := f.kube.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var recorded []corev1.PersistentVolumeClaim
	for _, pvc := range claims.Items {
		if _, ok := pvc.Annotations[clonerfleet.AnnCloneEvidence]; ok || pvc.Annotations[clonerfleet.AnnCloneVerdict] != "" {
			recorded = append(recorded, pvc)
		}
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null,%q:null}}}`, clonerfleet.AnnCloneVerdict, clonerfleet.AnnCloneEvidence)
	err = inParallel(ctx, len(recorded), parallel, func(i int) error {
		_, err := f.kube.CoreV1().PersistentVolumeClaims(recorded[i].Namespace).Patch(ctx, recorded[i].Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("removing verdict records: %w", err)
	}
	cms := f.kube.CoreV1().ConfigMaps(cluster.NamespaceCSI)
	for _, name := range append(ledger.LedgerObjectNames(config.DefaultLedgerName), publish.AdmissionParamsName) {
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ConfigMap %s: %w", name, err)
		}
	}
	events := f.kube.CoreV1().Events(metav1.NamespaceAll)
	own, err := events.List(ctx, metav1.ListOptions{FieldSelector: "source=" + clonerfleet.EventSourceComponent})
	if err != nil {
		return err
	}
	err = inParallel(ctx, len(own.Items), parallel, func(i int) error {
		e := own.Items[i]
		err := f.kube.CoreV1().Events(e.Namespace).Delete(ctx, e.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting the sidecar's events: %w", err)
	}
	fmt.Printf("forgot %d verdict records and %d events before the next binary\n", len(recorded), len(own.Items))
	return nil
}

// printComparison prints each figure's median per binary and the ratio of
// the sidecar's to the baseline's.
func printComparison(o options, runs []figures) {
	if o.baseline == "" {
		return
	}
	fmt.Printf("\n== %s against the baseline %s, %d runs each, alternating, medians ==\n", o.sidecar, o.baseline, o.rounds)
	fmt.Printf("%-36s %10s %10s %8s\n", "figure", "baseline", "sidecar", "ratio")
	for _, row := range []struct {
		name, unit string
		of         func(figures) float64
	}{
		{"informers synced after start", "s", func(f figures) float64 { return f.syncAfterStart }},
		{"first bad verdict after sync", "s", func(f figures) float64 { return f.firstBad }},
		{"every verdict after sync", "s", func(f figures) float64 { return f.allVerdicts }},
		{"CPU until every verdict", "s", func(f figures) float64 { return f.cpuAll }},
		{"CPU in steady state, passes incl.", "s/min", func(f figures) float64 { return f.steadyPerMinute }},
		{"CPU between full passes", "s/min", func(f figures) float64 { return f.betweenPasses }},
		{"CPU of one full pass", "s", func(f figures) float64 { return f.fullPass }},
		{"peak RSS", "MiB", func(f figures) float64 { return f.peakRSS }},
		{"peak anonymous RSS", "MiB", func(f figures) float64 { return f.peakAnon }},
	} {
		base, side := medianOf(runs, o.baseline, row.of), medianOf(runs, o.sidecar, row.of)
		ratio := "-"
		if base != 0 {
			ratio = fmt.Sprintf("%.3fx", side/base)
		}
		fmt.Printf("%-36s %10s %10s %8s\n", row.name+" ("+row.unit+")", fmt.Sprintf("%.2f", base), fmt.Sprintf("%.2f", side), ratio)
	}
}

func medianOf(runs []figures, bin string, of func(figures) float64) float64 {
	var v []float64
	for _, r := range runs {
		if r.binary == bin {
			v = append(v, of(r))
		}
	}
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
