package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/cozystack/csi-clone-sidecar/test/cozychart"
	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// ChartDir is deploy/chart/csi-clone-sidecar of this checkout.
func ChartDir() string {
	return filepath.Join(repoRoot(), "deploy", "chart", "csi-clone-sidecar")
}

// RenderChart renders deploy/chart/csi-clone-sidecar with the pinned Helm
// (`helm template` into namespace, more helm flags in args, e.g. --set) and
// decodes its objects.
func RenderChart(namespace string, args ...string) ([]*unstructured.Unstructured, error) {
	return RenderChartAt(ChartDir(), namespace, args...)
}

// RenderChartAt is RenderChart for the chart in directory chart, as for a
// cluster that serves every operator kind the chart can render
// (cozychart.APIVersions).
func RenderChartAt(chart, namespace string, args ...string) ([]*unstructured.Unstructured, error) {
	helm, err := tools.Bin("helm")
	if err != nil {
		return nil, err
	}
	args = append(cozychart.APIVersionFlags(), args...)
	cmd := exec.Command(helm, append([]string{"template", "csi-clone-sidecar", chart, "--namespace", namespace}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %s %v: %v: %s", chart, args, err, stderr.String())
	}
	return decodeObjects(out)
}

// decodeObjects decodes a multi-document YAML stream, skipping empty ones.
func decodeObjects(stream []byte) ([]*unstructured.Unstructured, error) {
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	var objs []*unstructured.Unstructured
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
}
