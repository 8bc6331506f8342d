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

// TestFixedWindowDecidesEveryRate: step tables of two and three rates against
// hand-computed values: all or nothing, the binding rate's numbers, and
// RetryAfter the first instant every rate admits (see runRateSteps).
func TestFixedWindowDecidesEveryRate(t *testing.T) {
	l := mustNew(t, Config{Algorithm: FixedWindow, Rates: twoRates})
	runRateSteps(t, l, "k", []rstep{
		{0, 1, true, 2, 3, w1s, 0},
		{0.1, 1, true, 1, 3, w1s, 0},
		{0.2, 1, true, 0, 3, w1s, 0},
		{0.3, 1, false, 0, 3, w1s, ms(700)}, // the second denies, the minute has 7 left
		{0.9, 1, false, 0, 3, w1s, ms(100)},
		{1, 2, true, 1, 3, w1s, 0}, // the minute: 5 left
		{1.5, 2, false, 1, 3, w1s, ms(500)},
		{1.5, 1, true, 0, 3, w1s, 0}, // the minute: 4 left
		{2, 3, true, 0, 3, w1s, 0},   // the minute: 1 left
		// The second admits 2, the minute has 1 left: the minute binds
		// and denies until its window ends.
		{3, 2, false, 1, 10, w1m, 57 * time.Second},
		{3, 1, true, 0, 10, w1m, 0},
		{3.5, 1, false, 0, 10, w1m, ms(56500)},
		{59.999999999, 1, false, 0, 10, w1m, 1},
		{60, 3, true, 0, 3, w1s, 0}, // 10 admitted in the first minute, for 22 offered
		{60, 4, false, 0, 3, w1s, Never},
		{60, 11, false, 0, 3, w1s, Never},
		{60.5, 1, false, 0, 3, w1s, ms(500)},
		{61, 0, true, 3, 3, w1s, 0},
	})

	l = mustNew(t, Config{Algorithm: FixedWindow, Rates: threeRates})
	runRateSteps(t, l, "k", []rstep{
		{0, 1, true, 1, 2, w100ms, 0},
		{0, 1, true, 0, 2, w100ms, 0},
		{0.05, 1, false, 0, 2, w100ms, ms(50)},
		{0.1, 2, true, 0, 2, w100ms, 0},         // second: 1 left, 10 s: 4 left
		{0.2, 2, false, 1, 5, w1s, ms(800)},     // the second binds
		{0.2, 3, false, 1, 5, w1s, Never},       // above 2 per 100 ms
		{0.2, 1, true, 0, 5, w1s, 0},            // 100 ms: 1 left, 10 s: 3 left
		{1, 2, true, 0, 2, w100ms, 0},           // second: 3 left, 10 s: 1 left
		{1.1, 2, false, 1, 8, w10s, ms(8900)},   // the 10 s binds
		{1.1, 1, true, 0, 8, w10s, 0},           // 100 ms: 1 left, second: 2 left
		{1.15, 1, false, 0, 8, w10s, ms(8850)},  // only the 10 s denies
		{9.999999999, 1, false, 0, 8, w10s, 1},  //
		{10, 2, true, 0, 2, w100ms, 0},          // second: 3 left, 10 s: 6 left
		{10, 9, false, 0, 2, w100ms, Never},     // above every limit
		{10.05, 1, false, 0, 2, w100ms, ms(50)}, //
		// Stale: decided at 10.05 s, durations from 5 s.
		{5, 1, false, 0, 2, w100ms, ms(5100)},
		{10.1, 1, true, 1, 2, w100ms, 0}, // second: 2 left, 10 s: 5 left
	})
}

// TestBindingRateTiesToTheLongestWindow: of rates with equal remaining,
// the Result reports the longest window's, even when another's resets
// later: at 59.5 s the 7 s window [55 s, 62 s) (t0 is 1 s past a multiple
// of 7 s) resets 2 s after the minute.
func TestBindingRateTiesToTheLongestWindow(t *testing.T) {
	l := mustNew(t, Config{Algorithm: FixedWindow, Rates: []Rate{{2, 7 * time.Second}, {2, time.Minute}}})
	r := l.AllowN("k", at(59.5), 2)
	if !r.Allowed || r.Remaining != 0 || r.Window != time.Minute || r.ResetAfter != ms(500) {
		t.Fatalf("%+v, want the minute's numbers", r)
	}
	r = l.AllowN("k", at(60), 1)
	if r.Allowed || r.Window != 7*time.Second || r.RetryAfter != 2*time.Second {
		t.Fatalf("%+v, want the 7 s window's denial", r)
	}
}
