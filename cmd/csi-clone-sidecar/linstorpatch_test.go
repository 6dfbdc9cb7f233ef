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
		"no -f":          {nil, there, "-f is required"},
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

// A LinstorCluster that Helm or Flux owns is refused, naming the owner and
// the lasting path, for each marker alone; --force patches it anyway. Run
// as the binary: the refusal exits 1 with nothing on stdout.
func TestLinstorPatchRefusesOwnedClusters(t *testing.T) {
	for _, marker := range []string{
		`"labels":{"app.kubernetes.io/managed-by":"Helm"}`,
		`"annotations":{"meta.helm.sh/release-name":"linstor","meta.helm.sh/release-namespace":"cozy-linstor"}`,
		`"annotations":{"meta.helm.sh/release-namespace":"cozy-linstor"}`,
		`"labels":{"helm.toolkit.fluxcd.io/name":"linstor","helm.toolkit.fluxcd.io/namespace":"cozy-linstor"}`,
		`"labels":{"kustomize.toolkit.fluxcd.io/name":"storage"}`,
	} {
		cluster := `{"apiVersion":"piraeus.io/v1","kind":"LinstorCluster","metadata":{"name":"lc","resourceVersion":"3",` + marker + `},
			"spec":{"csiController":{"podTemplate":{"spec":{"containers":[{"name":"linstor-csi","image":"cozy/linstor-csi:v1"}]}}}}}`
		cmd := sidecarCmd("linstor-patch", "-f", podTemplateFile)
		cmd.Stdin = strings.NewReader(cluster)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		key := strings.Split(marker, `"`)[3]
		if code := cmd.ProcessState.ExitCode(); code != 1 || stdout.Len() > 0 ||
			!strings.Contains(stderr.String(), "LinstorCluster lc is owned by") || !strings.Contains(stderr.String(), key+"=") ||
			!strings.Contains(stderr.String(), "docs/cozystack.md") || !strings.Contains(stderr.String(), "--force") {
			t.Errorf("%s: exit %d (%v), stdout %q, stderr %q; want exit 1 naming the owner, docs/cozystack.md and --force", key, code, err, stdout.String(), stderr.String())
		}
		var out bytes.Buffer
		if err := linstorPatch([]string{"-f", podTemplateFile, "--force"}, strings.NewReader(cluster), &out); err != nil || !strings.Contains(out.String(), `"op": "add"`) {
			t.Errorf("%s with --force: %v, %s; want the patch", key, err, out.String())
		}
	}
}
