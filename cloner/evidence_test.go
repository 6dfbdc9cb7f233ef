package cloner

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

func TestEvidenceBookJoinsRetriesSnapshotsAndExpansions(t *testing.T) {
	b := fleet.NewEvidenceBook(time.Minute)
	fail := createVolume("pvc-a", "cozy-public/tmp-pvc-u", "g", 6*clonertest.Gi, "", clonertest.T0)
	fail.Code, fail.Response.VolumeID = codes.DeadlineExceeded, ""
	b.Apply(fail)
	b.Apply(createVolume("pvc-a", "cozy-public/tmp-pvc-u", "g", 6*clonertest.Gi, "vol-a", clonertest.T0.Add(time.Minute)))
	b.Apply(expandVolume("vol-a", 20*clonertest.Gi, clonertest.T0.Add(2*time.Minute)))
	b.Apply(sidecar.Observation{Method: sidecar.MethodCreateSnapshot, Code: codes.OK, End: clonertest.T0,
		Request: sidecar.Request{SourceVolumeID: "g"}, Response: sidecar.Response{SnapshotID: "s1"}})
	ev := b.Volumes["vol-a"].Ev
	if ev.Attempts != 2 || !ev.FirstAttempt.Equal(clonertest.T0) || ev.SourceVolume != "g" {
		t.Fatalf("evidence %+v: want 2 attempts since the first (failed) one", ev)
	}
	if len(ev.Refusals) != 1 || ev.Refusals[0].Code != "DeadlineExceeded" || !ev.Refusals[0].At.Equal(clonertest.T0.Add(time.Second)) {
		t.Fatalf("refusals %+v: want the first attempt's DeadlineExceeded at its end", ev.Refusals)
	}
	if len(ev.Expansions) != 1 || ev.Expansions[0].Millis != 1000 {
		t.Fatalf("expansions %+v: want one that took 1000 ms", ev.Expansions)
	}
	if c, at := ev.FinalCapacity(); c != 20*clonertest.Gi || !at.Equal(clonertest.T0.Add(2*time.Minute+time.Second)) {
		t.Fatalf("final capacity %d at %v", c, at)
	}
	// The retry succeeded: the failed attempt's error is void, and the claim
	// is marked so that an error already written on it is removed.
	if _, kept := b.Errors["cozy-public/tmp-pvc-u"]; kept {
		t.Fatal("the failed attempt is still the driver error after a successful retry")
	}
	if at, ok := b.Cleared["cozy-public/tmp-pvc-u"]; !ok || !at.Equal(clonertest.T0.Add(time.Minute+time.Second)) {
		t.Fatalf("claim not marked cleared at the successful call's end: %v %v", at, ok)
	}
	if b.Snapshots["s1"].Source != "g" {
		t.Fatal("snapshot link lost")
	}
	b.Apply(sidecar.Observation{Method: sidecar.MethodDeleteVolume, Code: codes.OK, Request: sidecar.Request{VolumeID: "vol-a"}})
	if _, ok := b.Volumes["vol-a"]; ok {
		t.Fatal("a deleted volume's evidence is still pending")
	}
}

// A volume refused many times keeps the last eight refusals, each with its
// code, and counts every attempt.
func TestEvidenceKeepsTheLastRefusals(t *testing.T) {
	b := fleet.NewEvidenceBook(time.Hour)
	for i := range 11 {
		fail := createVolume("pvc-a", "cozy-public/tmp-pvc-u", "g", 6*clonertest.Gi, "", clonertest.T0.Add(time.Duration(i)*time.Minute))
		fail.Code = []codes.Code{codes.ResourceExhausted, codes.Unavailable}[i%2]
		b.Apply(fail)
	}
	b.Apply(createVolume("pvc-a", "cozy-public/tmp-pvc-u", "g", 6*clonertest.Gi, "vol-a", clonertest.T0.Add(time.Hour)))
	ev := b.Volumes["vol-a"].Ev
	if ev.Attempts != 12 || len(ev.Refusals) != 8 {
		t.Fatalf("%d attempts, refusals %+v: want 12 and the last 8", ev.Attempts, ev.Refusals)
	}
	for j, r := range ev.Refusals {
		i := j + 3
		want := []string{"ResourceExhausted", "Unavailable"}[i%2]
		if r.Code != want || !r.At.Equal(clonertest.T0.Add(time.Duration(i)*time.Minute+time.Second)) {
			t.Fatalf("refusal %d: %+v, want %s at the end of attempt %d", j, r, want, i)
		}
	}
}

func TestEvidenceWaitingTooLongExpiresAndIsCounted(t *testing.T) {
	b := fleet.NewEvidenceBook(time.Minute)
	b.Apply(createVolume("pvc-a", "ns/c", "", clonertest.Gi, "vol-a", clonertest.T0))
	b.Expire(clonertest.T0.Add(30 * time.Second))
	if len(b.Volumes) != 1 || b.Expired != 0 {
		t.Fatal("expired too early")
	}
	b.Expire(clonertest.T0.Add(2 * time.Minute))
	if len(b.Volumes) != 0 || b.Expired != 1 {
		t.Fatalf("volumes %d expired %d", len(b.Volumes), b.Expired)
	}
}

func TestTargetOfClaim(t *testing.T) {
	if uid, _ := fleet.TargetOfClaim("cozy-public/tmp-pvc-1234-abcd"); uid != types.UID("1234-abcd") {
		t.Fatalf("tmp-pvc: %q", uid)
	}
	if uid, ref := fleet.TargetOfClaim("tenant/disk-0"); uid != "" || ref.String() != "tenant/disk-0" {
		t.Fatalf("plain claim: %q %v", uid, ref)
	}
}

func TestMergeKeepsCreateFromEitherSideAndUnionsExpansions(t *testing.T) {
	onPV := fleet.VolumeEvidence{Expansions: []fleet.Expansion{{At: clonertest.T0, RequiredBytes: 10 * clonertest.Gi, Code: "OK"}}}
	seen := *clonertest.TapClone("g", 6*clonertest.Gi, 20*clonertest.Gi)
	onPV.Merge(&seen)
	if !onPV.CreateSeen() || onPV.SourceVolume != "g" || len(onPV.Expansions) != 2 {
		t.Fatalf("merged %+v", onPV)
	}
	onPV.Merge(&seen) // idempotent
	if len(onPV.Expansions) != 2 {
		t.Fatalf("merging twice duplicated expansions: %d", len(onPV.Expansions))
	}
}
