package record

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// declaredConsts returns the string constants of this package's file whose
// names start with prefix.
func declaredConsts(t *testing.T, file, prefix string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return stringConsts(f, func(name string) bool { return strings.HasPrefix(name, prefix) })
}

// stringConsts collects a file's string-literal constants whose names keep
// says to keep.
func stringConsts(f *ast.File, keep func(string) bool) map[string]string {
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i >= len(vs.Values) || !keep(n.Name) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					out[n.Name] = v
				}
			}
		}
	}
	return out
}

var camelCase = regexp.MustCompile(`^[A-Z][A-Za-z]+$`)

// Every bad reason declared in reasons.go (the closed set of
// csi_clone_bad_disks' reason label): it has a CamelCase Event reason of its
// own and a fix, and reasonInfos holds nothing else.
func TestEveryBadReasonHasAnEventReasonAndAFix(t *testing.T) {
	declared := declaredConsts(t, "reasons.go", "Reason")
	if len(declared) != len(reasonInfos) {
		t.Errorf("reasons.go declares %d reasons, reasonInfos holds %d", len(declared), len(reasonInfos))
	}
	events := map[string]string{}
	for name, reason := range declared {
		t.Run(reason, func(t *testing.T) {
			info, ok := reasonInfos[reason]
			if !ok {
				t.Fatalf("%s has no reasonInfo", name)
			}
			if !camelCase.MatchString(EventReason(reason)) {
				t.Errorf("Event reason %q is not CamelCase", EventReason(reason))
			}
			if other, dup := events[info.Event]; dup {
				t.Errorf("Event reason %q is also %s's", info.Event, other)
			}
			events[info.Event] = reason
			if len(Fix(reason)) < 20 {
				t.Errorf("fix %q says nothing", Fix(reason))
			}
		})
	}
	if EventReason("no-such-reason") != "" || Fix("no-such-reason") != "" {
		t.Error("an undeclared reason has an Event reason or a fix")
	}
}

// badVerdict over every verdict: the three bad ones are reasons of their
// own name, the others none.
func TestBadVerdictOverEveryVerdict(t *testing.T) {
	verdicts := declaredConsts(t, "reasons.go", "Verdict")
	if len(verdicts) != 8 {
		t.Errorf("%d verdicts declared, the table knows 8: %v", len(verdicts), slices.Sorted(maps.Values(verdicts)))
	}
	bad := map[string]string{VerdictHostAssisted: ReasonHostAssisted, VerdictStuck: ReasonStuck, VerdictFailed: ReasonFailed}
	for _, v := range verdicts {
		if got := badVerdict(v); got != bad[v] {
			t.Errorf("badVerdict(%q) = %q, want %q", v, got, bad[v])
		}
		if r := badVerdict(v); r != "" && r != v {
			t.Errorf("bad verdict %q has reason %q: the label values must agree", v, r)
		}
	}
}

// cdiModule is CDI v1.65.0's source in the module cache, which the tools
// build (test/tools/mod/cdi) downloads.
func cdiModule(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "kubevirt.io", "containerized-data-importer@v1.65.0")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("CDI v1.65.0's source is not in the module cache (%v): run make tools, or "+
			"(cd test/tools/mod/cdi && go mod download kubevirt.io/containerized-data-importer)", err)
	}
	return dir
}

// cdiFallbacks reads what CDI v1.65 writes as a clone's fallback: every call
// of a function named fallbackToHostAssisted with a reason and a message
// constant (clone/planner.go Planner.fallbackToHostAssisted), and the
// Warning event the DataVolume controller's fallbackToHostAssisted emits
// (datavolume/clone-controller-base.go). It maps message to reason.
func cdiFallbacks(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	consts := map[string]string{}
	var files []*ast.File
	for _, dir := range dirs {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			maps.Copy(consts, stringConsts(f, func(string) bool { return true }))
			files = append(files, f)
		}
	}
	out := map[string]string{}
	pair := func(reason, message ast.Expr) {
		r, ok1 := reason.(*ast.Ident)
		m, ok2 := message.(*ast.Ident)
		if ok1 && ok2 && consts[r.Name] != "" && consts[m.Name] != "" {
			out[consts[m.Name]] = consts[r.Name]
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				switch {
				case ok && sel.Sel.Name == "fallbackToHostAssisted" && len(call.Args) == 4:
					pair(call.Args[2], call.Args[3])
				case ok && sel.Sel.Name == "Event" && fn.Name.Name == "fallbackToHostAssisted" && len(call.Args) == 4:
					pair(call.Args[2], call.Args[3])
				}
				return true
			})
		}
	}
	return out
}

// cdiFallbackEvents, the closed set of CDI's cloneFallbackReason messages
// and their event reasons, is exactly what CDI v1.65.0's source writes.
func TestCDIFallbackReasonsAreCDIs(t *testing.T) {
	mod := cdiModule(t)
	upstream := cdiFallbacks(t, filepath.Join(mod, "pkg/controller/clone"), filepath.Join(mod, "pkg/controller/datavolume"))
	if len(upstream) < 5 {
		t.Fatalf("found only %d fallbacks in CDI's source: %v (has its code moved?)", len(upstream), upstream)
	}
	for msg, reason := range upstream {
		if got, ok := fleet.CdiFallbackEvents[msg]; !ok || got != reason {
			t.Errorf("CDI falls back with %s: %q; cdiFallbackEvents has %q", reason, msg, got)
		}
		if want := reason + ": " + msg; fleet.FallbackText(msg) != want {
			t.Errorf("fallbackText(%q) = %q, want %q", msg, fleet.FallbackText(msg), want)
		}
	}
	for msg, reason := range fleet.CdiFallbackEvents {
		if _, ok := upstream[msg]; !ok {
			t.Errorf("cdiFallbackEvents has %s: %q, which CDI v1.65.0 never writes", reason, msg)
		}
	}
}
