package cloner

import (
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
)

func digestTestRecord() record.Record {
	return record.Record{Verdict: record.VerdictPending, Source: record.SourceCSITap, Message: "clone in progress (phase CSICloneInProgress)",
		Golden: "cozy-public/" + clonertest.GoldenName(clonertest.TestSID, clonertest.TestVer), SchematicID: clonertest.TestSID, Version: clonertest.TestVer, Pool: "md0",
		Volume: "pvc-1", GoldenVolume: "pvc-g", ContentSource: "volume:pvc-g", Class: clonertest.TestClass, GoldenClass: clonertest.TestClass,
		DiskBytes: 20 * clonertest.Gi, GoldenBytes: 6 * clonertest.Gi, CapacityBytes: 6 * clonertest.Gi, CloneClaim: "cozy-public/tmp-pvc-1",
		Findings: []record.Finding{{Reason: "class-mismatch", Message: "m"}}, Since: clonertest.T0,
		Predicted: "csi-clone", PredictedReason: "storage-profile"}
}

func claimWithRecord(raw string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "d0",
		Annotations: map[string]string{fleet.AnnCloneVerdict: record.VerdictPending, fleet.AnnCloneEvidence: raw, "other": "dropped"}}}
}

func cached(t *testing.T, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	t.Helper()
	out, err := record.CacheClaim(pvc)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*corev1.PersistentVolumeClaim)
}

// TestCachedRecordReadsAsTheRecord: the cache keeps a digest of the
// record, smaller than its JSON, that reads as the JSON itself would, twice
// transformed or once.
func TestCachedRecordReadsAsTheRecord(t *testing.T) {
	rec := digestTestRecord()
	raw := record.MustJSON(rec)
	fromAPI, err := record.PersistedRecord(claimWithRecord(raw))
	if err != nil || fromAPI == nil {
		t.Fatalf("reading the record's JSON: %v, %v", fromAPI, err)
	}
	pvc := cached(t, claimWithRecord(raw))
	kept := pvc.Annotations[fleet.AnnCloneEvidence]
	if !strings.HasPrefix(kept, record.DigestPrefix) || len(kept) >= len(raw)/2 {
		t.Fatalf("the cache keeps %d bytes of a %d-byte record: %q", len(kept), len(raw), kept)
	}
	if again := cached(t, pvc).Annotations[fleet.AnnCloneEvidence]; again != kept {
		t.Fatalf("a second transform changed the digest: %q, then %q", kept, again)
	}
	fromCache, err := record.PersistedRecord(pvc)
	if err != nil || !reflect.DeepEqual(fromCache, fromAPI) {
		t.Fatalf("cached digest %+v (%v), the JSON's %+v", fromCache, err, fromAPI)
	}
	want := record.RecordDigest{Verdict: rec.Verdict, Since: clonertest.T0, Predicted: "csi-clone", PredictedReason: "storage-profile",
		BadReasons: []string{"class-mismatch"}, Same: fromCache.Same, ProgressFree: fromCache.ProgressFree}
	if !reflect.DeepEqual(*fromCache, want) || fromCache.Same == 0 || fromCache.Same == fromCache.ProgressFree {
		t.Fatalf("digest %+v, want %+v with two distinct hashes", *fromCache, want)
	}
}

// TestDigestTellsChangesApart: any change of what a record says is seen,
// Since is not, and a change of progress alone is told from the others.
func TestDigestTellsChangesApart(t *testing.T) {
	rec := digestTestRecord()
	old, err := record.PersistedRecord(cached(t, claimWithRecord(record.MustJSON(rec))))
	if err != nil {
		t.Fatal(err)
	}
	restamped := rec
	restamped.Since = clonertest.T0.Add(time.Hour)
	if !old.SameAs(record.DigestRecord(&restamped)) {
		t.Fatal("a record differing only in Since reads as changed")
	}
	for what, change := range map[string]func(r *record.Record){
		"the message":          func(r *record.Record) { r.Message = "clone in progress (phase Succeeded)" },
		"the volume":           func(r *record.Record) { r.Volume = "pvc-2" },
		"the capacity":         func(r *record.Record) { r.CapacityBytes = 20 * clonertest.Gi },
		"the claim cloned on":  func(r *record.Record) { r.CloneClaim = "" },
		"the verdict":          func(r *record.Record) { r.Verdict = record.VerdictCSIClone },
		"a finding's message":  func(r *record.Record) { r.Findings = []record.Finding{{Reason: "class-mismatch", Message: "n"}} },
		"the driver error":     func(r *record.Record) { r.DriverError = "CreateVolume Internal: x" },
		"the prediction":       func(r *record.Record) { r.Predicted = "host-assisted" },
		"the fallback reason":  func(r *record.Record) { r.FallbackReason = "NoVolumeSnapshotClass" },
		"the golden's volume":  func(r *record.Record) { r.GoldenVolume = "pvc-h" },
		"the clone's duration": func(r *record.Record) { r.DurationSeconds = 3 },
	} {
		changed := rec
		change(&changed)
		if old.SameAs(record.DigestRecord(&changed)) {
			t.Errorf("a change of %s reads as the same record", what)
		}
		progress := what == "the message" || what == "the volume" || what == "the capacity" || what == "the claim cloned on"
		if got := publish.ProgressOnly(record.DigestRecord(&changed), old); got != progress {
			t.Errorf("a change of %s: progressOnly = %v, want %v", what, got, progress)
		}
	}
	var none *record.RecordDigest
	if none.SameAs(record.DigestRecord(&rec)) || publish.ProgressOnly(record.DigestRecord(&rec), none) {
		t.Fatal("no persisted record reads as the same")
	}
}

// TestMalformedRecordStaysMalformedInTheCache: an unreadable record is an
// error read from the cache as from the API object, with the same text.
func TestMalformedRecordStaysMalformedInTheCache(t *testing.T) {
	_, fromAPI := record.PersistedRecord(claimWithRecord("{not json"))
	_, fromCache := record.PersistedRecord(cached(t, claimWithRecord("{not json")))
	if fromAPI == nil || fromCache == nil || fromAPI.Error() != fromCache.Error() ||
		!strings.Contains(fromAPI.Error(), fleet.AnnCloneEvidence) {
		t.Fatalf("errors: from the API object %v, from the cache %v", fromAPI, fromCache)
	}
	if d, err := record.PersistedRecord(cached(t, claimWithRecord(""))); d != nil || err != nil {
		t.Fatalf("an empty record read as %+v, %v", d, err)
	}
}

// TestAnUnchangedRecordReusesTheCachedDigest: a claim update that leaves
// the record as it was keeps the cached object's digest string itself (no
// decode, no new string); a changed record gets a new digest, and a digest
// cached from other JSON is never taken for the new one.
func TestAnUnchangedRecordReusesTheCachedDigest(t *testing.T) {
	rec := digestTestRecord()
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	transform := record.CacheClaimFrom(store.GetByKey)
	cacheIt := func(raw string) string {
		t.Helper()
		out, err := transform(claimWithRecord(raw))
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Update(out); err != nil {
			t.Fatal(err)
		}
		return out.(*corev1.PersistentVolumeClaim).Annotations[fleet.AnnCloneEvidence]
	}
	first := cacheIt(record.MustJSON(rec))
	again := cacheIt(record.MustJSON(rec))
	if unsafe.StringData(again) != unsafe.StringData(first) {
		t.Error("an unchanged record was digested again instead of reusing the cached digest")
	}
	rec.Message = "clone in progress (phase Succeeded)"
	changed := cacheIt(record.MustJSON(rec))
	if changed == first {
		t.Fatal("a changed record kept the old digest")
	}
	fresh, err := record.PersistedRecord(cached(t, claimWithRecord(record.MustJSON(rec))))
	if err != nil {
		t.Fatal(err)
	}
	got, err := record.PersistedRecord(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Annotations: map[string]string{fleet.AnnCloneEvidence: changed}}})
	if err != nil || !reflect.DeepEqual(got, fresh) {
		t.Fatalf("the changed record's digest reads %+v (%v), want %+v", got, err, fresh)
	}
	// A store holding something else under the claim's key is ignored.
	if err := store.Update(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "d0",
		Annotations: map[string]string{fleet.AnnCloneEvidence: record.DigestPrefix + "0:{}"}}}); err != nil {
		t.Fatal(err)
	}
	if d := cacheIt(record.MustJSON(rec)); d != changed {
		t.Fatalf("digest %q after a foreign cached digest, want %q", d, changed)
	}
}
