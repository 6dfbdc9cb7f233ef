// Package linstorpatch computes the JSON patch (RFC 6902) that adds
// containers to a LinstorCluster's spec.csiController.podTemplate without
// replacing anything already there, and refuses when they are there already.
//
// The CRD declares the podTemplate schemaless and atomic
// (x-kubernetes-map-type: atomic), so neither a JSON merge patch nor a
// server-side apply can merge into its containers list: both replace the
// whole podTemplate, dropping what another owner put there (Cozystack's
// linstor-csi image override). A JSON patch of add operations at the right
// indices, guarded by a test of the value it was computed from, adds to it;
// if the object changed in between, the API server refuses the whole patch.
package linstorpatch

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Op is one JSON patch operation.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// ErrAlreadyThere is wrapped by the error Add returns when a container it
// would add (one with an image of its own) is in the podTemplate already.
var ErrAlreadyThere = errors.New("already in the podTemplate")

// containersPath is where the operator's podTemplate patch keeps containers.
var containersPath = []string{"spec", "csiController", "podTemplate", "spec", "containers"}

// Add returns the operations that add addition's containers to the
// LinstorCluster cluster (both as decoded JSON). addition is a sparse pod
// template ({"spec": {"containers": [...]}}) whose entries are of two kinds:
// a container of its own (it has an image), which must not be there yet, and
// an override of a container the operator renders (no image), whose fields
// and env entries are added to an entry of that name where the podTemplate
// has one. A field or env entry the podTemplate already sets to another
// value is a conflict: nothing is changed and the error says which.
func Add(cluster, addition map[string]any) ([]Op, error) {
	if err := checkKind(cluster); err != nil {
		return nil, err
	}
	add, err := containersOf(addition)
	if err != nil {
		return nil, fmt.Errorf("the podTemplate to add: %w", err)
	}
	if len(add) == 0 {
		return nil, errors.New("the podTemplate to add has no containers")
	}
	node, depth := any(cluster), 0
	for ; depth < len(containersPath); depth++ {
		m, ok := node.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is not an object", pointer(containersPath[:depth]))
		}
		next, ok := m[containersPath[depth]]
		if !ok || next == nil {
			break
		}
		node = next
	}
	if depth < len(containersPath) {
		return addSubtree(cluster, node, depth, add)
	}
	existing, ok := node.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a list", pointer(containersPath))
	}
	return mergeContainers(existing, add)
}

func checkKind(cluster map[string]any) error {
	if cluster["kind"] != "LinstorCluster" || !strings.HasPrefix(fmt.Sprint(cluster["apiVersion"]), "piraeus.io/") {
		return fmt.Errorf("want a piraeus.io LinstorCluster, got %v %v", cluster["apiVersion"], cluster["kind"])
	}
	return nil
}

// containersOf returns the containers of a sparse pod template, each an
// object with a name.
func containersOf(podTemplate map[string]any) ([]map[string]any, error) {
	spec, _ := podTemplate["spec"].(map[string]any)
	list, _ := spec["containers"].([]any)
	var out []map[string]any
	for i, c := range list {
		m, ok := c.(map[string]any)
		if !ok || name(m) == "" {
			return nil, fmt.Errorf("spec.containers[%d] is not a container with a name", i)
		}
		out = append(out, m)
	}
	return out, nil
}

func name(c map[string]any) string {
	s, _ := c["name"].(string)
	return s
}

// addSubtree adds the missing part of the path to the containers, at the
// first missing key, guarded by a test of its parent as it is now (of the
// resourceVersion if the parent is the whole object).
func addSubtree(cluster map[string]any, parent any, depth int, add []map[string]any) ([]Op, error) {
	var value any = toAny(add)
	for i := len(containersPath) - 1; i > depth; i-- {
		value = map[string]any{containersPath[i]: value}
	}
	guard := Op{Op: "test", Path: pointer(containersPath[:depth]), Value: parent}
	if depth == 0 {
		meta, _ := cluster["metadata"].(map[string]any)
		rv, _ := meta["resourceVersion"].(string)
		if rv == "" {
			return nil, errors.New("the LinstorCluster has no metadata.resourceVersion: give the object as the API server returns it")
		}
		guard = Op{Op: "test", Path: "/metadata/resourceVersion", Value: rv}
	}
	return []Op{guard, {Op: "add", Path: pointer(containersPath[:depth+1]), Value: value}}, nil
}

// mergeContainers adds to an existing containers list, guarded by a test of
// the list as it is now (the indices below refer to it).
func mergeContainers(existing []any, add []map[string]any) ([]Op, error) {
	index := map[string]int{}
	for i, c := range existing {
		m, ok := c.(map[string]any)
		if !ok || name(m) == "" {
			return nil, fmt.Errorf("%s/%d is not a container with a name", pointer(containersPath), i)
		}
		if _, dup := index[name(m)]; dup {
			return nil, fmt.Errorf("%s lists container %s twice", pointer(containersPath), name(m))
		}
		index[name(m)] = i
	}
	ops := []Op{{Op: "test", Path: pointer(containersPath), Value: existing}}
	for _, c := range add {
		i, there := index[name(c)]
		switch {
		case !there:
			ops = append(ops, Op{Op: "add", Path: pointer(containersPath) + "/-", Value: c})
		case c["image"] != nil:
			return nil, fmt.Errorf("container %s is %w of this LinstorCluster; nothing was changed", name(c), ErrAlreadyThere)
		default:
			more, err := mergeInto(existing[i].(map[string]any), c, pointer(containersPath)+"/"+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			ops = append(ops, more...)
		}
	}
	return ops, nil
}

// mergeInto adds the fields of an override to the podTemplate's entry of the
// same container (env entries by name), at path.
func mergeInto(have, override map[string]any, path string) ([]Op, error) {
	var ops []Op
	for _, key := range sortedKeys(override) {
		want := override[key]
		got, set := have[key]
		switch {
		case key == "name":
		case !set:
			ops = append(ops, Op{Op: "add", Path: path + "/" + key, Value: want})
		case key == "env":
			more, err := mergeEnv(got, want, path+"/env", name(have))
			if err != nil {
				return nil, err
			}
			ops = append(ops, more...)
		case !reflect.DeepEqual(got, want):
			return nil, fmt.Errorf("container %s: the podTemplate sets %s to %v, the addition to %v; nothing was changed", name(have), key, got, want)
		}
	}
	return ops, nil
}

func mergeEnv(got, want any, path, container string) ([]Op, error) {
	have, ok1 := got.([]any)
	add, ok2 := want.([]any)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("container %s: env is not a list", container)
	}
	var ops []Op
	for _, w := range add {
		we, _ := w.(map[string]any)
		var found map[string]any
		for _, h := range have {
			if he, _ := h.(map[string]any); name(he) == name(we) {
				found = he
			}
		}
		switch {
		case found == nil:
			ops = append(ops, Op{Op: "add", Path: path + "/-", Value: we})
		case !reflect.DeepEqual(found, we):
			return nil, fmt.Errorf("container %s: the podTemplate sets env %s to %v, the addition to %v; nothing was changed", container, name(we), found, we)
		}
	}
	return ops, nil
}

// pointer renders a JSON pointer; the keys here need no escaping.
func pointer(keys []string) string {
	return "/" + strings.Join(keys, "/")
}

func toAny(list []map[string]any) []any {
	out := make([]any, len(list))
	for i, m := range list {
		out[i] = m
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
