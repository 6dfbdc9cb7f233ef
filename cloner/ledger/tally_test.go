package ledger

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// TestTallyEqualsASumOverTheJudgedDisks: after any sequence of disks judged,
// re-judged and forgotten, the incremental tally equals a tally built from
// scratch over the disks as last judged, and holds no zero counts.
func TestTallyEqualsASumOverTheJudgedDisks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	randomDisk := func() JudgedDisk {
		d := JudgedDisk{Namespace: pick("a", "b"), Pool: pick("p1", "p2"), Kind: pick(fleet.DiskClone, fleet.DiskHTTPImport),
			GoldenRef: types.NamespacedName{Namespace: "cozy-public", Name: pick("g1", "g2")},
			Flavor:    fleet.Flavor{SchematicID: pick("s1", "s2"), Version: "v1"}, Verdict: pick("csi-clone", "host-assisted", "stuck"),
			Class: pick("", "replicated", "local")}
		for range rng.IntN(3) {
			d.BadReasons = append(d.BadReasons, pick("host-assisted", "class-mismatch"))
		}
		d.PredictionChecked, d.PredictionRight = rng.IntN(2) == 0, rng.IntN(2) == 0
		return d
	}
	judged, tally := map[string]JudgedDisk{}, NewFleetTally()
	for step := range 5000 {
		k := fmt.Sprint(rng.IntN(50))
		if old, ok := judged[k]; ok {
			tally.Add(old, -1)
			delete(judged, k)
		}
		if rng.IntN(4) > 0 {
			judged[k] = randomDisk()
			tally.Add(judged[k], 1)
		}
		if step%250 != 0 {
			continue
		}
		want := NewFleetTally()
		for _, d := range judged {
			want.Add(d, 1)
		}
		if !reflect.DeepEqual(tally, want) {
			t.Fatalf("step %d: incremental tally %+v, from scratch %+v", step, tally, want)
		}
	}
	for _, d := range judged {
		tally.Add(d, -1)
	}
	if !reflect.DeepEqual(tally, NewFleetTally()) {
		t.Fatalf("every disk forgotten, tally still holds %+v", tally)
	}
}
