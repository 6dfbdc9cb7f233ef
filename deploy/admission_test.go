package deploy_test

import (
	"slices"
	"testing"
)

const (
	guardPolicy       = "admission/warn/policy.yaml"
	accessModesPolicy = "admission/warn/access-modes-policy.yaml"
	accessModesName   = "csi-clone-sidecar-worker-access-modes"
)

// The worker access-mode warning finds the golden and the class exactly as
// the guard does: every variable it shares by name with policy.yaml has the
// same expression, and it matches, fails and reads parameters the same way.
// Editing one policy's resolution without the other fails here.
func TestAccessModeWarningResolvesAsTheGuard(t *testing.T) {
	guard, warn := readYAML(t, guardPolicy), readYAML(t, accessModesPolicy)
	exprs := map[string]any{}
	for _, v := range get(guard, "spec", "variables").([]any) {
		exprs[get(v, "name").(string)] = get(v, "expression")
	}
	shared := 0
	for _, v := range get(warn, "spec", "variables").([]any) {
		want, ok := exprs[get(v, "name").(string)]
		if !ok {
			continue
		}
		shared++
		if got := get(v, "expression"); got != want {
			t.Errorf("variable %s differs from policy.yaml's:\n%s\nwant\n%s", get(v, "name"), got, want)
		}
	}
	if shared < 11 {
		t.Errorf("the warning shares %d variables with the guard, want its golden and class resolution (11)", shared)
	}
	for _, field := range []string{"failurePolicy", "paramKind", "matchConstraints", "matchConditions"} {
		if a, b := canonical(t, get(warn, "spec", field)), canonical(t, get(guard, "spec", field)); a != b {
			t.Errorf("%s differs from policy.yaml's:\n%s\nwant\n%s", field, a, b)
		}
	}
}

// The warning never refuses: its binding is [Warn, Audit] in
// deploy/admission/warn and deploy/admission/deny, and in the chart
// whatever admissionGuard.validationActions says.
func TestAccessModeWarningNeverRefuses(t *testing.T) {
	renders := map[string][]map[string]any{
		"kustomize admission/warn": kustomize(t, "admission/warn"),
		"kustomize admission/deny": kustomize(t, "admission/deny"),
		"chart, Deny": admissionObjects(render(t, "cozy-linstor", "admissionGuard.enabled=true",
			"admissionGuard.validationActions={Deny}")),
	}
	for what, objs := range renders {
		b := object(t, objs, "ValidatingAdmissionPolicyBinding", accessModesName)
		actions, _ := get(b, "spec", "validationActions").([]any)
		if !slices.Equal(actions, []any{"Warn", "Audit"}) {
			t.Errorf("%s: the access-mode warning is bound %v, want [Warn Audit]", what, actions)
		}
		if got := get(b, "spec", "policyName"); got != accessModesName {
			t.Errorf("%s: the access-mode binding names policy %v", what, got)
		}
	}
}
