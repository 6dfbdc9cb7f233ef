package predict

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// withClaimSets gives class's StorageProfile claimPropertySets, in order,
// each "mode:accessMode".
func withClaimSets(in Inputs, class string, sets ...[2]string) Inputs {
	sp := profile(class, "", "")
	for _, s := range sets {
		mode := corev1.PersistentVolumeMode(s[0])
		sp.Status.ClaimPropertySets = append(sp.Status.ClaimPropertySets, cdiv1.ClaimPropertySet{
			VolumeMode: &mode, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.PersistentVolumeAccessMode(s[1])}})
	}
	return withProfile(in, sp)
}

// TestPredictionCarriesTheClaimsAccessModes: a prediction names the access
// modes of the claim the disk has (a Claimed target's own) or gets, as
// cdirules.RenderClaim renders them (the model the CDI differential checks
// against every claim cdi-controller makes): the DataVolume's, else its
// class's StorageProfile's for its volume mode, else its first set; none
// when CDI renders no claim.
func TestPredictionCarriesTheClaimsAccessModes(t *testing.T) {
	lin := withClaimSets(baseInputs("csi-clone"), "replicated", [2]string{"Block", "ReadWriteMany"}, [2]string{"Filesystem", "ReadWriteOnce"})
	cases := []struct {
		name string
		in   Inputs
		t    Target
		want []string
	}{
		{"names none: the profile's first set", lin, Target{Class: "replicated"}, []string{"ReadWriteMany"}},
		{"Block: the Block set", lin, Target{Class: "replicated", VolumeMode: "Block"}, []string{"ReadWriteMany"}},
		{"Filesystem: the Filesystem set", lin, Target{Class: "replicated", VolumeMode: "Filesystem"}, []string{"ReadWriteOnce"}},
		{"the DataVolume's own", lin, Target{Class: "replicated", AccessModes: []string{"ReadWriteOnce"}}, []string{"ReadWriteOnce"}},
		{"no profile: no claim", baseInputs("csi-clone"), Target{Class: "replicated"}, nil},
		{"a claim's own, whatever the profile", lin, Target{Class: "replicated", Claimed: true, VolumeMode: "Block", AccessModes: []string{"ReadWriteOnce"}},
			[]string{"ReadWriteOnce"}},
		{"a claim without modes", lin, Target{Class: "replicated", Claimed: true, VolumeMode: "Block"}, nil},
	}
	for _, tc := range cases {
		if got := NewState(tc.in).Predict(golden, tc.t).AccessModes; !slices.Equal(got, tc.want) {
			t.Errorf("%s: access modes %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPairsNameTheWorkerTemplatesAccessModes: a pair's access modes are
// what the platform's worker disk (spec.storage naming neither volume mode
// nor access modes) gets on the class: the profile's first set, whatever
// the golden's volume mode; none without a profile or an unresolved class.
func TestPairsNameTheWorkerTemplatesAccessModes(t *testing.T) {
	in := withClaimSets(baseInputs("csi-clone"), "replicated", [2]string{"Filesystem", "ReadWriteOnce"}, [2]string{"Block", "ReadWriteMany"})
	in = withClaimSets(in, "replicated-b", [2]string{"Block", "ReadWriteMany"})
	s := NewState(in)
	want := map[string][]string{"replicated": {"ReadWriteOnce"}, "replicated-b": {"ReadWriteMany"}, "ceph": nil, EmptyClass: {"ReadWriteMany"}}
	for _, p := range s.Pairs([]Golden{golden}, Target{Class: "replicated-b"}) {
		if w, ok := want[p.Class]; ok && !slices.Equal(p.AccessModes, w) {
			t.Errorf("class %s: access modes %v, want %v", p.Class, p.AccessModes, w)
		}
		if p.Larger.Path == "" {
			t.Errorf("class %s: no path", p.Class)
		}
	}
	if p := s.PairsOn([]Golden{golden}, EmptyClass, Target{Unresolved: true}); p[0].AccessModes != nil {
		t.Errorf("unresolved class: access modes %v, want none", p[0].AccessModes)
	}
}

// TestLacksReadWriteMany over the access modes Kubernetes defines.
func TestLacksReadWriteMany(t *testing.T) {
	for _, tc := range []struct {
		modes []string
		want  bool
	}{
		{nil, false}, {[]string{}, false},
		{[]string{"ReadWriteOnce"}, true}, {[]string{"ReadOnlyMany"}, true}, {[]string{"ReadWriteOncePod"}, true},
		{[]string{"ReadWriteMany"}, false}, {[]string{"ReadWriteOnce", "ReadWriteMany"}, false},
	} {
		if got := LacksReadWriteMany(tc.modes); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.modes, got, tc.want)
		}
	}
}
