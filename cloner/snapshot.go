package cloner

import (
	"cmp"
	"slices"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// Snapshot returns the latest view; never nil.
func (c *Controller) Snapshot() *ledger.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &ledger.Snapshot{}
	if c.snap != nil {
		cp := *c.snap
		s = &cp
	}
	s.EvidenceDropped, s.EvidenceExpired = c.evidence.Dropped(), c.evidence.Expired()
	return s
}

func (c *Controller) setSnapshot(s *ledger.Snapshot) {
	if s != nil {
		s.Malformed = c.writer.Malformed()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snap = s
}

// buildSnapshot summarises every disk as last judged, the catalog and the
// ledger as last read or written.
func (c *Controller) buildSnapshot(inv *fleet.Inventory, l *ledger.Ledger) *ledger.Snapshot {
	s := &ledger.Snapshot{Leader: true, Taken: c.cfg.Clock()}
	cons := c.due.Tally(s)
	for _, g := range inv.Goldens {
		if !g.Trusted() {
			continue // not a flavor anywhere: its consumers carry invalid-golden
		}
		s.Goldens = append(s.Goldens, ledger.GoldenStatus{Namespace: g.Namespace, Name: g.Name, Flavor: g.Flavor,
			StorageClass: g.Class.Name, Phase: g.Phase, SizeBytes: g.SizeBytes(), Consumers: cons[g.Ref()],
			Trusted: g.Trusted(), Problems: g.Problems, ReadySince: g.ReadySince})
	}
	for _, g := range inv.Images {
		if n := cons[g.Ref()]; n > 0 { // a golden only once a disk clones it
			s.Images = append(s.Images, ledger.ImageStatus{Namespace: g.Namespace, Name: g.Name, Image: g.Image,
				StorageClass: g.Class.Name, Phase: g.Phase, SizeBytes: g.SizeBytes(), Consumers: n})
		}
	}
	slices.SortFunc(s.ClassDisks, func(a, b verdict.ClassDiskCount) int {
		return cmp.Or(ledger.CompareFlavor(a.Flavor, b.Flavor), cmp.Compare(a.Class, b.Class))
	})
	ledger.SortSnapshot(s)
	if l != nil {
		s.Flavors, s.Durations = ledger.LedgerCounters(l)
	}
	return s
}
