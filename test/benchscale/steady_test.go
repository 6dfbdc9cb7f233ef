package main

import (
	"testing"
	"time"
)

func TestClearOfPassesAvoidsEveryPassWindow(t *testing.T) {
	synced := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	const period, d = 10 * time.Minute, 2 * time.Minute
	for _, tc := range []struct {
		name      string
		t, want   time.Duration // after synced
		wantClear bool
	}{
		{"well between passes", 3 * time.Minute, 3 * time.Minute, true},
		{"inside the window of the pass just gone", 10*time.Minute + 10*time.Second, 10*time.Minute + 55*time.Second, true},
		{"would run into the next pass", 8 * time.Minute, 10*time.Minute + 55*time.Second, true},
		{"ends exactly where the next pass's lead begins", 7*time.Minute + 55*time.Second, 7*time.Minute + 55*time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, clear := clearOfPasses(synced, period, d, synced.Add(tc.t))
			if clear != tc.wantClear || !got.Equal(synced.Add(tc.want)) {
				t.Fatalf("clearOfPasses at +%s = +%s, %v; want +%s, %v", tc.t, got.Sub(synced), clear, tc.want, tc.wantClear)
			}
			for p := synced; p.Before(got.Add(2 * period)); p = p.Add(period) {
				if got.Before(p.Add(passWindow-passLead)) && got.Add(d).After(p.Add(-passLead)) {
					t.Fatalf("window +%s..+%s overlaps the pass at +%s", got.Sub(synced), got.Add(d).Sub(synced), p.Sub(synced))
				}
			}
		})
	}
	if _, clear := clearOfPasses(synced, period, period, synced); clear {
		t.Fatal("a window as long as the period was called clear")
	}
}

func TestResyncPeriodReadsTheShippedFlag(t *testing.T) {
	if got, err := resyncPeriod([]string{"--v=2", "--resync-period=3m"}); err != nil || got != 3*time.Minute {
		t.Fatalf("resyncPeriod = %s, %v; want 3m", got, err)
	}
	if _, err := resyncPeriod([]string{"--resync-period=soon"}); err == nil {
		t.Fatal("a malformed --resync-period was accepted")
	}
}
