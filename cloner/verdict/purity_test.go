package verdict

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRulesArePure holds the package to what its doc comment promises:
// the rules read the facts they are given and nothing else. No file of it
// imports client-go (no client, no informer, no cache), starts a
// goroutine, or reads the wall clock; the time is passed in.
func TestRulesArePure(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "k8s.io/client-go") {
				t.Errorf("%s imports %s: the rules judge facts, they do not fetch them", fset.Position(imp.Pos()), path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s starts a goroutine", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" {
					switch n.Sel.Name {
					case "Now", "Since", "Until", "After", "Tick", "NewTimer", "NewTicker", "Sleep":
						t.Errorf("%s reads the wall clock (time.%s); the time is passed in", fset.Position(n.Pos()), n.Sel.Name)
					}
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files found: the test runs in the package's directory")
	}
}
