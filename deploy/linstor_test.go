package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

const (
	linstorPatchFile   = "linstor/linstorcluster-patch.yaml"
	piraeusTemplateFix = "testdata/piraeus-csi-controller-template.yaml"
	sidecarName        = "csi-clone-sidecar"
)

// Who dials what after the patch: the sidecars that issue clone-related calls
// go through csi-clone-sidecar, the others keep the driver.
var (
	repointed = []string{"csi-provisioner", "csi-resizer", "csi-snapshotter"}
	direct    = []string{"csi-attacher", "csi-livenessprobe", "csi-health-monitor"}
)

// linstorSidecar is the csi-clone-sidecar container of the LinstorCluster patch.
func linstorSidecar(t *testing.T) map[string]any {
	t.Helper()
	doc := readYAML(t, linstorPatchFile)
	c := named(get(doc, "spec", "csiController", "podTemplate", "spec", "containers"), "name", sidecarName)
	if c == nil {
		t.Fatalf("%s adds no %s container", linstorPatchFile, sidecarName)
	}
	return c
}

// mergedTemplate applies the patch's podTemplate to the operator's pod
// template with Kubernetes' strategic merge (what the operator does with it)
// and returns the original and the result.
func mergedTemplate(t *testing.T) (orig, merged corev1.PodTemplateSpec) {
	t.Helper()
	raw, err := os.ReadFile(piraeusTemplateFix)
	if err != nil {
		t.Fatal(err)
	}
	origJSON, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	doc := readYAML(t, linstorPatchFile)
	if doc["apiVersion"] != "piraeus.io/v1" || doc["kind"] != "LinstorCluster" {
		t.Fatalf("%s is a %v %v", linstorPatchFile, doc["apiVersion"], doc["kind"])
	}
	patchJSON, err := json.Marshal(get(doc, "spec", "csiController", "podTemplate"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(origJSON, patchJSON, corev1.PodTemplateSpec{})
	if err != nil {
		t.Fatalf("strategic merge of the podTemplate: %v", err)
	}
	if err := json.Unmarshal(origJSON, &orig); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &merged); err != nil {
		t.Fatal(err)
	}
	return orig, merged
}

func findContainer(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	var found []corev1.Container
	for _, c := range spec.Containers {
		if c.Name == name {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d containers named %s", len(found), name)
	}
	return found[0]
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand resolves $(VAR) in a container argument as the kubelet does, from
// the container's literal env values; an unknown reference is an error
// because the kubelet would leave it in the argument as is.
func expand(c corev1.Container, arg string) (string, error) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(arg, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		e := env(c, name)
		if e == nil {
			missing = append(missing, name)
			return ref
		}
		if e.ValueFrom != nil {
			return "<" + name + ">"
		}
		return e.Value
	})
	if len(missing) > 0 {
		return out, fmt.Errorf("container %s: %q refers to undefined env %v", c.Name, arg, missing)
	}
	return out, nil
}

// argValue returns the expanded value of --name=... in a container's args.
func argValue(t *testing.T, c corev1.Container, name string) string {
	t.Helper()
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			x, err := expand(c, v)
			if err != nil {
				t.Error(err)
			}
			return x
		}
	}
	t.Fatalf("container %s has no --%s", c.Name, name)
	return ""
}

func TestLinstorPatchKeepsTheOperatorsContainers(t *testing.T) {
	orig, merged := mergedTemplate(t)
	if len(merged.Spec.Containers) != len(orig.Spec.Containers)+1 {
		t.Errorf("%d containers after the patch, want the operator's %d plus the sidecar", len(merged.Spec.Containers), len(orig.Spec.Containers))
	}
	for _, o := range orig.Spec.Containers {
		m := findContainer(t, merged.Spec, o.Name)
		if o.Image != m.Image || !reflect.DeepEqual(o.Args, m.Args) || !reflect.DeepEqual(o.VolumeMounts, m.VolumeMounts) {
			t.Errorf("%s: image, args or mounts changed by the patch", o.Name)
		}
		for _, e := range o.Env {
			if e.Name == "ADDRESS" {
				continue
			}
			if got := env(m, e.Name); got == nil || !reflect.DeepEqual(*got, e) {
				t.Errorf("%s: env %s lost or changed by the merge: %v", o.Name, e.Name, got)
			}
		}
	}
	if !reflect.DeepEqual(orig.Spec.Volumes, merged.Spec.Volumes) {
		t.Errorf("volumes changed: %v", merged.Spec.Volumes)
	}
}

func TestLinstorPatchRoutesTheCloneCallsThroughTheSidecar(t *testing.T) {
	_, merged := mergedTemplate(t)
	driver := findContainer(t, merged.Spec, "linstor-csi")
	sc := findContainer(t, merged.Spec, sidecarName)
	driverSock := strings.TrimPrefix(argValue(t, driver, "csi-endpoint"), "unix://")
	if got := argValue(t, sc, "csi-address"); got != driverSock {
		t.Errorf("sidecar dials %q, the driver listens on %q", got, driverSock)
	}
	listen := argValue(t, sc, "listen-address")
	if listen == driverSock {
		t.Fatalf("sidecar listens on the driver's socket %s", listen)
	}
	for _, name := range repointed {
		if got := argValue(t, findContainer(t, merged.Spec, name), "csi-address"); got != listen {
			t.Errorf("%s dials %q, want the sidecar's %q", name, got, listen)
		}
	}
	for _, name := range direct {
		if got := argValue(t, findContainer(t, merged.Spec, name), "csi-address"); got != driverSock {
			t.Errorf("%s dials %q, want the driver's %q", name, got, driverSock)
		}
	}
	// Both sockets in the volume the driver and the sidecars share.
	var mount string
	for _, m := range sc.VolumeMounts {
		if m.Name == "socket-dir" {
			mount = m.MountPath
		}
	}
	if mount == "" || filepath.Dir(listen) != mount || filepath.Dir(driverSock) != mount {
		t.Errorf("sidecar mounts socket-dir at %q; sockets %s and %s", mount, listen, driverSock)
	}
	for _, a := range sc.Args {
		if _, err := expand(sc, a); err != nil {
			t.Error(err)
		}
	}
	if ns := env(sc, "POD_NAMESPACE"); ns == nil || ns.ValueFrom == nil || ns.ValueFrom.FieldRef == nil || ns.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE is not the downward API's metadata.namespace: %v", ns)
	}
	if argValue(t, sc, "leader-election") != "true" || argValue(t, sc, "leader-election-namespace") != "<POD_NAMESPACE>" {
		t.Errorf("leader election is not on, in the pod's namespace")
	}
}

func TestLinstorSidecarContainerIsHardened(t *testing.T) {
	_, merged := mergedTemplate(t)
	sc := findContainer(t, merged.Spec, sidecarName)
	s := sc.SecurityContext
	switch {
	case s == nil:
		t.Fatal("no securityContext")
	case s.RunAsNonRoot == nil || !*s.RunAsNonRoot || s.RunAsUser == nil || *s.RunAsUser == 0:
		t.Error("not non-root")
	case s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem:
		t.Error("root filesystem writable")
	case s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation:
		t.Error("privilege escalation allowed")
	case s.Capabilities == nil || !reflect.DeepEqual(s.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(s.Capabilities.Add) > 0:
		t.Errorf("capabilities %v, want drop ALL and nothing added", s.Capabilities)
	}
	if sc.Resources.Requests.Cpu().IsZero() || sc.Resources.Requests.Memory().IsZero() || sc.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %v: want cpu and memory requests and a memory limit", sc.Resources)
	}
	// Probes on /healthz of the --http-endpoint port, by the port's name.
	_, portStr, _ := strings.Cut(argValue(t, sc, "http-endpoint"), ":")
	port, _ := strconv.Atoi(portStr)
	for name, p := range map[string]*corev1.Probe{"liveness": sc.LivenessProbe, "readiness": sc.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
			t.Errorf("%s probe is not GET /healthz: %v", name, p)
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
}

// The driver's command wrapper sets the umask and passes the operator's args
// through unchanged: run it with /bin/sh and a stand-in for /linstor-csi.
func TestLinstorDriverWrapperKeepsArgs(t *testing.T) {
	_, merged := mergedTemplate(t)
	driver := findContainer(t, merged.Spec, "linstor-csi")
	if len(driver.Command) != 4 || driver.Command[0] != "/bin/sh" || driver.Command[1] != "-c" {
		t.Fatalf("driver command %q, want /bin/sh -c <script> <name>", driver.Command)
	}
	dir := t.TempDir()
	standIn := filepath.Join(dir, "linstor-csi")
	script := "#!/bin/sh\numask\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"
	if err := os.WriteFile(standIn, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := append([]string{}, driver.Command...)
	cmd[2] = strings.ReplaceAll(cmd[2], "/linstor-csi", standIn)
	out, err := run(dir, cmd[0], append(cmd[1:], driver.Args...)...)
	if err != nil {
		t.Fatalf("%q: %v\n%s", cmd, err, out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if lines[0] != driverUmask(t) {
		t.Errorf("umask %s, want %s", lines[0], driverUmask(t))
	}
	if !reflect.DeepEqual(lines[1:], driver.Args) {
		t.Errorf("driver got args %q, want %q", lines[1:], driver.Args)
	}
}

// driverUmask is the umask the patch gives the driver, as "0007".
func driverUmask(t *testing.T) string {
	t.Helper()
	_, merged := mergedTemplate(t)
	m := regexp.MustCompile(`umask (0[0-7]{3})`).FindStringSubmatch(strings.Join(findContainer(t, merged.Spec, "linstor-csi").Command, " "))
	if m == nil {
		t.Fatal("driver command sets no umask")
	}
	return m[1]
}

// The flags both manifests pass are flags the binary accepts: it is built
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
	_, merged := mergedTemplate(t)
	generic := map[string]any{}
	for _, o := range kustomize(t, "generic") {
		if o["kind"] == "Deployment" {
			generic = named(get(o, "spec", "template", "spec", "containers"), "name", sidecarName)
		}
	}
	var genericC corev1.Container
	raw, _ := json.Marshal(generic)
	if err := json.Unmarshal(raw, &genericC); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]corev1.Container{"linstor": findContainer(t, merged.Spec, sidecarName), "generic": genericC} {
		var args []string
		for _, a := range c.Args {
			x, err := expand(c, a)
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
