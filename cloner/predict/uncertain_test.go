package predict

import (
	"slices"
	"strings"
	"testing"
)

// Each note of what could make a prediction wrong is given exactly when its
// cause holds: a storage-layer clone across classes (the driver decides,
// CDI does not), and a sizeless disk of a Filesystem golden whose image size
// CDI has not recorded (CDI then sizes the disk from a detection pod's
// reading, pvc-clone-controller.go detectCloneSize).
func TestUncertaintyNotesNameTheirCause(t *testing.T) {
	const crossClass, imageSized = "CDI asks the driver for a cross-class clone", "CDI sizes this disk at the golden's image"
	fs := golden
	fs.VolumeMode, fs.ContentType = "Filesystem", "kubevirt"
	measured := fs
	measured.VirtualSize = 5 * gi
	block := Target{Class: "replicated", VolumeMode: "Block", AccessModes: poolAccessModes}
	for _, tc := range []struct {
		name       string
		g          Golden
		t          Target
		cross, img bool
	}{
		{"same class", golden, block, false, false},
		{"another class of the driver: CSI clone", golden, Target{Class: "replicated-b", VolumeMode: "Block", AccessModes: poolAccessModes}, true, false},
		{"another driver's class: host-assisted", golden, Target{Class: "ceph", VolumeMode: "Block", AccessModes: poolAccessModes}, false, false},
		{"sizeless disk of a Filesystem golden", fs, Target{Class: "replicated", VolumeMode: "Filesystem", AccessModes: poolAccessModes}, false, true},
		{"sized disk of a Filesystem golden", fs, Target{Class: "replicated", VolumeMode: "Filesystem", AccessModes: poolAccessModes, Bytes: 20 * gi}, false, false},
		{"sizeless disk of a golden whose image was measured", measured, Target{Class: "replicated", VolumeMode: "Filesystem", AccessModes: poolAccessModes}, false, false},
		{"sizeless claim already rendered", fs, Target{Class: "replicated", VolumeMode: "Filesystem", AccessModes: poolAccessModes, Claimed: true}, false, false},
		{"sizeless disk of a Block golden", golden, block, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewState(baseInputs("csi-clone")).Predict(tc.g, tc.t)
			has := func(prefix string) bool {
				return slices.ContainsFunc(p.Uncertain, func(u string) bool { return strings.HasPrefix(u, prefix) })
			}
			if has(crossClass) != tc.cross || has(imageSized) != tc.img {
				t.Errorf("%s/%s, uncertain %q; want cross-class %v, image-sized %v", p.Path, p.Reason, p.Uncertain, tc.cross, tc.img)
			}
		})
	}
}
