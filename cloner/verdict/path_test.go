package verdict_test

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// sidecarFinalCodes reads the kubernetes-csi sidecars' answer for every gRPC
// error code (testdata/kubernetes-csi-final-codes.txt, held against
// external-resizer's IsFinalError by test/tools/mod/resizer/finalcodes).
func sidecarFinalCodes(t *testing.T) map[codes.Code]bool {
	t.Helper()
	f, err := os.Open("testdata/kubernetes-csi-final-codes.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byName := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		byName[c.String()] = c
	}
	out := map[codes.Code]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		c, ok := byName[fields[0]]
		if len(fields) != 2 || !ok || (fields[1] != "final" && fields[1] != "retried") {
			t.Fatalf("malformed line %q", sc.Text())
		}
		out[c] = fields[1] == "final"
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) != int(codes.Unauthenticated) {
		t.Fatalf("the table has %d error codes, want all %d", len(out), codes.Unauthenticated)
	}
	return out
}

// TestDefiniteCodeIsTheSidecarsFinalError: over all 17 gRPC codes, a code
// is definite exactly when the kubernetes-csi sidecars call it final; OK
// (and no code) is no error at all.
func TestDefiniteCodeIsTheSidecarsFinalError(t *testing.T) {
	final := sidecarFinalCodes(t)
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		t.Run(c.String(), func(t *testing.T) {
			if got, want := verdict.DefiniteCode(c.String()), final[c]; got != want {
				t.Errorf("definiteCode(%s) = %v, the sidecars' IsFinalError says final=%v", c, got, want)
			}
		})
	}
	if verdict.DefiniteCode("") {
		t.Error("no code is definite")
	}
}

// TestDriverCodesTheSidecarsRetryWaitForStuckAfter: a clone whose
// CreateVolume, or whose ControllerExpandVolume, the driver answered with a
// code the sidecars retry (Canceled, DeadlineExceeded, Unavailable,
// ResourceExhausted, Aborted) stays pending, with the error recorded, until
// --stuck-after, with no bad reason (no Warning) before then; a final code
// makes it stuck at once. Every error code.
func TestDriverCodesTheSidecarsRetryWaitForStuckAfter(t *testing.T) {
	final := sidecarFinalCodes(t)
	cfg := clonertest.TestConfig()
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		for _, method := range []string{verdict.MethodCreateVolume, verdict.MethodExpand} {
			t.Run(c.String()+"/"+method, func(t *testing.T) {
				w := driverErrorWorld(c.String(), method)
				soon, _ := w.JudgeAll(t, cfg, clonertest.T0.Add(time.Minute))
				r := soon["d"]
				if !strings.Contains(r.DriverError, c.String()) {
					t.Fatalf("driver error %q does not carry %s", r.DriverError, c)
				}
				if want := map[bool]string{true: record.VerdictStuck, false: record.VerdictPending}[final[c]]; r.Verdict != want {
					t.Fatalf("a minute after %s %s (final=%v): %s %q, want %s", method, c, final[c], r.Verdict, r.Message, want)
				}
				if final[c] {
					return
				}
				if len(r.BadReasons()) != 0 {
					t.Fatalf("a minute after %s %s, which the sidecars retry: bad reasons %v (each a Warning)", method, c, r.BadReasons())
				}
				late, _ := w.JudgeAll(t, cfg, clonertest.T0.Add(cfg.StuckAfter))
				if r := late["d"]; r.Verdict != record.VerdictStuck || !strings.Contains(r.Message, r.DriverError) {
					t.Fatalf("after --stuck-after: %s %q", r.Verdict, r.Message)
				}
			})
		}
	}
}

// driverErrorWorld is one clone disk "d" that the driver answered with code:
// its CreateVolume (the provisioner's error on the claim, no volume yet), or
// the expansion of its cloned volume.
func driverErrorWorld(code, method string) *clonertest.World {
	w := &clonertest.World{}
	g, gpv := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	target := w.PendingTarget(dv)
	if method == verdict.MethodCreateVolume {
		target.Annotations[fleet.AnnDriverError] = record.MustJSON(fleet.DriverError{Method: method, Code: code, Message: "driver says no",
			Claim: "cozy-public/tmp-pvc-" + string(target.UID), First: clonertest.T0, Last: clonertest.T0.Add(time.Second), Attempts: 3})
		return w
	}
	ev := clonertest.TapClone(gpv.Spec.CSI.VolumeHandle, 6*clonertest.Gi, 6*clonertest.Gi)
	ev.Expansions = []fleet.Expansion{{At: clonertest.T0, RequiredBytes: 20 * clonertest.Gi, Code: code, Message: "driver says no"}}
	w.TmpClaim(target, ev)
	return w
}
