package deploy_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/ledger"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// kubectlBin is the pinned kubectl `make tools` builds (its kustomize
// renders deploy/), not whatever kubectl is on PATH.
func kubectlBin(t *testing.T) string {
	t.Helper()
	bin, err := tools.Bin("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// kustomize builds dir with kubectl's kustomize and returns the objects.
func kustomize(t *testing.T, dir string) []map[string]any {
	t.Helper()
	kubectl := kubectlBin(t)
	out, err := run(".", kubectl, "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
	if strings.Contains(out, "PARAM-") {
		t.Errorf("kubectl kustomize %s left a PARAM- placeholder unreplaced", dir)
	}
	return splitDocs(t, out)
}

// object returns the one object of kind (and name, if not empty), failing
// the test if there is not exactly one.
func object(t *testing.T, objs []map[string]any, kind, name string) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, o := range objs {
		if o["kind"] == kind && (name == "" || get(o, "metadata", "name") == name) {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s %q, found %d", kind, name, len(found))
	}
	return found[0]
}

func container(t *testing.T, podSpec any, name string) map[string]any {
	t.Helper()
	c := named(get(podSpec, "containers"), "name", name)
	if c == nil {
		t.Fatalf("no container %s", name)
	}
	return c
}

// writeVerbs are the verbs that change something.
var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// mayWrite says, per role, which verbs that change something each resource
// may get; nothing else may be written, escalated or impersonated.
var mayWrite = map[string]map[string]map[string]bool{
	"ClusterRole": {
		"persistentvolumeclaims": {"patch": true},  // verdict annotations
		"persistentvolumes":      {"patch": true},  // evidence annotation
		"events":                 {"create": true}, // Warnings on DataVolumes
	},
	"Role": {
		"leases":     {"create": true, "update": true}, // leader election
		"configmaps": {"create": true, "update": true}, // the ledger
	},
}

func TestRBACIsLeastPrivilege(t *testing.T) {
	objs := kustomize(t, "rbac")
	for _, kind := range []string{"ClusterRole", "Role"} {
		role := object(t, objs, kind, "csi-clone-sidecar")
		for _, r := range get(role, "rules").([]any) {
			rule := r.(map[string]any)
			for _, res := range get(rule, "resources").([]any) {
				for _, v := range get(rule, "verbs").([]any) {
					verb, resource := v.(string), res.(string)
					switch {
					case verb == "*" || resource == "*":
						t.Errorf("%s: wildcard in %v", kind, rule)
					case resource == "secrets":
						t.Errorf("%s: secrets are never needed", kind)
					case verb == "escalate" || verb == "bind" || verb == "impersonate":
						t.Errorf("%s: %s on %s", kind, verb, resource)
					case writeVerbs[verb] && !mayWrite[kind][resource][verb]:
						t.Errorf("%s: %s on %s is not needed", kind, verb, resource)
					}
				}
			}
		}
	}
	// Namespaced state (Lease, ledger) only in the Role, never cluster-wide.
	for _, r := range get(object(t, objs, "ClusterRole", "csi-clone-sidecar"), "rules").([]any) {
		for _, res := range get(r, "resources").([]any) {
			if res == "leases" || res == "configmaps" {
				t.Errorf("ClusterRole grants %s cluster-wide", res)
			}
		}
	}
}

func TestRBACBindsTheControllerServiceAccount(t *testing.T) {
	objs := kustomize(t, "rbac")
	if ns := get(object(t, objs, "ClusterRole", ""), "metadata", "namespace"); ns != nil {
		t.Errorf("ClusterRole has namespace %v", ns)
	}
	for _, kind := range []string{"Role", "RoleBinding"} {
		if ns := get(object(t, objs, kind, ""), "metadata", "namespace"); ns != "cozy-linstor" {
			t.Errorf("%s in namespace %v, want cozy-linstor", kind, ns)
		}
	}
	for kind, role := range map[string]string{"ClusterRoleBinding": "ClusterRole", "RoleBinding": "Role"} {
		b := object(t, objs, kind, "")
		if get(b, "roleRef", "kind") != role || get(b, "roleRef", "name") != "csi-clone-sidecar" {
			t.Errorf("%s refers to %v", kind, get(b, "roleRef"))
		}
		want := map[string]any{"kind": "ServiceAccount", "name": "linstor-csi-controller", "namespace": "cozy-linstor"}
		if got := get(b, "subjects", 0); !reflect.DeepEqual(got, want) {
			t.Errorf("%s subject %v, want %v", kind, got, want)
		}
	}
}

func TestMonitoringWiring(t *testing.T) {
	objs := kustomize(t, "monitoring")
	for _, o := range objs {
		if ns := get(o, "metadata", "namespace"); ns != "cozy-linstor" {
			t.Errorf("%s %v in namespace %v", o["kind"], get(o, "metadata", "name"), ns)
		}
	}
	// The dashboard ships from dashboard.json, unchanged.
	cm := object(t, objs, "ConfigMap", "")
	gd := object(t, objs, "GrafanaDashboard", "")
	key, _ := get(gd, "spec", "configMapRef", "key").(string)
	if get(gd, "spec", "configMapRef", "name") != get(cm, "metadata", "name") {
		t.Errorf("GrafanaDashboard refers to ConfigMap %v, the build has %v", get(gd, "spec", "configMapRef", "name"), get(cm, "metadata", "name"))
	}
	file, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := get(cm, "data", key).(string); got != string(file) {
		t.Errorf("ConfigMap key %q does not hold %s", key, dashboardFile)
	}
	// ServiceMonitor -> Service -> container port, by name.
	svc := object(t, objs, "Service", "csi-clone-sidecar")
	sm := object(t, objs, "ServiceMonitor", "csi-clone-sidecar")
	for k, v := range get(sm, "spec", "selector", "matchLabels").(map[string]any) {
		if get(svc, "metadata", "labels", k) != v {
			t.Errorf("ServiceMonitor selects %s=%v, the Service does not carry it", k, v)
		}
	}
	port := get(sm, "spec", "endpoints", 0, "port")
	sp := named(get(svc, "spec", "ports"), "name", port.(string))
	if sp == nil {
		t.Fatalf("ServiceMonitor scrapes port %v, the Service has none of that name", port)
	}
	if get(sm, "spec", "endpoints", 0, "honorLabels") != true {
		t.Errorf("ServiceMonitor without honorLabels: the verdict series' namespace label would become exported_namespace")
	}
	sidecar := linstorSidecar(t)
	if named(sidecar["ports"], "name", sp["targetPort"].(string)) == nil {
		t.Errorf("Service targets port %v, the sidecar container has no port of that name", sp["targetPort"])
	}
	// The job label Prometheus gives the targets is the Service's name: the
	// rules and the dashboard select on it.
	rules, _ := os.ReadFile(rulesFile)
	if !strings.Contains(string(rules), `job="`+get(svc, "metadata", "name").(string)+`"`) {
		t.Errorf("rules do not select job=%q", get(svc, "metadata", "name"))
	}
	object(t, objs, "PrometheusRule", "csi-clone-sidecar")
}

func genericParams(t *testing.T) map[string]string {
	t.Helper()
	p := readYAML(t, "generic/params/params.yaml")
	out := map[string]string{}
	for k, v := range get(p, "data").(map[string]any) {
		out[k] = v.(string)
	}
	return out
}

func TestGenericOverlay(t *testing.T) {
	params := genericParams(t)
	objs := kustomize(t, "generic")
	for _, o := range objs {
		if o["kind"] == "ConfigMap" {
			t.Errorf("the parameters ConfigMap is emitted; it must stay local-config")
		}
	}
	dep := object(t, objs, "Deployment", "")
	spec := get(dep, "spec", "template", "spec")
	sc := container(t, spec, "csi-clone-sidecar")
	if envValue(sc, "DRIVER_ADDRESS") != params["driverAddress"] || envValue(sc, "ADDRESS") != params["sidecarAddress"] {
		t.Errorf("sidecar env %v does not carry the parameters", sc["env"])
	}
	mount := get(sc, "volumeMounts", 0)
	if get(mount, "name") != params["socketVolume"] || get(mount, "mountPath") != params["socketMountPath"] {
		t.Errorf("sidecar mounts %v, want %s at %s", mount, params["socketVolume"], params["socketMountPath"])
	}
	if filepath.Dir(params["sidecarAddress"]) != params["socketMountPath"] || filepath.Dir(params["driverAddress"]) != params["socketMountPath"] {
		t.Errorf("params: both sockets must be in socketMountPath %s", params["socketMountPath"])
	}
	for _, name := range []string{"csi-provisioner", "csi-resizer", "csi-snapshotter"} {
		if got := envValue(container(t, spec, name), "ADDRESS"); got != params["sidecarAddress"] {
			t.Errorf("%s dials %q, want the sidecar's %q", name, got, params["sidecarAddress"])
		}
	}
	if got := envValue(container(t, spec, "csi-attacher"), "ADDRESS"); got != params["driverAddress"] {
		t.Errorf("csi-attacher dials %q, want the driver's %q", got, params["driverAddress"])
	}
	if get(dep, "spec", "template", "metadata", "labels", "csi-clone-sidecar.cozystack.io/metrics") != "true" {
		t.Errorf("pod template lacks the metrics label the generic Service selects")
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		want := map[string]any{"kind": "ServiceAccount", "name": params["serviceAccount"], "namespace": params["namespace"]}
		if got := get(object(t, objs, kind, ""), "subjects", 0); !reflect.DeepEqual(got, want) {
			t.Errorf("%s subject %v, want %v", kind, got, want)
		}
	}
	for _, kind := range []string{"Role", "RoleBinding"} {
		if ns := get(object(t, objs, kind, ""), "metadata", "namespace"); ns != params["namespace"] {
			t.Errorf("%s in %v, want %s", kind, ns, params["namespace"])
		}
	}
	// The container is the one the LinstorCluster patch adds, up to the
	// socket paths and mounts that are parameters here.
	compareSidecars(t, linstorSidecar(t), sc)
}

// compareSidecars checks that the two ways of deploying run the same
// container: same image, flags, ports, probes, resources and security.
func compareSidecars(t *testing.T, linstor, generic map[string]any) {
	t.Helper()
	for _, k := range []string{"image", "args", "ports", "livenessProbe", "readinessProbe", "resources", "securityContext"} {
		if !reflect.DeepEqual(linstor[k], generic[k]) {
			t.Errorf("csi-clone-sidecar %s differs between deploy/linstor and deploy/generic:\n%s\n%s", k, canonical(t, linstor[k]), canonical(t, generic[k]))
		}
	}
}

func TestGenericMonitoringOverlay(t *testing.T) {
	params := genericParams(t)
	objs := kustomize(t, "generic/monitoring")
	for _, o := range objs {
		if ns := get(o, "metadata", "namespace"); ns != params["namespace"] {
			t.Errorf("%s %v in %v, want %s", o["kind"], get(o, "metadata", "name"), ns, params["namespace"])
		}
	}
	want := map[string]any{"csi-clone-sidecar.cozystack.io/metrics": "true"}
	if got := get(object(t, objs, "Service", "csi-clone-sidecar"), "spec", "selector"); !reflect.DeepEqual(got, want) {
		t.Errorf("generic Service selects %v, want %v", got, want)
	}
}

// TestRoleNamesEveryLedgerObject: the Role's get/update on ConfigMaps names
// exactly the ledger's root and shards, as the sidecar writes them, and the
// admission guard's parameters.
func TestRoleNamesEveryLedgerObject(t *testing.T) {
	role := object(t, kustomize(t, "rbac"), "Role", "csi-clone-sidecar")
	for _, r := range get(role, "rules").([]any) {
		names, ok := r.(map[string]any)["resourceNames"].([]any)
		if !ok || get(r, "resources").([]any)[0] != "configmaps" {
			continue
		}
		var got []string
		for _, n := range names {
			got = append(got, n.(string))
		}
		want := append(ledger.LedgerObjectNames(config.DefaultLedgerName), publish.AdmissionParamsName)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Role names %v\nthe ledger is %v", got, want)
		}
		return
	}
	t.Fatal("no Role rule names the ledger's ConfigMaps")
}
