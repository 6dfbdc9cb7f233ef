package cloner

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"k8s.io/apimachinery/pkg/types"
)

// TestTallyEqualsASumOverTheJudgedDisks: after any sequence of disks judged,
// re-judged and forgotten, the incremental tally equals a tally built from
// scratch over the disks as last judged, and holds no zero counts.
func TestTallyEqualsASumOverTheJudgedDisks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	randomDisk := func() judgedDisk {
		d := judgedDisk{namespace: pick("a", "b"), pool: pick("p1", "p2"), kind: pick(fleet.DiskClone, fleet.DiskHTTPImport),
			goldenRef: types.NamespacedName{Namespace: "cozy-public", Name: pick("g1", "g2")},
			flavor:    fleet.Flavor{SchematicID: pick("s1", "s2"), Version: "v1"}, verdict: pick("csi-clone", "host-assisted", "stuck"),
			class: pick("", "replicated", "local")}
		for range rng.IntN(3) {
			d.badReasons = append(d.badReasons, pick("host-assisted", "class-mismatch"))
		}
		d.predictionChecked, d.predictionRight = rng.IntN(2) == 0, rng.IntN(2) == 0
		return d
	}
	judged, tally := map[string]judgedDisk{}, newFleetTally()
	for step := range 5000 {
		k := fmt.Sprint(rng.IntN(50))
		if old, ok := judged[k]; ok {
			tally.add(old, -1)
			delete(judged, k)
		}
		if rng.IntN(4) > 0 {
			judged[k] = randomDisk()
			tally.add(judged[k], 1)
		}
		if step%250 != 0 {
			continue
		}
		want := newFleetTally()
		for _, d := range judged {
			want.add(d, 1)
		}
		if !reflect.DeepEqual(tally, want) {
			t.Fatalf("step %d: incremental tally %+v, from scratch %+v", step, tally, want)
		}
	}
	for _, d := range judged {
		tally.add(d, -1)
	}
	if !reflect.DeepEqual(tally, newFleetTally()) {
		t.Fatalf("every disk forgotten, tally still holds %+v", tally)
	}
}
