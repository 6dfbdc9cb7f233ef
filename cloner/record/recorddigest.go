package record

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// What the PVC cache keeps of a disk's persisted record. The record's JSON
// (AnnCloneEvidence, 0.5-1 KB) is the largest string unique to each disk in
// the caches, and the verdict engine reads of it only whether a new record
// says the same, whether it differs only in progress, when its verdict was
// first decided, the prediction first made and the bad reasons already
// warned of. The PVC transform replaces the JSON by this digest (about 200
// bytes); the API object keeps the whole record, for `report` and people.

// digestPrefix marks a cached digest; a record's JSON cannot start with it.
const DigestPrefix = "digest:"

// recordDigest is what the verdict engine reads of a persisted record.
type RecordDigest struct {
	Verdict         string    `json:"v,omitempty"`
	Since           time.Time `json:"s,omitzero"`
	Predicted       string    `json:"p,omitempty"`
	PredictedReason string    `json:"pr,omitempty"`
	BadReasons      []string  `json:"b,omitempty"`
	// Same hashes the record without Since (sameAs), ProgressFree without
	// what only follows a clone's progress too (progressOnly).
	Same         uint64 `json:"h,omitempty"`
	ProgressFree uint64 `json:"g,omitempty"`
	// Claimed is the timeline's: the one point whose object (CDI's
	// tmp-pvc) is deleted once the disk is made, so a later judgement
	// keeps it from here.
	Claimed time.Time `json:"c,omitzero"`
	// Err is why the record could not be read; the rest is then empty.
	Err string `json:"e,omitempty"`
}

// digestRecord digests a record.
func DigestRecord(r *Record) *RecordDigest {
	unstamped := *r
	unstamped.Since = time.Time{}
	return &RecordDigest{Verdict: r.Verdict, Since: r.Since, Predicted: r.Predicted, PredictedReason: r.PredictedReason,
		BadReasons: r.BadReasons(), Same: hashJSON(unstamped), ProgressFree: hashJSON(withoutProgress(unstamped)),
		Claimed: r.Timeline.Claimed}
}

// hashJSON hashes v's JSON as it is encoded, never holding it: a record is
// hashed twice per judgement, thousands of times a second in a full pass.
func hashJSON(v any) uint64 {
	h := fnv.New64a()
	if err := json.NewEncoder(h).Encode(v); err != nil {
		panic(err) // our own types: cannot happen
	}
	return h.Sum64()
}

// sameAs reports whether two digested records say the same, Since aside:
// an unchanged verdict is never rewritten.
func (d *RecordDigest) SameAs(o *RecordDigest) bool {
	return d != nil && o != nil && d.Same == o.Same
}

// digestAnnotation is the PVC transform's replacement for a record's JSON:
// the digest prefix, the hash of the JSON it was made from, and the
// digest's own JSON. previous is the digest cached for the claim's last
// version: when it was made from the same JSON it is reused as it is.
func digestAnnotation(raw, previous string) string {
	if raw == "" || strings.HasPrefix(raw, DigestPrefix) {
		return raw // none (as absent), or already digested (a watch-list's items are passed twice)
	}
	h := fnv.New64a()
	h.Write([]byte(raw))
	source := DigestPrefix + strconv.FormatUint(h.Sum64(), 16) + ":"
	if strings.HasPrefix(previous, source) {
		return previous
	}
	d, err := digestJSON(raw)
	if err != nil {
		d = &RecordDigest{Err: err.Error()}
	}
	return source + MustJSON(d)
}

func digestJSON(raw string) (*RecordDigest, error) {
	var r Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", fleet.AnnCloneEvidence, err)
	}
	return DigestRecord(&r), nil
}

// persistedRecord reads the record persisted on a worker PVC, from the
// cache's digest or, on an object not from the cache, its JSON. nil, nil:
// there is none.
func PersistedRecord(pvc *corev1.PersistentVolumeClaim) (*RecordDigest, error) {
	if pvc == nil {
		return nil, nil
	}
	raw := pvc.Annotations[fleet.AnnCloneEvidence]
	cached, ok := strings.CutPrefix(raw, DigestPrefix)
	switch {
	case raw == "":
		return nil, nil
	case !ok:
		return digestJSON(raw)
	}
	_, cached, _ = strings.Cut(cached, ":") // the source JSON's hash
	var d RecordDigest
	if err := json.Unmarshal([]byte(cached), &d); err != nil {
		return nil, fmt.Errorf("cached digest of annotation %s: %w", fleet.AnnCloneEvidence, err)
	}
	if d.Err != "" {
		return nil, fmt.Errorf("%s", d.Err)
	}
	return &d, nil
}

// cacheClaim is the PVC transform without a store to reuse digests from.
var CacheClaim = CacheClaimFrom(nil)

// cacheClaimFrom is the PVC informer's transform; cached looks up the
// claim's object already in the informer's store (nil: none). A verdict
// record is kept as its digest (recorddigest.go). Most PVC updates leave the
// record as it was (kube-controller-manager rewrites a claim's status after
// each verdict patch): those reuse the cached object's digest instead of
// decoding the record and encoding its digest again, work that falls on the
// watch's reader and, in a burst of verdict writes, let it fall behind.
func CacheClaimFrom(cached func(key string) (any, bool, error)) cache.TransformFunc {
	return func(obj any) (any, error) {
		pvc, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok {
			return obj, nil
		}
		if raw := pvc.Annotations[fleet.AnnCloneEvidence]; raw != "" {
			pvc.Annotations[fleet.AnnCloneEvidence] = digestAnnotation(raw, previousDigest(cached, pvc))
		}
		return fleet.TrimClaim(pvc), nil
	}
}

// previousDigest is the record digest of the cached version of pvc, if any.
func previousDigest(cached func(key string) (any, bool, error), pvc *corev1.PersistentVolumeClaim) string {
	if cached == nil {
		return ""
	}
	obj, ok, err := cached(pvc.Namespace + "/" + pvc.Name)
	if err != nil || !ok {
		return ""
	}
	if old, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		return old.Annotations[fleet.AnnCloneEvidence]
	}
	return ""
}

// withoutProgress is r less what only follows a clone's progress.
func withoutProgress(r Record) Record {
	r.Message, r.Volume, r.CapacityBytes, r.CloneClaim = "", "", 0, ""
	r.Phase, r.Timeline = "", Timeline{}
	return r
}

// readRecord reads the verdict record persisted on a worker PVC.
func ReadRecord(pvc *corev1.PersistentVolumeClaim) (*Record, error) {
	if pvc == nil {
		return nil, nil
	}
	var r Record
	ok, err := fleet.DecodeAnnotation(pvc, fleet.AnnCloneEvidence, &r)
	if err != nil || !ok {
		return nil, err
	}
	return &r, nil
}

func MustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own plain structs are marshalled: this cannot happen.
		panic(err)
	}
	return string(b)
}
