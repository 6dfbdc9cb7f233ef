// Package linstorpod renders the linstor-csi-controller pod the way
// piraeus-operator v2 does from a LinstorCluster's
// spec.csiController.podTemplate (a strategic merge onto its own pod
// template: containers and their env entries merge by name), and checks that
// csi-clone-sidecar was added to it without changing anything the operator
// or the LinstorCluster's owner rendered. deploy/'s tests and the e2e tests
// on the loopback API server share it.
package linstorpod

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

const (
	// Sidecar is the added container's name.
	Sidecar = "csi-clone-sidecar"
	// Driver is the LINSTOR CSI driver's container.
	Driver = "linstor-csi"
)

// Who dials what once the sidecar is in: the sidecars that issue
// clone-related calls go through it, the others keep the driver.
var (
	Repointed = []string{"csi-provisioner", "csi-resizer", "csi-snapshotter"}
	Direct    = []string{"csi-attacher", "csi-livenessprobe", "csi-health-monitor"}
)

// OperatorTemplate reads the operator's own pod template (a YAML file such
// as deploy/testdata/piraeus-csi-controller-template.yaml).
func OperatorTemplate(path string) (corev1.PodTemplateSpec, error) {
	var out corev1.PodTemplateSpec
	raw, err := os.ReadFile(path)
	if err == nil {
		err = yaml.UnmarshalStrict(raw, &out)
	}
	return out, err
}

// Merge applies a LinstorCluster's podTemplate to the operator's template
// with Kubernetes' strategic merge, as the operator does.
func Merge(operator corev1.PodTemplateSpec, podTemplate any) (corev1.PodTemplateSpec, error) {
	var out corev1.PodTemplateSpec
	orig, err := json.Marshal(operator)
	if err != nil {
		return out, err
	}
	patch, err := json.Marshal(podTemplate)
	if err != nil {
		return out, err
	}
	merged, err := strategicpatch.StrategicMergePatch(orig, patch, corev1.PodTemplateSpec{})
	if err != nil {
		return out, fmt.Errorf("strategic merge of the podTemplate: %w", err)
	}
	return out, json.Unmarshal(merged, &out)
}

// Find returns the one container of that name, or an error.
func Find(spec corev1.PodSpec, name string) (corev1.Container, error) {
	var found []corev1.Container
	for _, c := range spec.Containers {
		if c.Name == name {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		return corev1.Container{}, fmt.Errorf("%d containers named %s", len(found), name)
	}
	return found[0], nil
}

// Env returns a container's env entry, or nil.
func Env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// Expand resolves $(VAR) in a container argument as the kubelet does, from
// the container's literal env values (a downward-API value reads <VAR>); an
// unknown reference is an error, the kubelet would leave it as is.
func Expand(c corev1.Container, arg string) (string, error) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(arg, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		e := Env(c, name)
		switch {
		case e == nil:
			missing = append(missing, name)
			return ref
		case e.ValueFrom != nil:
			return "<" + name + ">"
		}
		return e.Value
	})
	if len(missing) > 0 {
		return out, fmt.Errorf("container %s: %q refers to undefined env %v", c.Name, arg, missing)
	}
	return out, nil
}

// Arg returns the expanded value of --name=... in a container's args.
func Arg(c corev1.Container, name string) (string, error) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return Expand(c, v)
		}
	}
	return "", fmt.Errorf("container %s has no --%s", c.Name, name)
}

// Check compares the pod rendered without the sidecar (before) with the one
// rendered with it (after) and returns every way in which after is not
// "before plus the sidecar": a container other than the sidecar changed in
// any field but the ADDRESS env entry of the repointed sidecars; a volume or
// another pod field changed; the repointed sidecars do not dial the relay,
// the others and the sidecar not the driver's socket.
func Check(before, after corev1.PodTemplateSpec) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(after.Spec.Containers) != len(before.Spec.Containers)+1 {
		fail("%d containers, want %d and the sidecar", len(after.Spec.Containers), len(before.Spec.Containers))
	}
	for _, b := range before.Spec.Containers {
		a, err := Find(after.Spec, b.Name)
		if err != nil {
			fail("%v", err)
			continue
		}
		if slices.Contains(Repointed, b.Name) {
			a.Env = withoutEnv(a.Env, "ADDRESS")
			b.Env = withoutEnv(b.Env, "ADDRESS")
		}
		if !reflect.DeepEqual(a, b) {
			fail("container %s changed:\nbefore %+v\nafter  %+v", b.Name, b, a)
		}
	}
	a, b := after, before
	a.Spec.Containers, b.Spec.Containers = nil, nil
	if !reflect.DeepEqual(a, b) {
		fail("pod fields other than containers changed")
	}
	return append(errs, checkSockets(after)...)
}

func withoutEnv(env []corev1.EnvVar, name string) []corev1.EnvVar {
	return slices.DeleteFunc(slices.Clone(env), func(e corev1.EnvVar) bool { return e.Name == name })
}

// checkSockets follows every container's socket address to the driver's.
func checkSockets(pod corev1.PodTemplateSpec) []error {
	var errs []error
	driver, err1 := Find(pod.Spec, Driver)
	sc, err2 := Find(pod.Spec, Sidecar)
	if err1 != nil || err2 != nil {
		return []error{fmt.Errorf("%v; %v", err1, err2)}
	}
	endpoint, err := Arg(driver, "csi-endpoint")
	driverSock := strings.TrimPrefix(endpoint, "unix://")
	dials, err3 := Arg(sc, "csi-address")
	listen, err4 := Arg(sc, "listen-address")
	for _, e := range []error{err, err3, err4} {
		if e != nil {
			errs = append(errs, e)
		}
	}
	if dials != driverSock || listen == driverSock {
		errs = append(errs, fmt.Errorf("sidecar dials %q and listens on %q; the driver listens on %q", dials, listen, driverSock))
	}
	want := map[string]string{}
	for _, n := range Repointed {
		want[n] = listen
	}
	for _, n := range Direct {
		want[n] = driverSock
	}
	for n, sock := range want {
		c, err := Find(pod.Spec, n)
		if err == nil {
			var got string
			got, err = Arg(c, "csi-address")
			if err == nil && got != sock {
				err = fmt.Errorf("%s dials %q, want %q", n, got, sock)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// CozystackImage is the linstor-csi image Cozystack's linstor chart swaps in
// (the value deploy/testdata/cozystack-linstor renders too).
const CozystackImage = "ghcr.io/cozystack/cozystack/linstor-csi:v1.6.2@sha256:3228487ae861ddf02cac984289f8c377fc9e66a71fb3c387e9af9f72c1dbc78b"

// CozystackCluster is a LinstorCluster as Cozystack's linstor chart renders
// it: a podTemplate that already overrides linstor-csi's image.
const CozystackCluster = `apiVersion: piraeus.io/v1
kind: LinstorCluster
metadata:
  name: linstorcluster
spec:
  csiController:
    podTemplate:
      spec:
        containers:
          - name: linstor-csi
            image: ` + CozystackImage + `
`

// ApplyJSONPatch applies JSON patch operations to a decoded object with the
// implementation the API server uses, and returns the result decoded.
func ApplyJSONPatch(obj map[string]any, ops any) (map[string]any, error) {
	doc, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, err
	}
	out, err := p.Apply(doc)
	if err != nil {
		return nil, fmt.Errorf("applying %s: %w", raw, err)
	}
	var res map[string]any
	return res, json.Unmarshal(out, &res)
}
