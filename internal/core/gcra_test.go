package core

import (
	"testing"
	"time"
)

// Tests of GCRA.

// GCRA keeps a key's usage when its limit is lowered and raised again, as
// long as the debt at the lowered limit fits maxDebt (20 years); the README
// documents the cap.
func TestGCRALowerRaiseKeepsUsage(t *testing.T) {
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 1_000_000, Window: time.Hour})
	if r := l.AllowN("k", at(0), 1_000_000); !r.Allowed {
		t.Fatal(r)
	}
	// 1,000 is the smallest limit whose debt (1,000 hours) fits.
	if err := l.SetLimit("k", 1000); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLimit("k", 1_000_000); err != nil {
		t.Fatal(err)
	}
	if r := l.Peek("k", at(1), 0); r.Remaining > 1000 {
		t.Errorf("1 s after spending the whole limit, remaining %d of 1,000,000", r.Remaining)
	}
	// Lowered to 1, the debt would be 114 years: it is capped at 20, so
	// raising the limit again restores 20 years' worth at the old rate.
	l.SetLimit("k", 1)
	l.SetLimit("k", 1_000_000)
	if r := l.Peek("k", at(1), 0); r.Remaining < 800_000 || r.Remaining > 830_000 {
		t.Errorf("capped debt: remaining %d", r.Remaining)
	}
}

// TestGCRADecidesEveryRate: step tables of two and three rates against
// hand-computed values: all or nothing, the binding rate's numbers, and
// RetryAfter the first instant every rate admits (see runRateSteps).
func TestGCRADecidesEveryRate(t *testing.T) {
	// Emission intervals: 250 ms for the second, 6 s for the minute.
	l := mustNew(t, Config{Algorithm: GCRA, Rates: []Rate{{4, time.Second}, {10, time.Minute}}})
	runRateSteps(t, l, "k", []rstep{
		{0, 1, true, 3, 4, w1s, 0},
		{0, 2, true, 1, 4, w1s, 0},
		{0, 2, false, 1, 4, w1s, ms(250)}, // the minute has 7 left
		{0.25, 2, true, 0, 4, w1s, 0},     // the minute: 5 left
		{2, 1, true, 3, 4, w1s, 0},        // the minute: 4 left
		{3, 4, true, 0, 10, w1m, 0},       // both at 0: the minute binds
		{4, 1, false, 0, 10, w1m, 2 * time.Second},
		{6, 1, true, 0, 10, w1m, 0},
		{6, 3, false, 0, 10, w1m, 18 * time.Second},
		{6, 5, false, 0, 10, w1m, Never},
		{6, 11, false, 0, 10, w1m, Never},
		// Stale: decided at 6 s, durations from 1 s.
		{1, 1, false, 0, 10, w1m, 11 * time.Second},
		{12, 1, true, 0, 10, w1m, 0},
	})

	// Emission intervals: 50 ms, 200 ms and 1.25 s.
	l = mustNew(t, Config{Algorithm: GCRA, Rates: threeRates})
	runRateSteps(t, l, "k", []rstep{
		{0, 1, true, 1, 2, w100ms, 0},
		{0, 1, true, 0, 2, w100ms, 0},
		{0, 1, false, 0, 2, w100ms, ms(50)},
		{0.05, 1, true, 0, 2, w100ms, 0},
		{0.6, 2, true, 0, 2, w100ms, 0},
		{1, 2, true, 0, 2, w100ms, 0},
		{2, 2, true, 0, 8, w10s, 0},          // 100 ms and 10 s at 0: the 10 s binds
		{2, 1, false, 0, 8, w10s, ms(500)},   // 100 ms frees a unit at 2.05 s, 10 s at 2.5 s
		{2.5, 1, true, 0, 8, w10s, 0},        //
		{2.5, 3, false, 0, 8, w10s, Never},   // above 2 per 100 ms
		{1, 1, false, 0, 8, w10s, ms(2750)},  // stale: decided at 2.5 s
		{3.75, 1, true, 0, 8, w10s, 0},       //
		{3.75, 0, true, 0, 8, w10s, 0},       // a peek
		{100, 0, true, 2, 2, w100ms, 0},      // all full: 2 left of 2 binds
		{100, 8, false, 2, 2, w100ms, Never}, // above 2 per 100 ms and 5 per second
	})
}
