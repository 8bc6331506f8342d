package core

import (
	"testing"
	"time"
)

// Tests of the fixed window. The cases whose expected values differ by
// algorithm are in comparison_test.go, the rules every algorithm keeps in
// conformance_test.go.

// Windows are aligned to Unix time, whenever the limiter was made, so
// nodes and restarts agree on them: a window of 60 s starts at every whole
// minute. A denial waits exactly until the window ends.
func TestFixedWindowAlignedToUnixTime(t *testing.T) {
	for _, made := range []time.Time{at(0), at(17.3), at(-3600.9)} {
		l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 3, Window: time.Minute, Clock: NewManualClock(made)})
		for i := range 3 {
			if r := l.AllowN("k", at(59.5), 1); !r.Allowed || r.Remaining != 2-i || r.ResetAfter != 500*time.Millisecond {
				t.Fatalf("made at %v, call %d at 59.5 s: %+v, want allowed, remaining %d, ResetAfter 500ms", made, i, r, 2-i)
			}
		}
		r := l.AllowN("k", at(59.75), 1)
		if r.Allowed || r.RetryAfter != 250*time.Millisecond || r.ResetAfter != 250*time.Millisecond {
			t.Fatalf("made at %v, at 59.75 s: %+v, want denied until the minute ends (250ms)", made, r)
		}
		if r := l.AllowN("k", at(60), 1); !r.Allowed || r.Remaining != 2 || r.ResetAfter != time.Minute {
			t.Fatalf("made at %v, at 60 s: %+v, want allowed in a fresh window, remaining 2, ResetAfter 1m", made, r)
		}
	}
}

// A cost that does not fit what is left is denied and consumes nothing;
// the window's count is what was admitted.
func TestFixedWindowDeniedCostConsumesNothing(t *testing.T) {
	l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 5, Window: 10 * time.Second})
	runSteps(t, l, "k", []step{
		{1, 3, true, 2, 0},
		{2, 3, false, 2, 8}, // 3 > 2 left: denied until 10 s
		{3, 2, true, 0, 0},  // the 2 left are still there
		{4, 1, false, 0, 6},
		{10, 5, true, 0, 0}, // the next window holds the whole limit
		{10, 6, false, 0, never},
	})
}

// Per key, time never goes back: an instant behind the key's latest is
// decided at the latest, so a stale call in the window before counts in the
// key's current window and is never a second budget.
func TestFixedWindowStaleInstantCountsInTheLatestWindow(t *testing.T) {
	l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 2, Window: 10 * time.Second})
	runSteps(t, l, "k", []step{
		{9.5, 2, true, 0, 0},   // window [0, 10) full
		{10.5, 1, true, 1, 0},  // window [10, 20)
		{9.9, 1, true, 0, 0},   // stale: decided at 10.5, in [10, 20)
		{9.8, 1, false, 0, 11}, // still [10, 20): RetryAfter measured from 9.8 to 20
		{20, 2, true, 0, 0},
	})
}
