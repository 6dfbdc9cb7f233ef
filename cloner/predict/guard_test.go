package predict

import "testing"

// The guard in Deny refuses every path but a storage-layer clone, and a
// class other than the golden's unless its rule is off: the whole set of
// paths, with and without the flag, with the rule on and off.
func TestGuardRefusesBadPathsAndClassMismatch(t *testing.T) {
	for _, path := range Paths {
		for _, mismatch := range []bool{false, true} {
			for _, allow := range []bool{false, true} {
				p := Prediction{Path: path}
				if mismatch {
					p.Flags = []string{FlagCrossNode, FlagClassMismatch}
				}
				want := path == PathHostAssisted || path == PathBlocked || (mismatch && !allow)
				if got := p.GuardRefuses(GuardRules{AllowClassMismatch: allow}); got != want {
					t.Errorf("path %s, class mismatch %v, allowed %v: refused %v, want %v", path, mismatch, allow, got, want)
				}
			}
		}
	}
}
