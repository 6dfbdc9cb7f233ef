package deploy_test

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/csi-clone-sidecar/deploy/linstorpatch"
	"github.com/cozystack/csi-clone-sidecar/test/linstorpod"
)

const (
	piraeusTemplateFix = "testdata/piraeus-csi-controller-template.yaml"
	sidecarName        = linstorpod.Sidecar
	// cozyLinstorCSI is the image Cozystack's linstor chart swaps in.
	cozyLinstorCSI = linstorpod.CozystackImage
)

// linstorSidecar is the csi-clone-sidecar container of deploy/linstor/podtemplate.yaml.
func linstorSidecar(t *testing.T) map[string]any {
	t.Helper()
	c := named(get(readYAML(t, linstorPodTemplateFile), "spec", "containers"), "name", sidecarName)
	if c == nil {
		t.Fatalf("%s adds no %s container", linstorPodTemplateFile, sidecarName)
	}
	return c
}

// addedWithPatch adds deploy/linstor/podtemplate.yaml to Cozystack's LinstorCluster the
// documented way (linstorpatch's JSON patch, applied by the JSON patch
// implementation the API server uses) and returns the LinstorCluster before
// and after.
func addedWithPatch(t *testing.T) (before, after map[string]any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(linstorpod.CozystackCluster), &before); err != nil {
		t.Fatal(err)
	}
	// As the API server returns it.
	before["metadata"].(map[string]any)["resourceVersion"] = "1"
	ops, err := linstorpatch.Add(before, readYAML(t, linstorPodTemplateFile))
	if err != nil {
		t.Fatal(err)
	}
	after, err = linstorpod.ApplyJSONPatch(before, ops)
	if err != nil {
		t.Fatal(err)
	}
	return before, after
}

// operatorPods renders the operator's pod from each LinstorCluster's
// podTemplate, as the operator does.
func operatorPods(t *testing.T, clusters ...map[string]any) []corev1.PodTemplateSpec {
	t.Helper()
	op, err := linstorpod.OperatorTemplate(piraeusTemplateFix)
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.PodTemplateSpec
	for _, c := range clusters {
		pod, err := linstorpod.Merge(op, get(c, "spec", "csiController", "podTemplate"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pod)
	}
	return out
}

// checkPods fails the test for every way in which after is not before plus
// the sidecar, and when before lacks Cozystack's image override (the case
// that a merge patch used to break).
func checkPods(t *testing.T, before, after corev1.PodTemplateSpec) {
	t.Helper()
	driver, err := linstorpod.Find(before.Spec, linstorpod.Driver)
	if err != nil || driver.Image != cozyLinstorCSI {
		t.Fatalf("the pod before has linstor-csi %q (%v), want the override %s", driver.Image, err, cozyLinstorCSI)
	}
	for _, err := range linstorpod.Check(before, after) {
		t.Error(err)
	}
}

func TestLinstorPatchAddsTheSidecarAndChangesNothingElse(t *testing.T) {
	before, after := addedWithPatch(t)
	pods := operatorPods(t, before, after)
	checkPods(t, pods[0], pods[1])
	// A second run refuses, and so does the same patch applied again.
	if _, err := linstorpatch.Add(after, readYAML(t, linstorPodTemplateFile)); !errors.Is(err, linstorpatch.ErrAlreadyThere) {
		t.Errorf("second run: %v, want a refusal", err)
	}
}

func TestLinstorSidecarContainerIsHardened(t *testing.T) {
	_, after := addedWithPatch(t)
	sc, err := linstorpod.Find(operatorPods(t, after)[0].Spec, sidecarName)
	if err != nil {
		t.Fatal(err)
	}
	s := sc.SecurityContext
	switch {
	case s == nil:
		t.Fatal("no securityContext")
	case s.RunAsUser == nil || *s.RunAsUser != 0 || s.RunAsGroup == nil || *s.RunAsGroup != 0:
		t.Error("not uid 0 and gid 0, which the driver's socket needs (see socket_test.go)")
	case s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem:
		t.Error("root filesystem writable")
	case s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation:
		t.Error("privilege escalation allowed")
	case s.Privileged != nil && *s.Privileged:
		t.Error("privileged")
	case s.Capabilities == nil || !reflect.DeepEqual(s.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(s.Capabilities.Add) > 0:
		t.Errorf("capabilities %v, want drop ALL and nothing added", s.Capabilities)
	case s.SeccompProfile == nil || s.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccomp %v, want RuntimeDefault", s.SeccompProfile)
	}
	if sc.Resources.Requests.Cpu().IsZero() || sc.Resources.Requests.Memory().IsZero() || sc.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %v: want cpu and memory requests and a memory limit", sc.Resources)
	}
	// Liveness on /healthz (the relay only: restarting it heals no driver),
	// readiness on /readyz (the relay and the driver's Probe), both on the
	// --http-endpoint port, by the port's name.
	endpoint, err := linstorpod.Arg(sc, "http-endpoint")
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := strings.Cut(endpoint, ":")
	port, _ := strconv.Atoi(portStr)
	probes := map[string]struct {
		probe *corev1.Probe
		path  string
	}{"liveness": {sc.LivenessProbe, "/healthz"}, "readiness": {sc.ReadinessProbe, "/readyz"}}
	for name, want := range probes {
		p := want.probe
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want.path {
			t.Errorf("%s probe is not GET %s: %v", name, want.path, p)
			continue
		}
		var found bool
		for _, cp := range sc.Ports {
			found = found || (cp.Name == p.HTTPGet.Port.String() && int(cp.ContainerPort) == port)
		}
		if !found {
			t.Errorf("%s probe port %v is not the --http-endpoint port %d", name, p.HTTPGet.Port, port)
		}
	}
	if ns, err := linstorpod.Arg(sc, "leader-election-namespace"); err != nil || ns != "<POD_NAMESPACE>" {
		t.Errorf("leader election namespace %q (%v), want the pod's (downward API)", ns, err)
	}
}

// The flags every manifest passes are flags the binary accepts: it is built
// from this checkout and run with the container's args (env references
// expanded as the kubelet does) plus --version, which exits 0 only once every
// flag parsed. A misspelt or removed flag would crash-loop the container.
func TestSidecarArgsAreAcceptedByTheBinary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("go not in PATH: the test builds the binary with it")
	}
	bin := filepath.Join(t.TempDir(), sidecarName)
	if out, err := run(repoFile(), gobin, "build", "-o", bin, "./cmd/csi-clone-sidecar"); err != nil {
		t.Fatalf("go build ./cmd/csi-clone-sidecar: %v\n%s", err, out)
	}
	_, after := addedWithPatch(t)
	linstor, err := linstorpod.Find(operatorPods(t, after)[0].Spec, sidecarName)
	if err != nil {
		t.Fatal(err)
	}
	var generic corev1.Container
	for _, o := range kustomize(t, "generic") {
		if o["kind"] == "Deployment" {
			raw, _ := json.Marshal(named(get(o, "spec", "template", "spec", "containers"), "name", sidecarName))
			if err := json.Unmarshal(raw, &generic); err != nil {
				t.Fatal(err)
			}
		}
	}
	guarded := guardedSidecar(t)
	for name, c := range map[string]corev1.Container{"linstor": linstor, "generic": generic, "chart with the admission guard": guarded} {
		var args []string
		for _, a := range c.Args {
			x, err := linstorpod.Expand(c, a)
			if err != nil {
				t.Fatal(err)
			}
			args = append(args, x)
		}
		if out, err := run(".", bin, append(args, "--version")...); err != nil {
			t.Errorf("%s: csi-clone-sidecar %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
}
