package predict

// EmptyClass is the class name of the pair for a disk that names no
// StorageClass (resolved to the default before predicting).
const EmptyClass = "(default)"

// Pair is the prediction for one golden and one class, for the two disk
// sizes that decide differently: larger than the golden (a pool's diskSize,
// normally) and exactly the golden's size.
type Pair struct {
	Golden Golden
	// Class is a StorageClass name, or EmptyClass; ResolvedClass is what
	// the class resolves to ("" when it does not).
	Class, ResolvedClass string
	Larger, AtSize       Prediction
}

// Pairs predicts every golden on every CSI class, plus the empty class
// resolved as empty says. A pool's disk is taken to have the golden's
// volume mode (the platform renders both alike); Predict with a Target of
// the disk's own says more for a disk that exists.
func (s *State) Pairs(goldens []Golden, empty Target) []Pair {
	classes := s.CSIClasses()
	out := make([]Pair, 0, len(goldens)*(len(classes)+1))
	for _, g := range goldens {
		for _, c := range classes {
			out = append(out, s.pair(g, c, Target{Class: c}))
		}
		out = append(out, s.pair(g, EmptyClass, empty))
	}
	return out
}

func (s *State) pair(g Golden, label string, t Target) Pair {
	t.VolumeMode = g.VolumeMode
	p := Pair{Golden: g, Class: label, ResolvedClass: t.Class}
	t.Bytes = 0
	p.Larger = s.Predict(g, t)
	t.Bytes = g.RequestedBytes
	if t.Bytes == 0 {
		t.Bytes = g.CapacityBytes
	}
	p.AtSize = s.Predict(g, t)
	return p
}

// PairsOn predicts every golden on one class, labelled label.
func (s *State) PairsOn(goldens []Golden, label string, t Target) []Pair {
	out := make([]Pair, 0, len(goldens))
	for _, g := range goldens {
		out = append(out, s.pair(g, label, t))
	}
	return out
}
