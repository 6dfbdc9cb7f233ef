// Package cozychart builds Cozystack's linstor package as a fork following
// docs/cozystack.md has it: the files of the pinned release the change
// touches (deploy/testdata/cozystack-linstor) with deploy/cozystack/linstor.patch
// applied by git apply, and this checkout's deploy/chart/csi-clone-sidecar
// vendored into charts/. deploy/'s tests render it with Helm; the e2e tests
// apply what it renders.
package cozychart

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Package is where Cozystack keeps the linstor chart in its repository.
const Package = "packages/system/linstor"

// APIVersions are the CRD-backed kinds the chart renders, as
// "group/version/Kind": a Cozystack cluster serves all of them
// (VictoriaMetrics operator, prometheus-operator's CRDs, grafana-operator
// v5). The chart renders each object only where its kind is served, so a
// `helm template` that stands for such a cluster passes them.
var APIVersions = []string{
	"operator.victoriametrics.com/v1beta1/VMServiceScrape",
	"operator.victoriametrics.com/v1beta1/VMRule",
	"monitoring.coreos.com/v1/ServiceMonitor",
	"monitoring.coreos.com/v1/PrometheusRule",
	"grafana.integreatly.org/v1beta1/GrafanaDashboard",
}

// APIVersionFlags are APIVersions as helm template's --api-versions flags.
func APIVersionFlags() []string {
	var args []string
	for _, v := range APIVersions {
		args = append(args, "--api-versions", v)
	}
	return args
}

// PatchFile is the change to Cozystack's linstor package, relative to the
// repository's root.
const PatchFile = "deploy/cozystack/linstor.patch"

// Build lays the changed package out under dir and returns the chart's
// path. repo is the root of this checkout.
func Build(repo, dir string) (string, error) {
	pkg := filepath.Join(dir, Package)
	if err := os.CopyFS(pkg, os.DirFS(filepath.Join(repo, "deploy", "testdata", "cozystack-linstor"))); err != nil {
		return "", err
	}
	patch, err := filepath.Abs(filepath.Join(repo, PatchFile))
	if err != nil {
		return "", err
	}
	cmd := exec.Command("git", "apply", "--verbose", patch)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git apply %s: %v\n%s", PatchFile, err, out)
	}
	chart := filepath.Join(repo, "deploy", "chart", "csi-clone-sidecar")
	return pkg, os.CopyFS(filepath.Join(pkg, "charts", "csi-clone-sidecar"), os.DirFS(chart))
}
