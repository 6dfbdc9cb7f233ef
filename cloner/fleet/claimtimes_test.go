package fleet

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func tmpClaim(name string, made time.Time) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cozy-public", CreationTimestamp: metav1.NewTime(made)}}
}

// A tmp-pvc's creation is kept by its target's UID, other claims are not
// kept, and what is older than ClaimTimesKept before the newest goes.
func TestClaimTimesKeepsTmpPVCsOfTheLastHour(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	c := NewClaimTimes()
	c.Note(tmpClaim(CdiTmpPVCPrefix+"a", t0))
	c.Note(tmpClaim("talos-worker-x", t0))
	c.Note(tmpClaim(CdiTmpPVCPrefix, t0))
	c.Note(tmpClaim(CdiTmpPVCPrefix+"b", t0.Add(ClaimTimesKept/2)))
	if got := c.Of("a"); !got.Equal(t0) {
		t.Fatalf("Of(a) = %v, want %v", got, t0)
	}
	if c.Len() != 2 {
		t.Fatalf("%d kept, want the two tmp-pvcs", c.Len())
	}
	c.Note(tmpClaim(CdiTmpPVCPrefix+"c", t0.Add(ClaimTimesKept+time.Second)))
	if got := c.Of("a"); !got.IsZero() {
		t.Fatalf("Of(a) = %v after an hour and a second, want it dropped", got)
	}
	if got := c.Of("b"); got.IsZero() {
		t.Fatal("b dropped within the hour")
	}
	var none *ClaimTimes
	if !none.Of("a").IsZero() {
		t.Fatal("a nil ClaimTimes remembers something")
	}
}
