package cloner

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

func TestEvidenceBookJoinsRetriesSnapshotsAndExpansions(t *testing.T) {
	b := newEvidenceBook(time.Minute)
	fail := createVolume("pvc-a", "cozy-public/tmp-pvc-u", "g", 6*gi, "", t0)
	fail.Code, fail.Response.VolumeID = codes.DeadlineExceeded, ""
	b.apply(fail)
	b.apply(createVolume("pvc-a", "cozy-public/tmp-pvc-u", "g", 6*gi, "vol-a", t0.Add(time.Minute)))
	b.apply(expandVolume("vol-a", 20*gi, t0.Add(2*time.Minute)))
	b.apply(sidecar.Observation{Method: sidecar.MethodCreateSnapshot, Code: codes.OK, End: t0,
		Request: sidecar.Request{SourceVolumeID: "g"}, Response: sidecar.Response{SnapshotID: "s1"}})
	ev := b.volumes["vol-a"].ev
	if ev.Attempts != 2 || !ev.FirstAttempt.Equal(t0) || ev.SourceVolume != "g" {
		t.Fatalf("evidence %+v: want 2 attempts since the first (failed) one", ev)
	}
	if c, at := ev.finalCapacity(); c != 20*gi || !at.Equal(t0.Add(2*time.Minute+time.Second)) {
		t.Fatalf("final capacity %d at %v", c, at)
	}
	// The retry succeeded: the failed attempt's error is void, and the claim
	// is marked so that an error already written on it is removed.
	if _, kept := b.errors["cozy-public/tmp-pvc-u"]; kept {
		t.Fatal("the failed attempt is still the driver error after a successful retry")
	}
	if at, ok := b.cleared["cozy-public/tmp-pvc-u"]; !ok || !at.Equal(t0.Add(time.Minute+time.Second)) {
		t.Fatalf("claim not marked cleared at the successful call's end: %v %v", at, ok)
	}
	if b.snapshots["s1"].source != "g" {
		t.Fatal("snapshot link lost")
	}
	b.apply(sidecar.Observation{Method: sidecar.MethodDeleteVolume, Code: codes.OK, Request: sidecar.Request{VolumeID: "vol-a"}})
	if _, ok := b.volumes["vol-a"]; ok {
		t.Fatal("a deleted volume's evidence is still pending")
	}
}

func TestEvidenceWaitingTooLongExpiresAndIsCounted(t *testing.T) {
	b := newEvidenceBook(time.Minute)
	b.apply(createVolume("pvc-a", "ns/c", "", gi, "vol-a", t0))
	b.expire(t0.Add(30 * time.Second))
	if len(b.volumes) != 1 || b.expired != 0 {
		t.Fatal("expired too early")
	}
	b.expire(t0.Add(2 * time.Minute))
	if len(b.volumes) != 0 || b.expired != 1 {
		t.Fatalf("volumes %d expired %d", len(b.volumes), b.expired)
	}
}

func TestTargetOfClaim(t *testing.T) {
	if uid, _ := targetOfClaim("cozy-public/tmp-pvc-1234-abcd"); uid != types.UID("1234-abcd") {
		t.Fatalf("tmp-pvc: %q", uid)
	}
	if uid, ref := targetOfClaim("tenant/disk-0"); uid != "" || ref.String() != "tenant/disk-0" {
		t.Fatalf("plain claim: %q %v", uid, ref)
	}
}

func TestMergeKeepsCreateFromEitherSideAndUnionsExpansions(t *testing.T) {
	onPV := VolumeEvidence{Expansions: []Expansion{{At: t0, RequiredBytes: 10 * gi, Code: "OK"}}}
	seen := *tapClone("g", 6*gi, 20*gi)
	onPV.merge(&seen)
	if !onPV.created() || onPV.SourceVolume != "g" || len(onPV.Expansions) != 2 {
		t.Fatalf("merged %+v", onPV)
	}
	onPV.merge(&seen) // idempotent
	if len(onPV.Expansions) != 2 {
		t.Fatalf("merging twice duplicated expansions: %d", len(onPV.Expansions))
	}
}
