package cloner

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

// maxObjectBytes is the API server's limit on one ConfigMap's data.
const maxObjectBytes = 1 << 20

// TestLedgerShardsFit: 100,000 counted disks, with usual names and with the
// longest names Kubernetes allows, leave every ledger object under the
// limit, and the totals count each disk once.
func TestLedgerShardsFit(t *testing.T) {
	for _, tc := range []struct {
		what     string
		ns, name func(i int) string
	}{
		{"usual names", func(i int) string { return fmt.Sprintf("tenant-%03d", i%200) },
			func(i int) string { return fmt.Sprintf("kubernetes-md%d-worker-%06d-system", i%3, i) }},
		{"longest names", func(i int) string { return fmt.Sprintf("%s%03d", strings.Repeat("n", 60), i%200) },
			func(i int) string { return fmt.Sprintf("%s%06d", strings.Repeat("d", 247), i) }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			b := &ledger.LedgerBook{Ns: "cozy-linstor", Name: config.DefaultLedgerName, Root: ledger.NewLedger()}
			var facts [ledger.LedgerShards][]ledger.LedgerFact
			for i := range 100_000 {
				uid := types.UID(fmt.Sprintf("%08x-1111-4222-8333-%012x", i, i*7919))
				f := ledger.LedgerFact{Uid: uid, Ref: tc.ns(i) + "/" + tc.name(i), Flavor: fmt.Sprintf("sid%02d/v1.13.%d", i%20, i%20),
					Avoided: true, Bytes: 6 * clonertest.Gi, Verdict: record.VerdictCSIClone, Duration: time.Duration(i%300) * time.Second, Timed: true}
				facts[ledger.ShardOf(uid)] = append(facts[ledger.ShardOf(uid)], f)
			}
			largest := 0
			for s := range b.Shards {
				b.Shards[s] = ledger.NewLedger()
				b.Shards[s].Apply(facts[s])
				cm := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ledger.ShardName(b.Name, s), Namespace: b.Ns}, Data: b.Shards[s].Encode()}
				raw, err := json.Marshal(cm)
				if err != nil {
					t.Fatal(err)
				}
				largest = max(largest, len(raw))
			}
			if largest >= maxObjectBytes {
				t.Fatalf("largest shard is %d bytes, the limit is %d", largest, maxObjectBytes)
			}
			var avoided int64
			for _, ft := range b.Merged(false).Flavors {
				avoided += ft.FetchesAvoided
			}
			if avoided != 100_000 || b.Merged(false).Durations[record.VerdictCSIClone].Count != 100_000 {
				t.Fatalf("counted %d avoided fetches, %d durations; want 100000 each", avoided, b.Merged(false).Durations[record.VerdictCSIClone].Count)
			}
			t.Logf("%s: largest shard %d bytes, whole ledger %d bytes", tc.what, largest, b.Bytes())
		})
	}
}

// threeClonedDisks is a golden and three finished CSI clones of it.
func threeClonedDisks() *clonertest.World {
	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	for _, n := range []string{"d1", "d2", "d3"} {
		w.Cloned(w.Worker("tenant-a", n, "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass)), clonertest.TestClass, "csi-clone", 20*clonertest.Gi, nil)
	}
	return &w
}

// failNextWrite makes the next ConfigMap write matching name fail as a lost
// request does (the API server never stored it).
func failNextWrite(fc *fakeCluster, verb string, match func(name string) bool) *atomic.Bool {
	var done atomic.Bool
	fc.react(verb, "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		obj := a.(interface{ GetObject() runtime.Object }).GetObject().(*corev1.ConfigMap)
		if !match(obj.Name) || done.Swap(true) {
			return false, nil, nil
		}
		return true, nil, apierrors.NewServiceUnavailable("connection lost")
	})
	return &done
}

// TestLedgerMigratesAFormat1LedgerOnce: the marks of a ledger written before
// sharding move to the shards and its totals stay; a migration cut short is
// done again; nothing is counted twice.
func TestLedgerMigratesAFormat1LedgerOnce(t *testing.T) {
	w := threeClonedDisks()
	fc := newFakeCluster(t, w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	ctx := t.Context()
	// The old version counted the golden's import and d1, d2.
	legacy := ledger.NewLedger()
	legacy.Flavors[fleet.Flavor{SchematicID: clonertest.TestSID, Version: clonertest.TestVer}.Key()] = &ledger.FlavorTotals{FetchesAvoided: 2, GoldenImports: 1, BytesAvoided: 12 * clonertest.Gi}
	legacy.Counted[string(w.Dvs[0].UID)] = &ledger.Mark{Ref: w.Dvs[0].Namespace + "/" + w.Dvs[0].Name, Fetches: 1}
	for _, dv := range w.Dvs[1:3] {
		legacy.Counted[string(dv.UID)] = &ledger.Mark{Ref: dv.Namespace + "/" + dv.Name, Avoided: true}
	}
	data := legacy.Encode()
	data[ledger.LedgerKeyFormat] = ledger.LedgerFormatLegacy
	root := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cfg.LedgerName, Namespace: cfg.LedgerNamespace,
		Labels: map[string]string{fleet.LabelLedger: "true"}}, Data: data}
	if _, err := fc.kube.CoreV1().ConfigMaps(cfg.LedgerNamespace).Create(ctx, root, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The first attempt dies after the shards got the marks, before the
	// root lost them.
	cut := failNextWrite(fc, "update", func(name string) bool { return name == cfg.LedgerName })
	c := fc.controller(t, ctx, cfg)
	if err := c.Pass(ctx); err == nil || !cut.Load() {
		t.Fatal("the cut-short migration was not exercised")
	}
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fc.controller(t, ctx, cfg).Pass(ctx); err != nil { // and a restart
		t.Fatal(err)
	}
	assertTotals(t, fc.ledger(t, cfg), ledger.FlavorTotals{FetchesAvoided: 3, GoldenImports: 1, BytesAvoided: 18 * clonertest.Gi})
	cm, err := fc.kube.CoreV1().ConfigMaps(cfg.LedgerNamespace).Get(ctx, cfg.LedgerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[ledger.LedgerKeyFormat] != ledger.LedgerFormat || cm.Data[ledger.LedgerKeyCounted] != "" {
		t.Fatalf("root not migrated: format %q, counted %q", cm.Data[ledger.LedgerKeyFormat], cm.Data[ledger.LedgerKeyCounted])
	}
	if n := len(fc.ledger(t, cfg).Counted); n != 4 {
		t.Fatalf("%d marks, want 4 (golden, d1-d3)", n)
	}
}

// TestLedgerLostWriteIsCountedLater: a shard write the API server never
// stored leaves the leader's copy as it was, so the next pass counts the
// disk: once, not never.
func TestLedgerLostWriteIsCountedLater(t *testing.T) {
	w := threeClonedDisks()
	fc := newFakeCluster(t, w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	ctx := t.Context()
	d3 := ledger.ShardName(cfg.LedgerName, ledger.ShardOf(w.Dvs[3].UID))
	lost := failNextWrite(fc, "create", func(name string) bool { return name == d3 })
	c := fc.controller(t, ctx, cfg)
	if err := c.Pass(ctx); err == nil || !lost.Load() {
		t.Fatal("the lost write was not exercised")
	}
	for range 2 {
		if err := c.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	assertTotals(t, fc.ledger(t, cfg), ledger.FlavorTotals{FetchesAvoided: 3, GoldenImports: 1, BytesAvoided: 18 * clonertest.Gi})
	if got := c.Snapshot().Flavors; len(got) != 1 || got[0].FetchesAvoided != 3 {
		t.Fatalf("metrics show %+v, want 3 fetches avoided", got)
	}
}
