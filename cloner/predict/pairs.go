package predict

// EmptyClass is the class name of the pair for a disk that names no
// StorageClass (resolved to the default before predicting).
const EmptyClass = "(default)"

// Pair is the prediction for one golden and one class, for the disk sizes
// that decide differently: larger than the golden (a pool's diskSize,
// normally), the largest disk whose claim fits the golden's capacity, and
// no size (CDI sizes the disk at the golden).
type Pair struct {
	Golden Golden
	// Class is a StorageClass name, or EmptyClass; ResolvedClass is what
	// the class resolves to ("" when it does not).
	Class, ResolvedClass     string
	Larger, AtSize, Sizeless Prediction
	// AccessModes are what CDI gives the claim of a disk the platform's
	// worker template renders on the class: a spec.storage DataVolume
	// naming neither access modes nor a volume mode takes both from the
	// class's StorageProfile (claimPropertySets[0]). Nil when CDI renders no
	// claim for it (no profile, or no access mode in it).
	AccessModes []string
}

// Pairs predicts every golden on every CSI class, plus the empty class
// resolved as empty says, for the disk the platform's templates render:
// kubernetes-nodes' worker template (nodegroup.yaml) and vm-disk's
// (dv.yaml) are spec.storage DataVolumes naming neither a volume mode nor
// access modes, so CDI takes both from the class's StorageProfile
// (claimPropertySets[0]), and a class whose first set is not the golden's
// volume mode gets a copy (incompatible-volume-modes), one CDI renders no
// claim for a blocked disk (claim-invalid). Predict with a Target of the
// disk's own says more for a disk that exists.
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
	t.VolumeMode, t.AccessModes = "", nil
	r := s.Regions(g, t)
	return Pair{Golden: g, Class: label, ResolvedClass: t.Class, Larger: r.Larger, AtSize: r.AtSize, Sizeless: r.Sizeless,
		AccessModes: s.templateAccessModes(t)}
}

// templateAccessModes are the access modes CDI renders for the platform's
// worker disk on t's class (kubernetes-nodes' nodegroup.yaml names none:
// worker VMs live-migrate, and the StorageProfile is to give them
// ReadWriteMany).
func (s *State) templateAccessModes(t Target) []string {
	if t.Unresolved {
		return nil
	}
	c, err := s.Claim(Target{Class: t.Class})
	if err != nil {
		return nil
	}
	return c.AccessModes
}

// PairsOn predicts every golden on one class, labelled label.
func (s *State) PairsOn(goldens []Golden, label string, t Target) []Pair {
	out := make([]Pair, 0, len(goldens))
	for _, g := range goldens {
		out = append(out, s.pair(g, label, t))
	}
	return out
}

// Regions splits a disk's size into CDI's answers for one golden and one
// target (its Bytes ignored). A claim grows with the DataVolume's size, so
// the answer changes at two sizes only: below MinBytes CDI refuses the
// clone's size (CloneValidationFailed); up to FitBytes the disk's claim fits
// the golden's capacity; above it the clone must be expanded. FitBytes <
// MinBytes when no size fits (then AtSize is Larger).
type Regions struct {
	MinBytes, FitBytes              int64
	Sizeless, Small, AtSize, Larger Prediction
}

// Regions computes them with the rules of package cdirules.
func (s *State) Regions(g Golden, t Target) Regions {
	at := func(b int64) Prediction { t.Bytes = b; return s.Predict(g, t) }
	src, _ := s.source(g)
	hi := 2*max(src.CapacityBytes, src.RequestBytes) + 1<<30
	r := Regions{Sizeless: at(0)}
	// Smallest size CDI accepts: the refusal is monotone in the size.
	r.MinBytes = searchFirst(1, hi, func(b int64) bool { return at(b).Reason != ReasonTargetTooSmall })
	// Largest size whose claim fits the golden's capacity.
	r.FitBytes = searchFirst(1, hi, func(b int64) bool { return s.claimBytes(t, b) > src.CapacityBytes }) - 1
	r.Small = at(max(r.MinBytes-1, 1))
	r.Larger = at(max(r.FitBytes+1, r.MinBytes))
	r.AtSize = r.Larger
	if r.FitBytes >= r.MinBytes {
		r.AtSize = at(r.FitBytes)
	}
	return r
}

// claimBytes is the request of the claim CDI renders for the target at a
// size (the size itself when it cannot be rendered).
func (s *State) claimBytes(t Target, b int64) int64 {
	if t.Claimed {
		return b
	}
	t.Bytes = b
	c, err := s.Claim(t)
	if err != nil {
		return b
	}
	return c.Bytes
}

// searchFirst is the smallest x in [lo, hi] with ok(x), for ok monotone
// (false then true); hi+1 when there is none.
func searchFirst(lo, hi int64, ok func(int64) bool) int64 {
	hi++
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
