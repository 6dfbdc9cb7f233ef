package sidecar

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// A reply that is not gRPC is judged by its :status as grpc-go's client
// judges it: HTTPStatusConvTab, anything else Unknown. Over every status
// from 100 to 599, against a fixed table and against grpc-go's own table,
// read from the source of the module the build uses.
func TestHTTPStatusCodesOverEveryStatus(t *testing.T) {
	fixed := map[int]codes.Code{
		400: codes.Internal, 401: codes.Unauthenticated, 403: codes.PermissionDenied, 404: codes.Unimplemented,
		429: codes.Unavailable, 502: codes.Unavailable, 503: codes.Unavailable, 504: codes.Unavailable,
	}
	upstream := grpcGoHTTPStatusTable(t)
	if len(upstream) != len(fixed) {
		t.Errorf("grpc-go's HTTPStatusConvTab has %d entries, the fixed table %d: %v", len(upstream), len(fixed), upstream)
	}
	for status := 100; status < 600; status++ {
		want, ok := fixed[status]
		if !ok {
			want = codes.Unknown
		}
		if up, ok := upstream[status]; ok && up != want || !ok && want != codes.Unknown {
			t.Errorf("HTTP %d: grpc-go's table says %v (listed %v), the fixed table %v", status, up, ok, want)
		}
		if got := httpStatusCode(status); got != want {
			t.Errorf("HTTP %d: %v, want %v", status, got, want)
		}
	}
}

// grpcGoHTTPStatusTable parses HTTPStatusConvTab out of grpc-go's
// internal/transport/http_util.go, its keys named by net/http's constants.
func grpcGoHTTPStatusTable(t *testing.T) map[int]codes.Code {
	t.Helper()
	grpcDir, err := tools.ModuleSource("google.golang.org/grpc")
	if err != nil {
		t.Fatal(err)
	}
	statuses := httpStatusConstants(t)
	byName := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		byName[c.String()] = c
	}
	file := filepath.Join(grpcDir, "internal/transport/http_util.go")
	syntax, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	table := map[int]codes.Code{}
	ast.Inspect(syntax, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || len(spec.Names) != 1 || spec.Names[0].Name != "HTTPStatusConvTab" {
			return true
		}
		for _, e := range spec.Values[0].(*ast.CompositeLit).Elts {
			kv := e.(*ast.KeyValueExpr)
			status, ok := statuses[kv.Key.(*ast.SelectorExpr).Sel.Name]
			code, known := byName[kv.Value.(*ast.SelectorExpr).Sel.Name]
			if !ok || !known {
				t.Fatalf("%s: HTTPStatusConvTab entry %v: %v not read", file, kv.Key, kv.Value)
			}
			table[status] = code
		}
		return false
	})
	if len(table) == 0 {
		t.Fatalf("%s: no HTTPStatusConvTab", file)
	}
	return table
}

// httpStatusConstants reads net/http's Status constants from the toolchain's
// source.
func httpStatusConstants(t *testing.T) map[string]int {
	t.Helper()
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v (run the tests with the Go toolchain on PATH)", err)
	}
	file := filepath.Join(strings.TrimSpace(string(root)), "src/net/http/status.go")
	syntax, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]int{}
	ast.Inspect(syntax, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || len(spec.Names) != 1 || len(spec.Values) != 1 {
			return true
		}
		if lit, ok := spec.Values[0].(*ast.BasicLit); ok && lit.Kind == token.INT {
			v, err := strconv.Atoi(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			consts[spec.Names[0].Name] = v
		}
		return true
	})
	return consts
}
