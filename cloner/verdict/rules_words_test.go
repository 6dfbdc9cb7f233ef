package verdict

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// TestWithoutCopyPrefixOnlyCDIsCopyPrefix: CDI copies a tmp-pvc's events to
// the target claim prefixed "[tmp-pvc-<uid>] : " (CDI v1.65
// pkg/controller/common/util.go CopyEvents); that prefix, and only that
// one, is dropped.
func TestWithoutCopyPrefixOnlyCDIsCopyPrefix(t *testing.T) {
	for msg, want := range map[string]string{
		"[tmp-pvc-1234] : failed to provision": "failed to provision",
		"[tmp-pvc-1234] : ":                    "",
		"[tmp-pvc-1234]: failed":               "[tmp-pvc-1234]: failed",
		"[tmp-pvc-1234] failed":                "[tmp-pvc-1234] failed",
		"[prime-1234] : failed":                "[prime-1234] : failed",
		"tmp-pvc-1234] : failed":               "tmp-pvc-1234] : failed",
		"failed [tmp-pvc-1] : x":               "failed [tmp-pvc-1] : x",
		"":                                     "",
	} {
		if got := withoutCopyPrefix(msg); got != want {
			t.Errorf("%q: %q, want %q", msg, got, want)
		}
	}
}

// TestLastSeenTakesTheFieldItsReporterFilled: an event's last occurrence is
// its series' last observation, else lastTimestamp, else eventTime, else
// firstTimestamp: every combination of the four filled or not.
func TestLastSeenTakesTheFieldItsReporterFilled(t *testing.T) {
	series, last, eventTime, first := t0.Add(4*time.Second), t0.Add(3*time.Second), t0.Add(2*time.Second), t0.Add(time.Second)
	for bits := 0; bits < 16; bits++ {
		e := &corev1.Event{}
		want := time.Time{}
		if bits&1 != 0 {
			e.FirstTimestamp, want = metav1.NewTime(first), first
		}
		if bits&2 != 0 {
			e.EventTime, want = metav1.NewMicroTime(eventTime), eventTime
		}
		if bits&4 != 0 {
			e.LastTimestamp, want = metav1.NewTime(last), last
		}
		if bits&8 != 0 {
			e.Series, want = &corev1.EventSeries{LastObservedTime: metav1.NewMicroTime(series)}, series
		}
		if got := lastSeen(e); !got.Equal(want) {
			t.Errorf("fields %04b: %v, want %v", bits, got, want)
		}
	}
	// A series without an observation falls through to the next field.
	e := &corev1.Event{Series: &corev1.EventSeries{}, LastTimestamp: metav1.NewTime(last)}
	if got := lastSeen(e); !got.Equal(last) {
		t.Errorf("empty series: %v, want %v", got, last)
	}
}

// TestLatestDistinctNewestDistinctAtMostThree: newest first, one of each
// reason and message (a tmp-pvc event and CDI's copy of it are one), at
// most maxHeardEvents, for zero up to five distinct events.
func TestLatestDistinctNewestDistinctAtMostThree(t *testing.T) {
	ev := func(reason, msg string, at time.Duration) corev1.Event {
		return corev1.Event{Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(t0.Add(at))}
	}
	for n := 0; n <= 5; n++ {
		var evs []corev1.Event
		var want []HeardEvent
		for i := range n {
			evs = append(evs, ev("R", fmt.Sprint(i), time.Duration(i)*time.Second))
		}
		for i := n - 1; i >= 0 && len(want) < 3; i-- {
			want = append(want, HeardEvent{"R", fmt.Sprint(i)})
		}
		if got := LatestDistinct(evs); !slices.Equal(got, want) {
			t.Errorf("%d distinct: %v, want %v", n, got, want)
		}
	}
	copied := []corev1.Event{ev("ProvisioningFailed", "no space", time.Second),
		ev("ProvisioningFailed", "[tmp-pvc-9] : no space", 2*time.Second), ev("Other", "no space", 0)}
	want := []HeardEvent{{"ProvisioningFailed", "no space"}, {"Other", "no space"}}
	if got := LatestDistinct(copied); !slices.Equal(got, want) {
		t.Errorf("a copy and its original: %v, want %v", got, want)
	}
}

// TestHeardTextJoinsReasonAndMessage: "reason: message" per event, "; "
// between, nothing for none.
func TestHeardTextJoinsReasonAndMessage(t *testing.T) {
	for _, tc := range []struct {
		events []HeardEvent
		want   string
	}{
		{nil, ""},
		{[]HeardEvent{{"A", "a"}}, "A: a"},
		{[]HeardEvent{{"A", "a"}, {"B", "b"}}, "A: a; B: b"},
	} {
		if got := heardText(tc.events); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.events, got, tc.want)
		}
	}
}

// TestOwnEventBySourceOrReportingController: the cloner's own events,
// named in either field an event recorder fills.
func TestOwnEventBySourceOrReportingController(t *testing.T) {
	for _, source := range []string{"", "cdi-controller", fleet.EventSourceComponent} {
		for _, reporting := range []string{"", "cdi-controller", fleet.EventSourceComponent} {
			e := &corev1.Event{Source: corev1.EventSource{Component: source}, ReportingController: reporting}
			want := source == fleet.EventSourceComponent || reporting == fleet.EventSourceComponent
			if got := OwnEvent(e); got != want {
				t.Errorf("source %q reporting %q: %v, want %v", source, reporting, got, want)
			}
		}
	}
}
