package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const podTemplateFile = "../../deploy/linstor/podtemplate.yaml"

func TestLinstorPatchPrintsAJSONPatchThatAdds(t *testing.T) {
	cluster := `{"apiVersion":"piraeus.io/v1","kind":"LinstorCluster","metadata":{"name":"linstorcluster","resourceVersion":"3"},
		"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"linstor-csi","image":"cozy/linstor-csi:v1"}]}}}}}`
	var out bytes.Buffer
	if err := linstorPatch([]string{"-f", podTemplateFile}, strings.NewReader(cluster), &out); err != nil {
		t.Fatal(err)
	}
	var ops []struct{ Op, Path string }
	if err := json.Unmarshal(out.Bytes(), &ops); err != nil {
		t.Fatalf("not a JSON patch: %v\n%s", err, out.String())
	}
	if len(ops) != 5 || ops[0].Op != "test" {
		t.Fatalf("ops %+v: want a test and four adds (the sidecar, three ADDRESS overrides)", ops)
	}
	for _, op := range ops[1:] {
		if op.Op != "add" || op.Path != "/spec/csiController/podTemplate/spec/containers/-" {
			t.Errorf("op %+v: want an add at the end of the containers", op)
		}
	}
}

func TestLinstorPatchRefuses(t *testing.T) {
	there := `{"apiVersion":"piraeus.io/v1","kind":"LinstorCluster","metadata":{"name":"lc","resourceVersion":"3"},
		"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"csi-clone-sidecar","image":"old"}]}}}}}`
	for name, tc := range map[string]struct {
		args       []string
		in, reason string
	}{
		"already there":  {[]string{"-f", podTemplateFile}, there, "LinstorCluster lc: container csi-clone-sidecar is already in the podTemplate"},
		"no -f":          {nil, there, "usage:"},
		"missing file":   {[]string{"-f", "nope.yaml"}, there, "-f nope.yaml"},
		"not an object":  {[]string{"-f", podTemplateFile}, "", "reading the LinstorCluster"},
		"not a cluster":  {[]string{"-f", podTemplateFile}, `{"kind":"Pod"}`, "want a piraeus.io LinstorCluster"},
		"extra argument": {[]string{"-f", podTemplateFile, "x"}, there, "unexpected argument"},
	} {
		var out bytes.Buffer
		err := linstorPatch(tc.args, strings.NewReader(tc.in), &out)
		if err == nil || !strings.Contains(err.Error(), tc.reason) || out.Len() > 0 {
			t.Errorf("%s: error %v, output %q; want a refusal mentioning %q and no patch", name, err, out.String(), tc.reason)
		}
	}
}
