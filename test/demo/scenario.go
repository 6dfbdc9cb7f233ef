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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// The one flavor of the demo: the Image Factory's schematic of a Talos image
// without extensions, and a Talos version of the shape the platform uses.
const (
	schematicID  = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	talosVersion = "v1.13.2"
	goldenClass  = "replicated"
	goldenSize   = "6Gi"
)

// Volumes are sparse files of the test driver, so the platform's real sizes
// (6Gi golden, 20Gi workers) cost no time or disk.

// pool is one worker pool of the demo: its disks and what it exercises.
type pool struct {
	namespace, name string
	disks           int
	class           string // "" leaves it to the cluster's default
	size            string
	http            bool   // imports from the Factory instead of cloning the golden
	what            string // printed before the run; nothing checks it
}

var pools = []pool{
	{"tenant-alpha", "kubernetes-alpha-md0", 8, goldenClass, "20Gi", false,
		"golden's class, larger: CSI clone, then expand"},
	{"tenant-beta", "kubernetes-beta-md0", 4, goldenClass, goldenSize, false,
		"golden's class and size: CSI clone, nothing to expand"},
	{"tenant-beta", "kubernetes-beta-md1", 2, "", "20Gi", false,
		"no class: the default virtualization class (replicated) wins over the Kubernetes default (replicated-b)"},
	{"tenant-gamma", "kubernetes-gamma-md0", 2, "replicated-fixed", "20Gi", false,
		"class without allowVolumeExpansion, larger target: CDI falls back to a host-assisted copy"},
	{"tenant-gamma", "kubernetes-gamma-md1", 2, "replicated-b", "20Gi", false,
		"another class (pool) of the same driver: CDI asks the driver for a cross-class clone"},
	{"tenant-delta", "kubernetes-delta-md0", 2, goldenClass, "20Gi", true,
		"no golden: source.http from the Factory URL of the flavor, as before the feature"},
}

// storageClasses are three pools of one driver: the goldens' class (also the
// virtualization default), one without expansion, and another pool that is
// the Kubernetes default.
func storageClasses() []cluster.StorageClass {
	return []cluster.StorageClass{
		{Name: goldenClass, DefaultVirt: true},
		{Name: "replicated-fixed", Pool: "fixed", NoExpansion: true},
		{Name: "replicated-b", Pool: "b", Default: true},
	}
}

func diskCount() int {
	n := 0
	for _, p := range pools {
		n += p.disks
	}
	return n
}

func diskName(p pool, i int) string { return fmt.Sprintf("%s-%02d-system", p.name, i+1) }

// play imports the golden, creates every worker disk and waits until the
// sidecar has a final verdict on each and its metrics show them.
func play(ctx context.Context, c *cluster.Cluster) error {
	golden := cluster.GoldenName(schematicID, talosVersion)
	header(fmt.Sprintf("golden %s/%s (%s on %s) from the Factory", cluster.NamespaceGolden, golden, goldenSize, goldenClass))
	t0 := time.Now()
	g := cluster.Golden{SchematicID: schematicID, Version: talosVersion, StorageClass: goldenClass, Size: goldenSize}
	if _, err := c.CreateGolden(ctx, g); err != nil {
		return err
	}
	if _, err := c.WaitDataVolumePhase(ctx, cluster.NamespaceGolden, golden, cdiv1.Succeeded, 2*time.Minute); err != nil {
		return err
	}
	fmt.Printf("  Succeeded in %s\n", time.Since(t0).Round(100*time.Millisecond))

	header(fmt.Sprintf("%d worker disks in %d pools", diskCount(), len(pools)))
	t0 = time.Now()
	for _, p := range pools {
		if err := createPool(ctx, c, p, golden); err != nil {
			return err
		}
		class := p.class
		if class == "" {
			class = `""`
		}
		fmt.Printf("  %-13s %-21s %d x %-4s on %-16s %s\n", p.namespace, p.name, p.disks, p.size, class, p.what)
	}
	if err := waitJudged(ctx, c, t0); err != nil {
		return err
	}
	return waitMetricsShowVerdicts(ctx, c)
}

func createPool(ctx context.Context, c *cluster.Cluster, p pool, golden string) error {
	if err := c.CreateNamespace(ctx, p.namespace); err != nil {
		return err
	}
	for i := range p.disks {
		var err error
		if p.http {
			err = createHTTPDisk(ctx, c, p, diskName(p, i))
		} else {
			_, err = c.CreateWorkerDisk(ctx, cluster.Worker{Namespace: p.namespace, Name: diskName(p, i),
				Golden: golden, Pool: p.name, StorageClass: p.class, Size: p.size})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// createHTTPDisk creates the worker disk of a pool that has not opted in: it
// imports its image from the flavor's Factory URL, as every worker did before
// goldens existed. No defaulting webhook runs here: access and volume mode
// are set as the webhook would.
func createHTTPDisk(ctx context.Context, c *cluster.Cluster, p pool, name string) error {
	block := corev1.PersistentVolumeBlock
	storage := &cdiv1.StorageSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		VolumeMode:  &block,
		Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(p.size)},
		},
	}
	if p.class != "" {
		storage.StorageClassName = &p.class
	}
	dv := &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: name, Annotations: map[string]string{cluster.AnnPool: p.name}},
		Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: c.Factory.URL(schematicID, talosVersion)}},
			Storage: storage,
		},
	}
	_, err := c.CreateDataVolume(ctx, dv)
	return err
}

// errIncomplete marks a run whose disks or metrics never settled: the demo
// still shows what there is, then fails.
var errIncomplete = errors.New("incomplete")

// disk is what the cluster shows of one worker disk.
type disk struct {
	pool   pool
	name   string
	phase  string                        // the DataVolume's
	pvc    *corev1.PersistentVolumeClaim // nil until CDI creates it
	record *cloner.Record                // the sidecar's persisted verdict, nil until written
}

// final: the sidecar has decided, and nothing more is expected to change.
func (d disk) final() bool {
	return d.record != nil && d.record.Verdict != cloner.VerdictPending && d.record.Verdict != ""
}

// disks reads every worker disk of the demo from the API server.
func disks(ctx context.Context, c *cluster.Cluster) ([]disk, error) {
	var out []disk
	for _, p := range pools {
		for i := range p.disks {
			d := disk{pool: p, name: diskName(p, i)}
			dv, err := c.DataVolume(ctx, p.namespace, d.name)
			if err != nil {
				return nil, err
			}
			d.phase = string(dv.Status.Phase)
			pvc, err := c.Client.CoreV1().PersistentVolumeClaims(p.namespace).Get(ctx, d.name, metav1.GetOptions{})
			if err == nil {
				d.pvc = pvc
				d.record, err = readRecord(pvc)
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
func readRecord(pvc *corev1.PersistentVolumeClaim) (*cloner.Record, error) {
	raw := pvc.Annotations[cloner.AnnCloneEvidence]
	if raw == "" {
		return nil, nil
	}
	var r cloner.Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return nil, fmt.Errorf("PVC %s/%s: unreadable %s: %w", pvc.Namespace, pvc.Name, cloner.AnnCloneEvidence, err)
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
		if !succeeded && count(ds, func(d disk) bool { return d.phase == string(cdiv1.Succeeded) }) == len(ds) {
			succeeded = true
			fmt.Printf("  every DataVolume Succeeded %s after creation\n", time.Since(t0).Round(100*time.Millisecond))
		}
		return count(ds, disk.final) == len(ds), nil
	})
	if err != nil {
		var open []string
		for _, d := range last {
			if !d.final() {
				open = append(open, fmt.Sprintf("%s/%s (phase %q, verdict %q)", d.pool.namespace, d.name, d.phase, verdictOf(d)))
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
