// Package cozychart builds a stand-in of Cozystack's linstor package
// (deploy/testdata/cozystack-linstor) with the change docs/cozystack.md
// describes applied to it: the page's ```diff block through git apply, its
// "(append)" YAML blocks appended to the files they name, and this
// checkout's deploy/chart/csi-clone-sidecar vendored into charts/. deploy/'s
// tests render it with Helm; the e2e tests apply what it renders.
package cozychart

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

var fenced = regexp.MustCompile("(?s)```(yaml|diff)\n(.*?)```")

// Build lays the changed stand-in out under dir and returns the chart's
// path. repo is the root of this checkout.
func Build(repo, dir string) (string, error) {
	pkg := filepath.Join(dir, Package)
	if err := os.CopyFS(pkg, os.DirFS(filepath.Join(repo, "deploy", "testdata", "cozystack-linstor"))); err != nil {
		return "", err
	}
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "cozystack.md"))
	if err != nil {
		return "", err
	}
	var diffs, appends int
	for _, m := range fenced.FindAllStringSubmatch(string(doc), -1) {
		first, rest, _ := strings.Cut(m[2], "\n")
		target, isAppend := strings.CutSuffix(strings.TrimPrefix(first, "# "), " (append)")
		switch {
		case m[1] == "diff":
			err = applyDiff(dir, m[2])
			diffs++
		case isAppend && strings.HasPrefix(target, Package+"/"):
			err = appendTo(filepath.Join(dir, target), rest)
			appends++
		}
		if err != nil {
			return "", err
		}
	}
	if diffs != 1 || appends != 2 {
		return "", fmt.Errorf("docs/cozystack.md has %d diff and %d append blocks, want 1 and 2", diffs, appends)
	}
	chart := filepath.Join(repo, "deploy", "chart", "csi-clone-sidecar")
	return pkg, os.CopyFS(filepath.Join(pkg, "charts", "csi-clone-sidecar"), os.DirFS(chart))
}

func applyDiff(dir, diff string) error {
	p := filepath.Join(dir, "change.diff")
	if err := os.WriteFile(p, []byte(diff), 0o644); err != nil {
		return err
	}
	cmd := exec.Command("git", "apply", "--verbose", p)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git apply of docs/cozystack.md's diff: %v\n%s", err, out)
	}
	return nil
}

func appendTo(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
