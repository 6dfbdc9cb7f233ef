package deploy_test

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The admission guard in the chart is deploy/admission's: files/ holds
// byte copies of deploy/admission/warn (TestChartGeneratedFilesAreCurrent),
// and the objects the chart renders from them equal what kustomize builds of
// deploy/admission/warn and deploy/admission/deny, up to Helm's labels.

const admissionParamsFlag = "--admission-params=true"

var admissionKinds = []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// admissionObjectCount: the guard's policy and binding, and the worker
// access-mode warning's.
const admissionObjectCount = 4

// admissionObjects keeps the admission guard's objects of a rendering.
func admissionObjects(objs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if slices.Contains(admissionKinds, o["kind"].(string)) {
			out = append(out, o)
		}
	}
	return out
}

func TestChartAdmissionGuardIsDeployAdmission(t *testing.T) {
	if got := admissionObjects(render(t, "cozy-linstor")); len(got) != 0 {
		t.Errorf("the guard is on by default: %d objects", len(got))
	}
	for dir, set := range map[string][]string{
		"admission/warn": {"admissionGuard.enabled=true"},
		"admission/deny": {"admissionGuard.enabled=true", "admissionGuard.validationActions={Deny}"},
	} {
		chart := admissionObjects(render(t, "cozy-linstor", set...))
		kust := kustomize(t, dir)
		if len(chart) != admissionObjectCount || len(kust) != admissionObjectCount {
			t.Fatalf("%s: chart renders %d admission objects, kustomize builds %d, want %d", dir, len(chart), len(kust), admissionObjectCount)
		}
		for _, k := range kust {
			c := object(t, chart, k["kind"].(string), get(k, "metadata", "name").(string))
			if got, want := canonical(t, stripHelmLabels(c)), canonical(t, k); got != want {
				t.Errorf("%s %v: chart (%v) and kustomize differ:\nchart:\n%s\nkustomize:\n%s", k["kind"], get(k, "metadata", "name"), set, got, want)
			}
		}
	}
}

// podTemplateSidecar is the sidecar container of the chart's named template
// as a parent chart includes it, with the wrapper's --set values.
func podTemplateSidecar(t *testing.T, set ...string) corev1.Container {
	t.Helper()
	var spec struct{ Spec corev1.PodSpec }
	if err := yaml.Unmarshal([]byte(renderPodTemplate(t, set...)), &spec); err != nil {
		t.Fatal(err)
	}
	for _, c := range spec.Spec.Containers {
		if c.Name == sidecarName {
			return c
		}
	}
	t.Fatalf("the pod template (%v) has no %s container", set, sidecarName)
	return corev1.Container{}
}

// guardedSidecar is the container with admissionGuard.enabled.
func guardedSidecar(t *testing.T) corev1.Container {
	return podTemplateSidecar(t, "csiCloneSidecar.admissionGuard.enabled=true")
}

// The guard's switch turns on the sidecar's writer of its parameters, and
// only it: the container is otherwise the default one.
func TestChartAdmissionGuardTurnsOnTheParameters(t *testing.T) {
	off, on := podTemplateSidecar(t), guardedSidecar(t)
	if slices.Contains(off.Args, admissionParamsFlag) {
		t.Errorf("the default container runs with %s: %v", admissionParamsFlag, off.Args)
	}
	if !slices.Contains(on.Args, admissionParamsFlag) {
		t.Errorf("with admissionGuard.enabled the container lacks %s: %v", admissionParamsFlag, on.Args)
	}
	on.Args = slices.DeleteFunc(on.Args, func(a string) bool { return a == admissionParamsFlag })
	a, _ := json.Marshal(off)
	b, _ := json.Marshal(on)
	if string(a) != string(b) {
		t.Errorf("the guard changes more of the container than %s:\n%s\n%s", admissionParamsFlag, a, b)
	}
}
