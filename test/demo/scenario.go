package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/demo/pools"
)

// play imports the golden, creates every worker disk and waits until the
// sidecar has a final verdict on each and its metrics show them.
func play(ctx context.Context, c *cluster.Cluster) error {
	golden := pools.GoldenName()
	header(fmt.Sprintf("golden %s/%s (%s on %s) from the Factory", cluster.NamespaceGolden, golden, pools.GoldenSize, pools.GoldenClass))
	t0 := time.Now()
	if _, err := c.CreateGolden(ctx, pools.Golden()); err != nil {
		return err
	}
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, golden, cdiv1.Succeeded, 2*time.Minute); err != nil {
		return err
	}
	fmt.Printf("  Succeeded in %s\n", time.Since(t0).Round(100*time.Millisecond))
	if err := playImage(ctx, c); err != nil {
		return err
	}

	header(fmt.Sprintf("%d disks in %d pools", pools.DiskCount(), len(pools.All)))
	t0 = time.Now()
	for _, p := range pools.All {
		if err := p.Create(ctx, c); err != nil {
			return err
		}
		class := p.Class
		if class == "" {
			class = `""`
		}
		fmt.Printf("  %-13s %-21s %d x %-4s on %-16s %s\n", p.Namespace, p.Name, p.Disks, p.Size, class, p.What)
	}
	if err := waitJudged(ctx, c, t0); err != nil {
		return err
	}
	return waitMetricsShowVerdicts(ctx, c)
}

// playImage imports the vm-default-images golden and publishes it as a
// DataSource, as Cozystack's vm-default-images package and a boot source do.
func playImage(ctx context.Context, c *cluster.Cluster) error {
	img := pools.VMImage()
	golden := cluster.VMImageGoldenName(img.Image)
	header(fmt.Sprintf("golden %s/%s (%s on %s), published as the DataSource %s/%s", cluster.NamespaceGolden, golden, img.Size, img.StorageClass, cluster.NamespaceGolden, img.Image))
	t0 := time.Now()
	if _, err := c.CreateVMImage(ctx, img); err != nil {
		return err
	}
	if err := pools.PublishImage(ctx, c); err != nil {
		return err
	}
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, golden, cdiv1.Succeeded, 2*time.Minute); err != nil {
		return err
	}
	fmt.Printf("  Succeeded in %s\n", time.Since(t0).Round(100*time.Millisecond))
	header(fmt.Sprintf("golden VolumeSnapshot %s/%s of it", cluster.NamespaceGolden, pools.ImageSnapshot))
	t0 = time.Now()
	if err := pools.SnapshotImage(ctx, c); err != nil {
		return err
	}
	fmt.Printf("  ready in %s\n", time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// errIncomplete marks a run whose disks or metrics never settled: the demo
// still shows what there is, then fails.
var errIncomplete = errors.New("incomplete")

// disk is what the cluster shows of one worker disk.
type disk struct {
	pool   pools.Pool
	name   string
	phase  string                        // the DataVolume's (a bare claim's own)
	pvc    *corev1.PersistentVolumeClaim // nil until CDI creates it
	record *record.Record                // the sidecar's persisted verdict, nil until written
}

// final: the sidecar has decided, and nothing more is expected to change.
func (d disk) final() bool {
	return d.record != nil && d.record.Verdict != record.VerdictPending && d.record.Verdict != ""
}

// made: CDI finished the DataVolume, or the bare claim is bound.
func (d disk) made() bool {
	if d.pool.Bare {
		return d.phase == string(corev1.ClaimBound)
	}
	return d.phase == string(cdiv1.Succeeded)
}

// disks reads every worker disk of the demo from the API server.
func disks(ctx context.Context, c *cluster.Cluster) ([]disk, error) {
	var out []disk
	for _, p := range pools.All {
		for i := range p.Disks {
			d := disk{pool: p, name: p.DiskName(i)}
			if !p.Bare {
				dv, err := c.DataVolume(ctx, p.Namespace, d.name)
				if err != nil {
					return nil, err
				}
				d.phase = string(dv.Status.Phase)
			}
			pvc, err := c.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, d.name, metav1.GetOptions{})
			if err == nil {
				d.pvc = pvc
				d.record, err = readRecord(pvc)
			}
			if err == nil && p.Bare {
				d.phase = string(pvc.Status.Phase)
			}
			if err != nil && d.pvc != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// readRecord decodes the verdict the sidecar persisted on a worker PVC.
func readRecord(pvc *corev1.PersistentVolumeClaim) (*record.Record, error) {
	raw := pvc.Annotations[fleet.AnnCloneEvidence]
	if raw == "" {
		return nil, nil
	}
	var r record.Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return nil, fmt.Errorf("PVC %s/%s: unreadable %s: %w", pvc.Namespace, pvc.Name, fleet.AnnCloneEvidence, err)
	}
	return &r, nil
}

// waitJudged waits until every disk has a final verdict, saying when the
// DataVolumes all succeeded and when the last verdict came. On timeout it
// names the disks still open, with their phase and verdict.
func waitJudged(ctx context.Context, c *cluster.Cluster, t0 time.Time) error {
	var last []disk
	succeeded := false
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Failed(); err != nil {
			return false, err
		}
		ds, err := disks(ctx, c)
		if err != nil {
			return false, nil // a disk not created by CDI yet, a conflict: look again
		}
		last = ds
		if !succeeded && count(ds, disk.made) == len(ds) {
			succeeded = true
			fmt.Printf("  every DataVolume Succeeded, every bare claim Bound, %s after creation\n", time.Since(t0).Round(100*time.Millisecond))
		}
		return count(ds, disk.final) == len(ds), nil
	})
	if err != nil {
		var open []string
		for _, d := range last {
			if !d.final() {
				open = append(open, fmt.Sprintf("%s/%s (phase %q, verdict %q)", d.pool.Namespace, d.name, d.phase, verdictOf(d)))
			}
		}
		sort.Strings(open)
		return fmt.Errorf("%w: disks without a final verdict (%v): %s", errIncomplete, err, strings.Join(open, ", "))
	}
	fmt.Printf("  every disk has a final verdict %s after creation\n", time.Since(t0).Round(100*time.Millisecond))
	return nil
}

func verdictOf(d disk) string {
	if d.record == nil {
		return ""
	}
	return d.record.Verdict
}

func count(ds []disk, ok func(disk) bool) int {
	n := 0
	for _, d := range ds {
		if ok(d) {
			n++
		}
	}
	return n
}

// waitMetricsShowVerdicts waits for a scrape whose csi_clone_worker_disks
// match the verdicts on the PVCs: the counters come from the same verdict
// pass, so they are then complete too.
func waitMetricsShowVerdicts(ctx context.Context, c *cluster.Cluster) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ds, err := disks(ctx, c)
		if err != nil {
			return false, nil
		}
		want := map[string]float64{}
		for _, d := range ds {
			want[verdictOf(d)]++
		}
		s, err := scrape(c)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		got := s.sumBy("csi_clone_worker_disks", "verdict")
		last = fmt.Sprintf("metrics %v, PVCs %v", got, want)
		return fmt.Sprint(got) == fmt.Sprint(want), nil
	})
	if err != nil {
		return fmt.Errorf("%w: csi_clone_worker_disks never matched the PVCs' verdicts (%v): %s", errIncomplete, err, last)
	}
	return nil
}
