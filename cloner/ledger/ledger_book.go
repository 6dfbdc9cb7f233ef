package ledger

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// ledgerShards is how many ConfigMaps hold the marks. A mark is about 100
// bytes with usual names and at most about 400 (a 63-character namespace and
// a 253-character name), so 64 shards keep each object under the API
// server's 1 MiB limit up to about 500,000 disks with usual names and
// 150,000 with the longest names Kubernetes allows (TestLedgerShardsFit).
const LedgerShards = 64

// Label values of LabelLedger: the root is what `report` finds.
const (
	LedgerLabelRoot  = "true"
	ledgerLabelShard = "shard"
)

// shardOf is the shard a DataVolume UID's mark lives in.
func ShardOf(uid types.UID) int {
	h := fnv.New32a()
	h.Write([]byte(uid))
	return int(h.Sum32() % LedgerShards)
}

// shardName is the ConfigMap of shard i of the ledger named root.
func ShardName(root string, i int) string { return fmt.Sprintf("%s-%02d", root, i) }

// LedgerObjectNames are the ConfigMaps of the ledger named root: the root,
// then its shards (what the Role must let the sidecar get and update).
func LedgerObjectNames(root string) []string {
	out := []string{root}
	for i := range LedgerShards {
		out = append(out, ShardName(root, i))
	}
	return out
}

// ledgerBook is the whole ledger as this leader last read or wrote it: the
// root (the totals counted before the ledger was sharded; it never changes
// after the migration) and the shards. Each write is guarded by the
// resourceVersion kept here, so a stale book costs a conflict and a fresh
// read of one shard, never a double count. The leader reads the book once
// when it starts leading and keeps it current from its own writes.
type LedgerBook struct {
	Ns, Name string
	Root     *Ledger
	Shards   [LedgerShards]*Ledger
}

// readLedgerBook reads the root and every shard straight from the API
// server (not a cache): counting must start from the newest versions. A
// format-1 root still holding marks is returned as read; migrate moves them.
func ReadLedgerBook(ctx context.Context, kube kubernetes.Interface, ns, name string) (*LedgerBook, error) {
	b := &LedgerBook{Ns: ns, Name: name}
	var err error
	if b.Root, err = readLedgerObject(ctx, kube, ns, name); err != nil {
		return nil, err
	}
	for i := range b.Shards {
		if b.Shards[i], err = readLedgerObject(ctx, kube, ns, ShardName(name, i)); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func readLedgerObject(ctx context.Context, kube kubernetes.Interface, ns, name string) (*Ledger, error) {
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return NewLedger(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading ledger %s/%s: %w", ns, name, err)
	}
	return decodeLedger(cm)
}

// merged is the sum of the root and the shards: the counters as metrics and
// the report show them, and with marks every counted UID.
func (b *LedgerBook) Merged(marks bool) *Ledger {
	out := NewLedger()
	out.add(b.Root, marks)
	for _, s := range b.Shards {
		out.add(s, marks)
	}
	return out
}

// bytes is the size of the ledger's data over all its objects.
func (b *LedgerBook) Bytes() int {
	n := 0
	for _, l := range append([]*Ledger{b.Root}, b.Shards[:]...) {
		if l.exists || len(l.Counted) > 0 {
			for k, v := range l.Encode() {
				n += len(k) + len(v)
			}
		}
	}
	return n
}

// write creates or updates one of the book's objects (shard -1 is the root)
// and keeps what was written.
func (b *LedgerBook) write(ctx context.Context, kube kubernetes.Interface, shard int, l *Ledger) error {
	name, label := b.Name, LedgerLabelRoot
	if shard >= 0 {
		name, label = ShardName(b.Name, shard), ledgerLabelShard
	}
	data := l.Encode()
	if shard < 0 {
		data[ledgerKeyShards] = strconv.Itoa(LedgerShards)
		delete(data, LedgerKeyCounted)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: b.Ns, ResourceVersion: l.rv,
			Labels: map[string]string{fleet.LabelLedger: label, "app.kubernetes.io/name": "csi-clone-sidecar"},
		},
		Data: data,
	}
	cms := kube.CoreV1().ConfigMaps(b.Ns)
	var out *corev1.ConfigMap
	var err error
	if l.exists {
		out, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: fleet.EventSourceComponent})
	} else {
		out, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: fleet.EventSourceComponent})
	}
	if err != nil {
		return err
	}
	l.rv, l.exists, l.format = out.ResourceVersion, true, LedgerFormat
	if shard < 0 {
		b.Root = l
	} else {
		b.Shards[shard] = l
	}
	return nil
}

// reread replaces one object of the book with the API server's version,
// after a write lost a race.
func (b *LedgerBook) reread(ctx context.Context, kube kubernetes.Interface, shard int) error {
	name := b.Name
	if shard >= 0 {
		name = ShardName(b.Name, shard)
	}
	l, err := readLedgerObject(ctx, kube, b.Ns, name)
	if err != nil {
		return err
	}
	if shard < 0 {
		b.Root = l
	} else {
		b.Shards[shard] = l
	}
	return nil
}

// change applies fn to a copy of one object and writes the copy when fn
// reports a change, retrying from a fresh read when the write loses a race.
// On any error the book keeps the object as last read: what fn added is
// added again by the next attempt, never lost, never doubled.
func (b *LedgerBook) change(ctx context.Context, kube kubernetes.Interface, shard int, fn func(*Ledger) bool) error {
	for try := 0; try < ledgerWriteTries; try++ {
		cur := b.Root
		if shard >= 0 {
			cur = b.Shards[shard]
		}
		next := cur.clone()
		if !fn(next) {
			return nil
		}
		err := b.write(ctx, kube, shard, next)
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			if err := b.reread(ctx, kube, shard); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("writing ledger %s/%s (shard %d): %w", b.Ns, b.Name, shard, err)
		}
		return nil
	}
	return fmt.Errorf("writing ledger %s/%s (shard %d): still conflicting after %d tries", b.Ns, b.Name, shard, ledgerWriteTries)
}

// migrate moves the marks of a format-1 root into the shards, then rewrites
// the root without them; the root keeps its totals. Copying a mark is
// idempotent (a shard that has it keeps the larger of the two), so a
// migration cut short by a crash or a lost race is simply done again, and a
// leader of the old version that counts into the root meanwhile makes the
// root's rewrite conflict, which re-reads and moves its new marks too. The
// shards gain marks only, never totals: nothing is counted twice.
func (b *LedgerBook) Migrate(ctx context.Context, kube kubernetes.Interface) error {
	for b.Root.format == LedgerFormatLegacy || (b.Root.exists && len(b.Root.Counted) > 0) {
		byShard := map[int]map[string]*Mark{}
		for uid, m := range b.Root.Counted {
			s := ShardOf(types.UID(uid))
			if byShard[s] == nil {
				byShard[s] = map[string]*Mark{}
			}
			byShard[s][uid] = m
		}
		for s, marks := range byShard {
			if err := b.change(ctx, kube, s, func(l *Ledger) bool { return l.adopt(marks) }); err != nil {
				return err
			}
		}
		root := b.Root.clone()
		root.Counted = map[string]*Mark{}
		err := b.write(ctx, kube, -1, root)
		if apierrors.IsConflict(err) {
			if err := b.reread(ctx, kube, -1); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("migrating ledger %s/%s: %w", b.Ns, b.Name, err)
		}
	}
	if !b.Root.exists {
		// The root is what `report` finds by its label.
		return b.change(ctx, kube, -1, func(*Ledger) bool { return true })
	}
	return nil
}

// hasStale reports whether a mark's DataVolume is not in the cache.
func (l *Ledger) hasStale(live func(types.UID) bool) bool {
	for uid := range l.Counted {
		if !live(types.UID(uid)) {
			return true
		}
	}
	return false
}

// adopt takes marks counted elsewhere without raising any total; it reports
// whether a mark was new or grew.
func (l *Ledger) adopt(marks map[string]*Mark) bool {
	changed := false
	for uid, m := range marks {
		have := l.Counted[uid]
		if have == nil {
			cp := *m
			l.Counted[uid], changed = &cp, true
			continue
		}
		if m.Fetches > have.Fetches || (m.Avoided && !have.Avoided) || (m.Timed && !have.Timed) {
			have.Fetches = max(have.Fetches, m.Fetches)
			have.Avoided, have.Timed = have.Avoided || m.Avoided, have.Timed || m.Timed
			changed = true
		}
	}
	return changed
}

// Adds reports whether Update would count anything of f, by the shard as
// last read or written: marks are only added (pruning drops those of
// disks gone), so a fact it says nothing of is settled for good.
func (b *LedgerBook) Adds(f LedgerFact) bool {
	s := b.Shards[ShardOf(f.Uid)]
	return s == nil || s.Adds(f)
}

// update adds the facts to the shards their UIDs hash to and, with prune,
// forgets marks of DataVolumes confirmed gone; only shards that change are
// written.
func (b *LedgerBook) Update(ctx context.Context, kube kubernetes.Interface, facts []LedgerFact, prune bool,
	live func(types.UID) bool, gone func(ref string, uid types.UID) bool) error {
	byShard := map[int][]LedgerFact{}
	for _, f := range facts {
		s := ShardOf(f.Uid)
		byShard[s] = append(byShard[s], f)
	}
	budget := ledgerPrunePerPass
	var firstErr error
	for s := range b.Shards {
		fs := byShard[s]
		if len(fs) == 0 && (!prune || !b.Shards[s].hasStale(live)) {
			continue // nothing to count or forget: no copy, no write
		}
		err := b.change(ctx, kube, s, func(l *Ledger) bool {
			changed := l.Apply(fs)
			return (prune && l.prune(live, gone, &budget)) || changed
		})
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}
