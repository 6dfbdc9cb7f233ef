package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// The runbook's kubectl commands, run as printed against the stack of
// TestFailureVerdicts with the placeholders filled in from its scenarios:
// each must show what the runbook says it shows. A kubectl command added to
// one of the checked sections without a check here fails the test.

// runbookSections are the parts of docs/runbook.md whose commands are
// checked: the introduction and the sections of the failures' alerts.
var runbookSections = []string{"", "CSICloneStuck", "CSICloneFailed", "CSICloneResizeFailed"}

// runbookCheck is what one command, recognised by a piece of it, must show
// for the disk it is run about.
type runbookCheck struct {
	match string // a piece of the command that identifies it
	disk  failureCase
	shows []string // every one must be in the output
	// skip says why the command cannot run on the loopback stack.
	skip string
}

func runbookChecks() []runbookCheck {
	const noLinstor = "the loopback stack has no LINSTOR and no linstor-csi-controller Deployment: its CSI containers run as plain processes"
	return []runbookCheck{
		{match: "get pvc -o custom-columns='PVC:.metadata.name,POOL:", disk: tokenCase,
			shows: []string{tokenCase.name, tokenCase.pool, record.VerdictFailed}},
		{match: "get events --field-selector type=Warning,source=csi-clone-sidecar", disk: tokenCase,
			shows: []string{"CloneFailed", "invalid token", "ResizeFailed", "OutOfRange"}},
		{match: "clone-evidence}'", disk: resizeCase,
			shows: []string{`"cloneClaim":"cozy-public/tmp-pvc-`, `"driverError":"ControllerExpandVolume OutOfRange: pool tight has`}},
		{match: "-o jsonpath='{.metadata.uid}'", disk: resizeCase, shows: []string{"-"}},
		// No CreateVolume of these disks failed: the column is empty, the
		// expansion's error is in the evidence instead.
		{match: "ERROR:.metadata.annotations.csi-clone-sidecar", disk: resizeCase, shows: []string{"ERROR", resizeCase.name + " ", "<none>"}},
		{match: "-n cozy-public get events --field-selector involvedObject.name=tmp-pvc-<uid>", disk: resizeCase,
			shows: []string{"VolumeResizeFailed", "OutOfRange", "pool tight has"}},
		{match: "get dv <dv> -o jsonpath='{range .status.conditions[*]}", disk: smallCase,
			shows: []string{"Bound\tCloneValidationFailed\tThe clone doesn't meet the validation requirements"}},
		{match: "cdi\\.kubevirt\\.io/cloneError}'", disk: tokenCase, shows: []string{"invalid token"}},
		{match: "-n cozy-public get resourcequota", disk: quotaCase, shows: []string{goldenQuota}},
		{match: "logs deploy/linstor-csi-controller -c csi-provisioner", skip: noLinstor},
		{match: "exec deploy/linstor-controller -- linstor storage-pool list", skip: noLinstor},
	}
}

func checkRunbook(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	kubectl, err := tools.Bin("kubectl") // the pinned one `make tools` built, not whatever is on PATH
	if err != nil {
		t.Fatalf("kubectl: %v (run make tools)", err)
	}
	checks := runbookChecks()
	used := map[string]bool{}
	for _, cmd := range runbookCommands(t) {
		var check *runbookCheck
		for i := range checks {
			if strings.Contains(cmd, checks[i].match) {
				check = &checks[i]
				break
			}
		}
		if check == nil {
			t.Errorf("runbook command has no check here: %s", cmd)
			continue
		}
		used[check.match] = true
		if check.skip != "" {
			t.Logf("not run (%s): %s", check.skip, cmd)
			continue
		}
		line := fillPlaceholders(t, ctx, c, cmd, check.disk)
		out, err := runKubectl(ctx, c, kubectl, line)
		if err != nil {
			t.Errorf("%s\nfailed: %v\n%s", line, err, out)
			continue
		}
		for _, want := range check.shows {
			if !strings.Contains(out, want) {
				t.Errorf("%s\ndoes not show %q:\n%s", line, want, out)
			}
		}
	}
	for _, ch := range checks {
		if !used[ch.match] {
			t.Errorf("check %q matches no command of the runbook any more", ch.match)
		}
	}
}

// runKubectl runs one runbook line through sh, as an operator pastes it,
// with the stack's kubeconfig and the real kubectl.
func runKubectl(ctx context.Context, c *cluster.Cluster, kubectl, line string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", strings.Replace(line, "kubectl", kubectl, 1))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fillPlaceholders puts the scenario disk's names into a runbook command.
func fillPlaceholders(t *testing.T, ctx context.Context, c *cluster.Cluster, cmd string, f failureCase) string {
	t.Helper()
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(verdictTenant).Get(ctx, f.name, metav1.GetOptions{})
	uid := "no-claim"
	if err == nil {
		uid = string(pvc.UID)
	}
	return strings.NewReplacer("<namespace>", verdictTenant, "<pvc>", f.name, "<dv>", f.name, "<uid>", uid).Replace(cmd)
}

var (
	inlineKubectl = regexp.MustCompile("`(kubectl [^`]+)`")
	heading       = regexp.MustCompile(`^## (\S+)`)
)

// runbookCommands extracts the kubectl commands of the checked sections:
// lines of ```sh blocks and inline code spans.
func runbookCommands(t *testing.T) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	for _, s := range runbookSections {
		checked[s] = true
	}
	var out []string
	seen := map[string]bool{}
	section, inBlock := "", false
	for _, line := range strings.Split(string(raw), "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			section = m[1]
		}
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if !checked[section] {
			continue
		}
		var cmds []string
		if inBlock && strings.HasPrefix(line, "kubectl ") {
			cmds = append(cmds, line)
		} else if !inBlock {
			for _, m := range inlineKubectl.FindAllStringSubmatch(line, -1) {
				cmds = append(cmds, m[1])
			}
		}
		for _, cmd := range cmds {
			if !seen[cmd] {
				seen[cmd] = true
				out = append(out, cmd)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no kubectl command found in docs/runbook.md")
	}
	return out
}
