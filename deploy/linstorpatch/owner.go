package linstorpatch

import (
	"fmt"
)

// An owner marker is a label or annotation by which Helm or Flux claims an
// object it renders. A JSON patch on such an object lasts only until the
// owner's next upgrade: Helm renders the podTemplate again from its chart
// and the sidecar is gone, with no error anywhere.
type ownerMarker struct {
	annotation bool
	key        string
	// owner names the owner from the marker's value and the object's
	// labels and annotations; "" when the value claims nothing.
	owner func(value string, labels, annotations map[string]any) string
}

// ownerMarkers is every marker Owners looks for.
var ownerMarkers = []ownerMarker{
	{key: "app.kubernetes.io/managed-by", owner: func(v string, _, _ map[string]any) string {
		if v != "Helm" {
			return ""
		}
		return "Helm"
	}},
	{annotation: true, key: "meta.helm.sh/release-name", owner: func(v string, _, a map[string]any) string {
		return "Helm release " + qualified(a, "meta.helm.sh/release-namespace", v)
	}},
	{annotation: true, key: "meta.helm.sh/release-namespace", owner: func(v string, _, a map[string]any) string {
		if a["meta.helm.sh/release-name"] != nil {
			return "" // named with the release already
		}
		return "a Helm release in namespace " + v
	}},
	{key: "helm.toolkit.fluxcd.io/name", owner: func(v string, l, _ map[string]any) string {
		return "Flux HelmRelease " + qualified(l, "helm.toolkit.fluxcd.io/namespace", v)
	}},
	{key: "kustomize.toolkit.fluxcd.io/name", owner: func(v string, l, _ map[string]any) string {
		return "Flux Kustomization " + qualified(l, "kustomize.toolkit.fluxcd.io/namespace", v)
	}},
}

// qualified is name prefixed with the namespace m[nsKey], if there is one.
func qualified(m map[string]any, nsKey, name string) string {
	if ns, _ := m[nsKey].(string); ns != "" {
		return ns + "/" + name
	}
	return name
}

// Owners names the Helm and Flux owners that obj's labels and annotations
// declare, each with the marker that says so; none for an object nobody
// renders.
func Owners(obj map[string]any) []string {
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	var owners []string
	for _, m := range ownerMarkers {
		from, kind := labels, "label"
		if m.annotation {
			from, kind = annotations, "annotation"
		}
		value, _ := from[m.key].(string)
		if value == "" {
			continue
		}
		if owner := m.owner(value, labels, annotations); owner != "" {
			owners = append(owners, fmt.Sprintf("%s (%s %s=%s)", owner, kind, m.key, value))
		}
	}
	return owners
}
