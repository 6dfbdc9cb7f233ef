package deploy_test

import (
	"os"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	guardPolicy       = "admission/warn/policy.yaml"
	accessModesPolicy = "admission/warn/access-modes-policy.yaml"
	accessModesName   = "csi-clone-sidecar-worker-access-modes"
)

// policySpec is the part of a ValidatingAdmissionPolicy the tests compare.
type policySpec struct {
	Spec struct {
		FailurePolicy    string         `json:"failurePolicy"`
		ParamKind        map[string]any `json:"paramKind"`
		MatchConstraints map[string]any `json:"matchConstraints"`
		MatchConditions  []any          `json:"matchConditions"`
		Variables        []struct{ Name, Expression string }
		Validations      []map[string]any `json:"validations"`
	} `json:"spec"`
}

func readPolicy(t *testing.T, path string) policySpec {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p policySpec
	if err := yaml.Unmarshal(raw, &p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

// The worker access-mode warning finds the golden and the class exactly as
// the guard does: every variable it shares by name with policy.yaml has the
// same expression, and it matches, fails and reads parameters the same way.
// Editing one policy's resolution without the other fails here.
func TestAccessModeWarningResolvesAsTheGuard(t *testing.T) {
	guard, warn := readPolicy(t, guardPolicy), readPolicy(t, accessModesPolicy)
	exprs := map[string]string{}
	for _, v := range guard.Spec.Variables {
		exprs[v.Name] = v.Expression
	}
	shared := 0
	for _, v := range warn.Spec.Variables {
		want, ok := exprs[v.Name]
		if !ok {
			continue
		}
		shared++
		if v.Expression != want {
			t.Errorf("variable %s differs from policy.yaml's:\n%s\nwant\n%s", v.Name, v.Expression, want)
		}
	}
	if shared < 11 {
		t.Errorf("the warning shares %d variables with the guard, want its golden and class resolution (11)", shared)
	}
	for what, pair := range map[string][2]any{
		"failurePolicy":    {warn.Spec.FailurePolicy, guard.Spec.FailurePolicy},
		"paramKind":        {warn.Spec.ParamKind, guard.Spec.ParamKind},
		"matchConstraints": {warn.Spec.MatchConstraints, guard.Spec.MatchConstraints},
		"matchConditions":  {warn.Spec.MatchConditions, guard.Spec.MatchConditions},
	} {
		if a, b := canonical(t, pair[0]), canonical(t, pair[1]); a != b {
			t.Errorf("%s differs from policy.yaml's:\n%s\nwant\n%s", what, a, b)
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
