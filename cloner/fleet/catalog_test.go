package fleet

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

func TestGoldenFlavorFromNameAndAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ann      map[string]string
		want     Flavor
		problems int
	}{
		{goldenName("abc123", "v1.13.2"), nil, Flavor{"abc123", "v1.13.2"}, 0},
		{goldenName("abc123", "v1.13.2"), map[string]string{AnnSchematicID: "abc123", AnnTalosVersion: "v1.13.2"}, Flavor{"abc123", "v1.13.2"}, 0},
		// the name must be built from the annotations' fields
		{goldenName("abc123", "v1.13.2"), map[string]string{AnnSchematicID: "fff", AnnTalosVersion: "v1.13.2"}, Flavor{"fff", "v1.13.2"}, 1},
		{"my-golden", map[string]string{AnnSchematicID: "abc", AnnTalosVersion: "v1.0.0"}, Flavor{"abc", "v1.0.0"}, 1},
		{goldenName("ABC", "v1.0"), nil, Flavor{"ABC", "v1.0"}, 2},
		{"talos-worker-nodash", nil, Flavor{}, 3},
	} {
		got, problems := GoldenFlavor(tc.name, tc.ann)
		if got != tc.want || len(problems) != tc.problems {
			t.Errorf("%s %v: got %v %q, want %v with %d problems", tc.name, tc.ann, got, problems, tc.want, tc.problems)
		}
	}
}

func TestFactoryFlavorReadsOnlyWellFormedURLs(t *testing.T) {
	for url, want := range map[string]Flavor{
		"https://factory.talos.dev/image/abc123/v1.13.2/openstack-amd64.raw.xz":  {"abc123", "v1.13.2"},
		"http://mirror.local:8080/talos/image/abc123/v1.2.3/metal-amd64.raw.zst": {"abc123", "v1.2.3"},
		"https://factory.talos.dev/image/ABC/v1.13.2/x.raw.xz":                   {},
		"https://factory.talos.dev/image/abc123/latest/x.raw.xz":                 {},
		"https://example.com/ubuntu.img":                                         {},
		"::not a url":                                                            {},
	} {
		got, ok := FactoryFlavor(url)
		if got != want || ok == want.IsZero() {
			t.Errorf("%s: got %v %v, want %v", url, got, ok, want)
		}
	}
}

func goldenName(sid, ver string) string { return goldenNamePrefix + sid + "-" + ver }

// A disk is bound since its Bound condition turned True, as CDI dates it;
// any other status, or no such condition, is not bound.
func TestBoundSinceIsTheBoundConditionsTurnToTrue(t *testing.T) {
	at := metav1.NewTime(time.Unix(1700000000, 0))
	heartbeat := metav1.NewTime(at.Add(time.Minute))
	for _, status := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown, ""} {
		dv := &cdiv1.DataVolume{Status: cdiv1.DataVolumeStatus{Conditions: []cdiv1.DataVolumeCondition{
			{Type: cdiv1.DataVolumeReady, Status: corev1.ConditionTrue, LastTransitionTime: heartbeat},
			{Type: cdiv1.DataVolumeBound, Status: status, LastTransitionTime: at, LastHeartbeatTime: heartbeat}}}}
		want := time.Time{}
		if status == corev1.ConditionTrue {
			want = at.Time
		}
		if got := boundSince(dv); !got.Equal(want) {
			t.Errorf("Bound %q: bound since %v, want %v", status, got, want)
		}
	}
	if got := boundSince(&cdiv1.DataVolume{}); !got.IsZero() {
		t.Errorf("no conditions: bound since %v", got)
	}
}
