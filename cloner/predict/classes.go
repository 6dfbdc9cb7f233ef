package predict

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The StorageClasses as the admission guard reads them.

// ClassNames lists every StorageClass, sorted.
func (s *State) ClassNames() []string {
	out := make([]string, 0, len(s.classes))
	for name := range s.classes {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// ClassModes are the guard's keys for a class's StorageProfile: what CDI
// reads to give a spec.storage claim its volume mode (cdirules.RenderClaim).
// "provisioner" says the class exists; "mode" is claimPropertySets[0]'s
// (absent when it has no access modes: CDI cannot render a claim naming
// neither), "modes" the modes offered with access modes, "am.<mode>" the
// index and mode of the first set offering that access mode.
func (s *State) ClassModes(class string) map[string]string {
	sc := s.classes[class]
	if sc == nil {
		return nil
	}
	out := map[string]string{"provisioner": sc.Provisioner}
	sp := s.profiles[class]
	if sp == nil {
		return out
	}
	var modes []string
	for i, set := range sp.Status.ClaimPropertySets {
		mode := resolvedMode(modeOf(set))
		if len(set.AccessModes) == 0 {
			continue
		}
		if i == 0 {
			out["mode"] = mode
		}
		if !slices.Contains(modes, mode) && set.VolumeMode != nil {
			modes = append(modes, mode)
		}
		for _, am := range set.AccessModes {
			if _, ok := out["am."+string(am)]; !ok {
				out["am."+string(am)] = fmt.Sprintf("%02d:%s", i, mode)
			}
		}
	}
	out["modes"] = strings.Join(modes, ",")
	return out
}

func modeOf(set cdiv1.ClaimPropertySet) string {
	if set.VolumeMode == nil {
		return ""
	}
	return string(*set.VolumeMode)
}
