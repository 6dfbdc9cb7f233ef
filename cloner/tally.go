package cloner

import (
	"slices"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
	"k8s.io/apimachinery/pkg/types"
)

// fleetTally is every judged disk summed the way the metrics show it:
// consumers per golden, disks per flavor and verdict, bad disks per pool
// and reason, clones per flavor and class, prediction checks. remember
// keeps it current by taking a re-judged disk's old contribution out and
// adding its new one, so a pass for one changed disk costs the same in a
// fleet of ten disks or of ten thousand, and a snapshot is as long as the
// metrics' series, never the fleet.
type fleetTally struct {
	consumers            map[types.NamespacedName]int
	disks                map[DiskCount]int
	bad                  map[BadDiskCount]int
	perClass             map[verdict.ClassDiskCount]int
	predRight, predWrong int
}

func newFleetTally() *fleetTally {
	return &fleetTally{consumers: map[types.NamespacedName]int{}, disks: map[DiskCount]int{},
		bad: map[BadDiskCount]int{}, perClass: map[verdict.ClassDiskCount]int{}}
}

// add counts a judged disk in (n = 1) or out (n = -1).
func (t *fleetTally) add(d judgedDisk, n int) {
	if d.kind == fleet.DiskClone {
		bump(t.consumers, d.goldenRef, n)
	}
	bump(t.disks, DiskCount{Flavor: d.flavor, Verdict: d.verdict}, n)
	if d.class != "" {
		bump(t.perClass, verdict.ClassDiskCount{Flavor: d.flavor, Class: d.class}, n)
	}
	switch {
	case d.predictionChecked && d.predictionRight:
		t.predRight += n
	case d.predictionChecked:
		t.predWrong += n
	}
	for i, r := range d.badReasons {
		if !slices.Contains(d.badReasons[:i], r) { // a disk counts once per reason
			bump(t.bad, BadDiskCount{Namespace: d.namespace, Pool: d.pool, Flavor: d.flavor, Reason: r}, n)
		}
	}
}

// bump adds n to a count and forgets a count that reached zero, so a pool
// or flavor that is gone leaves no series behind.
func bump[K comparable](m map[K]int, k K, n int) {
	if v := m[k] + n; v != 0 {
		m[k] = v
	} else {
		delete(m, k)
	}
}

// fill copies the tally into a snapshot.
func (t *fleetTally) fill(s *Snapshot) {
	for k, n := range t.disks {
		k.Count = n
		s.Disks = append(s.Disks, k)
	}
	for k, n := range t.bad {
		k.Count = n
		s.BadDisks = append(s.BadDisks, k)
	}
	for k, n := range t.perClass {
		k.Count = n
		s.ClassDisks = append(s.ClassDisks, k)
	}
	s.PredictionChecks.Right, s.PredictionChecks.Wrong = t.predRight, t.predWrong
}
