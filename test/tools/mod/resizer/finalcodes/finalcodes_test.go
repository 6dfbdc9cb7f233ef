// Package finalcodes holds the real external-resizer's rule of which driver
// errors are final against the table the sidecar's verdicts follow
// (cloner/verdict/testdata/kubernetes-csi-final-codes.txt, read by cloner/verdict's
// definiteCode test). It lives in the resizer's pinned module so that it
// calls exactly the code the pinned csi-resizer runs.
package finalcodes

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubernetes-csi/external-resizer/v2/pkg/util"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var update = flag.Bool("update", false, "rewrite the table from the real IsFinalError")

// table is the sidecar's table, five directories up in the repository.
var table = filepath.Join("..", "..", "..", "..", "..", "cloner", "verdict", "testdata", "kubernetes-csi-final-codes.txt")

// TestTableIsTheResizersIsFinalError: every gRPC error code (1..16) has one
// line in the table, and its word is what util.IsFinalError answers for an
// error of that code.
func TestTableIsTheResizersIsFinalError(t *testing.T) {
	raw, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	var header []string
	got := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "#") {
			header = append(header, line)
			continue
		}
		if f := strings.Fields(line); len(f) == 2 {
			got[f[0]] = f[1]
		} else if len(f) != 0 {
			t.Fatalf("%s: malformed line %q", table, line)
		}
	}
	var want strings.Builder
	for _, h := range header {
		want.WriteString(h + "\n")
	}
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		word := "retried"
		if util.IsFinalError(status.Error(c, "driver error")) {
			word = "final"
		}
		fmt.Fprintf(&want, "%s %s\n", c, word)
		if got[c.String()] != word {
			t.Errorf("%s: table says %q, external-resizer's IsFinalError says %q", c, got[c.String()], word)
		}
		delete(got, c.String())
	}
	for name := range got {
		t.Errorf("table has %q, which is no gRPC error code", name)
	}
	if *update {
		if err := os.WriteFile(table, []byte(want.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
