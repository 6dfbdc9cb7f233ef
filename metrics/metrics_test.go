package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// Every abandon reason is exported at zero before it first happens, and
// counts from there.
func TestAbandonReasonsStartAtZero(t *testing.T) {
	m := New()
	m.ConnectionAbandoned(sidecar.AbandonFraming)
	var want strings.Builder
	want.WriteString("# HELP csi_clone_tap_connections_abandoned_total Relayed CSI connections the tap stopped following (the relay went on untapped), by reason.\n")
	want.WriteString("# TYPE csi_clone_tap_connections_abandoned_total counter\n")
	for _, r := range []string{"backlog", "framing", "not-http2", "oversized", "panic"} {
		v := "0"
		if r == sidecar.AbandonFraming {
			v = "1"
		}
		want.WriteString(`csi_clone_tap_connections_abandoned_total{reason="` + r + `"} ` + v + "\n")
	}
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want.String()), "csi_clone_tap_connections_abandoned_total"); err != nil {
		t.Fatal(err)
	}
}
