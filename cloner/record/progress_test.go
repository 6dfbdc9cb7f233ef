package record

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// What counts as progress, over every field of Record: a change of the
// message, the volume handle, the capacity, the clone's claim, the phase or
// the timeline alone is progress (ProgressFree stays, the record is rewritten only when spaced);
// a change of any other field (a driver error, a verdict, a finding, CDI's
// clone type) is not; a change of Since alone is no change at all.
func TestProgressIsTheMessageVolumeCapacityAndCloneClaimOnly(t *testing.T) {
	progress := []string{"Message", "Volume", "CapacityBytes", "CloneClaim", "Phase", "Timeline"}
	base := &Record{Verdict: VerdictPending, Source: "none"}
	before := DigestRecord(base)
	typ := reflect.TypeFor[Record]()
	for i := range typ.NumField() {
		field := typ.Field(i)
		changed := *base
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString("changed")
		case reflect.Int64:
			v.SetInt(1 << 30)
		case reflect.Float64:
			v.SetFloat(1.5)
		case reflect.Slice:
			v.Set(reflect.ValueOf([]Finding{{Reason: "class-mismatch", Message: "m"}}))
		case reflect.Struct:
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			if v.Type() == reflect.TypeFor[Timeline]() {
				v.Set(reflect.ValueOf(Timeline{Requested: at}))
			} else {
				v.Set(reflect.ValueOf(at))
			}
		default:
			t.Fatalf("field %s of kind %s: the test cannot change it; add the kind", field.Name, v.Kind())
		}
		after := DigestRecord(&changed)
		isSince, isProgress := field.Name == "Since", slices.Contains(progress, field.Name)
		if same := after.Same == before.Same; same != isSince {
			t.Errorf("%s changed: record reads as the same %v, want %v", field.Name, same, isSince)
		}
		if kept := after.ProgressFree == before.ProgressFree; kept != (isSince || isProgress) {
			t.Errorf("%s changed: taken for progress alone %v, want %v", field.Name, kept, isSince || isProgress)
		}
	}
}
