package linstorpatch

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cozystack/csi-clone-sidecar/test/linstorpod"
)

// addition is what deploy/linstor/podtemplate.yaml holds, shortened: a
// container of its own and an override of an operator container.
func addition() map[string]any {
	return decode(`{"spec":{"containers":[
		{"name":"csi-clone-sidecar","image":"sidecar:v1","args":["--v=2"]},
		{"name":"csi-provisioner","env":[{"name":"ADDRESS","value":"/csi/csi-clone.sock"}]}]}}`)
}

func decode(s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}

const header = `"apiVersion":"piraeus.io/v1","kind":"LinstorCluster","metadata":{"name":"linstorcluster","resourceVersion":"7"}`

// apply runs the operations through the JSON patch implementation the API
// server uses and returns the object afterwards.
func apply(t *testing.T, cluster map[string]any, ops []Op) map[string]any {
	t.Helper()
	out, err := linstorpod.ApplyJSONPatch(cluster, ops)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func containers(t *testing.T, cluster map[string]any) []any {
	t.Helper()
	var node any = cluster
	for _, k := range containersPath {
		node = node.(map[string]any)[k]
	}
	return node.([]any)
}

func TestAddKeepsWhatIsThereAndAddsTheRest(t *testing.T) {
	for name, before := range map[string]string{
		"no spec":            `{` + header + `}`,
		"no csiController":   `{` + header + `,"spec":{"controller":{"enabled":true}}}`,
		"empty podTemplate":  `{` + header + `,"spec":{"csiController":{"podTemplate":{}}}}`,
		"image override":     `{` + header + `,"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"linstor-csi","image":"cozy/linstor-csi:v1"}]}}}}}`,
		"provisioner env":    `{` + header + `,"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"csi-provisioner","env":[{"name":"X","value":"1"}]}]}}}}}`,
		"provisioner no env": `{` + header + `,"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"csi-provisioner","image":"p:v1"}]}}}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			cluster := decode(before)
			ops, err := Add(cluster, addition())
			if err != nil {
				t.Fatal(err)
			}
			if ops[0].Op != "test" {
				t.Errorf("first operation %v, want the test that guards the rest", ops[0])
			}
			after := apply(t, cluster, ops)
			got := map[string]map[string]any{}
			for _, c := range containers(t, after) {
				got[c.(map[string]any)["name"].(string)] = c.(map[string]any)
			}
			// Everything that was there is still there.
			if old, ok := decode(before)["spec"].(map[string]any); ok {
				var node any = old
				for _, k := range containersPath[1:] {
					m, _ := node.(map[string]any)
					node = m[k]
				}
				list, _ := node.([]any)
				for _, c := range list {
					cm := c.(map[string]any)
					for k, v := range cm {
						if k != "env" && !reflect.DeepEqual(got[cm["name"].(string)][k], v) {
							t.Errorf("%s.%s changed: %v -> %v", cm["name"], k, v, got[cm["name"].(string)][k])
						}
					}
				}
				if name == "no csiController" && after["spec"].(map[string]any)["controller"] == nil {
					t.Error("spec.controller lost")
				}
			}
			if !reflect.DeepEqual(got["csi-clone-sidecar"], addition()["spec"].(map[string]any)["containers"].([]any)[0]) {
				t.Errorf("sidecar %v", got["csi-clone-sidecar"])
			}
			env := got["csi-provisioner"]["env"].([]any)
			if !reflect.DeepEqual(env[len(env)-1], map[string]any{"name": "ADDRESS", "value": "/csi/csi-clone.sock"}) {
				t.Errorf("csi-provisioner env %v", env)
			}
			if name == "provisioner env" && len(env) != 2 {
				t.Errorf("csi-provisioner env %v: want X kept and ADDRESS added", env)
			}
			// A second run refuses: the sidecar is there now.
			if _, err := Add(after, addition()); !errors.Is(err, ErrAlreadyThere) {
				t.Errorf("second run: %v, want ErrAlreadyThere", err)
			}
		})
	}
}

// The guard makes the API server refuse a patch computed from an object that
// changed since: applying the same patch twice changes nothing the second time.
func TestPatchAppliedTwiceIsRefused(t *testing.T) {
	cluster := decode(`{` + header + `,"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"linstor-csi","image":"x"}]}}}}}`)
	ops, err := Add(cluster, addition())
	if err != nil {
		t.Fatal(err)
	}
	once := apply(t, cluster, ops)
	if _, err := linstorpod.ApplyJSONPatch(once, ops); err == nil {
		t.Error("the same patch applied again was accepted")
	}
}

func TestAddRefusesConflicts(t *testing.T) {
	for name, tc := range map[string]struct{ cluster, want string }{
		"not a LinstorCluster":  {`{"apiVersion":"v1","kind":"ConfigMap"}`, "want a piraeus.io LinstorCluster"},
		"other ADDRESS":         {`{` + header + `,"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"csi-provisioner","env":[{"name":"ADDRESS","value":"/other.sock"}]}]}}}}}`, "env ADDRESS"},
		"containers not a list": {`{` + header + `,"spec":{"csiController":{"podTemplate":{"spec":{"containers":{}}}}}}`, "is not a list"},
		"duplicate names":       {`{` + header + `,"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"a"},{"name":"a"}]}}}}}`, "twice"},
		"no resourceVersion":    {`{"apiVersion":"piraeus.io/v1","kind":"LinstorCluster","metadata":{"name":"x"}}`, "resourceVersion"},
	} {
		if _, err := Add(decode(tc.cluster), addition()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", name, err, tc.want)
		}
	}
	if _, err := Add(decode(`{`+header+`}`), decode(`{"spec":{}}`)); err == nil {
		t.Error("an addition without containers was accepted")
	}
}

func TestOverrideAlreadyThereAddsNothing(t *testing.T) {
	cluster := decode(`{` + header + `,"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"csi-provisioner","env":[{"name":"ADDRESS","value":"/csi/csi-clone.sock"}]}]}}}}}`)
	ops, err := Add(cluster, addition())
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops[1:] {
		if strings.Contains(op.Path, "/containers/0") {
			t.Errorf("touches the provisioner whose override is there: %v", op)
		}
	}
}

// Every owner marker Owners knows, alone, names its owner; the markers of a
// Cozystack linstor release name all of them; an unowned object and a
// managed-by of another tool name none.
func TestOwnersNamesEveryMarker(t *testing.T) {
	cases := map[string]struct {
		labels, annotations map[string]any
		want                []string
	}{
		"managed-by Helm": {labels: map[string]any{"app.kubernetes.io/managed-by": "Helm"},
			want: []string{"Helm (label app.kubernetes.io/managed-by=Helm)"}},
		"release name and namespace": {annotations: map[string]any{"meta.helm.sh/release-name": "linstor", "meta.helm.sh/release-namespace": "cozy-linstor"},
			want: []string{"Helm release cozy-linstor/linstor (annotation meta.helm.sh/release-name=linstor)"}},
		"release name alone": {annotations: map[string]any{"meta.helm.sh/release-name": "linstor"},
			want: []string{"Helm release linstor (annotation meta.helm.sh/release-name=linstor)"}},
		"release namespace alone": {annotations: map[string]any{"meta.helm.sh/release-namespace": "cozy-linstor"},
			want: []string{"a Helm release in namespace cozy-linstor (annotation meta.helm.sh/release-namespace=cozy-linstor)"}},
		"Flux HelmRelease": {labels: map[string]any{"helm.toolkit.fluxcd.io/name": "linstor", "helm.toolkit.fluxcd.io/namespace": "cozy-linstor"},
			want: []string{"Flux HelmRelease cozy-linstor/linstor (label helm.toolkit.fluxcd.io/name=linstor)"}},
		"Flux Kustomization": {labels: map[string]any{"kustomize.toolkit.fluxcd.io/name": "storage", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
			want: []string{"Flux Kustomization flux-system/storage (label kustomize.toolkit.fluxcd.io/name=storage)"}},
		"Cozystack's linstor release": {
			labels:      map[string]any{"app.kubernetes.io/managed-by": "Helm", "helm.toolkit.fluxcd.io/name": "linstor", "helm.toolkit.fluxcd.io/namespace": "cozy-linstor"},
			annotations: map[string]any{"meta.helm.sh/release-name": "linstor", "meta.helm.sh/release-namespace": "cozy-linstor"},
			want: []string{"Helm (label app.kubernetes.io/managed-by=Helm)", "Helm release cozy-linstor/linstor (annotation meta.helm.sh/release-name=linstor)",
				"Flux HelmRelease cozy-linstor/linstor (label helm.toolkit.fluxcd.io/name=linstor)"}},
		"unowned":         {labels: map[string]any{"app": "linstor"}},
		"managed by kapp": {labels: map[string]any{"app.kubernetes.io/managed-by": "kapp"}},
	}
	covered := map[string]bool{}
	for name, tc := range cases {
		if len(tc.want) == 1 {
			for _, m := range ownerMarkers {
				covered[m.key] = covered[m.key] || strings.Contains(tc.want[0], " "+m.key+"=")
			}
		}
		obj := map[string]any{"metadata": map[string]any{"name": "linstorcluster", "labels": tc.labels, "annotations": tc.annotations}}
		if got := Owners(obj); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Owners = %q, want %q", name, got, tc.want)
		}
	}
	// Each marker has a row where it alone names an owner.
	for _, m := range ownerMarkers {
		if !covered[m.key] {
			t.Errorf("marker %s has no row of its own above", m.key)
		}
	}
}
