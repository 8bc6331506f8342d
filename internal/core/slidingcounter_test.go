package core

import (
	"testing"
	"time"
)

// Tests of the sliding window counter (the oldest bucket weighted
// by its overlap, rounded up).

func TestWeightRoundedUp(t *testing.T) {
	l := mustNew(t, cfgFor(SlidingCounter, 1, 10*time.Second, time.Second))
	runSteps(t, l, "a", []step{
		{0.5, 1, true, 0, 0},
		{10.2, 1, false, 0, 1}, // ceil(0.8 * 1) = 1 still counted
		{11.0, 1, true, 0, 0},
	})
	l = mustNew(t, cfgFor(SlidingCounter, 10, 10*time.Second, time.Second))
	runSteps(t, l, "b", concat(countdown(0.5, 10, 0), []step{
		{10.2, 1, true, 1, 0},
		{10.2, 1, true, 0, 0},
		{10.2, 1, false, 0, 1}, // exactly 2 fit: ceil(10 * 0.8) = 8 counted
	}))
	// The log keeps the unit of 0.500 until 10.500.
	l = mustNew(t, cfgFor(SlidingLog, 1, 10*time.Second, 0))
	runSteps(t, l, "a", []step{{0.5, 1, true, 0, 0}, {10.2, 1, false, 0, 1}, {10.5, 1, true, 0, 0}})
}

// The weighted policy under-counts the straddling bucket when its units arrived at its
// end, so a client that bursts at the end of a bucket and again at the end
// of the window gets up to 2*limit-1 into one window: the documented worst
// case, never more.
func TestSlidingCounterBurstAtBucketEdges(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingCounter, Limit: 10, Window: 10 * time.Second, Buckets: 10})
	n := 0
	for _, sec := range []float64{0.999, 10.95} { // both inside [0.999, 10.999)
		for range 20 {
			if l.AllowN("k", at(sec), 1).Allowed {
				n++
			}
		}
	}
	if n != 19 {
		t.Errorf("%d admitted within one window of 10 s; the documented worst case is 2*10-1", n)
	}
}

// TestSlidingCounterDecidesEveryRate: step tables of two and three rates against
// hand-computed values: all or nothing, the binding rate's numbers, and
// RetryAfter the first instant every rate admits (see runRateSteps).
func TestSlidingCounterDecidesEveryRate(t *testing.T) {
	// 10 buckets: 100 ms for the second, 6 s for the minute.
	l := mustNew(t, Config{Algorithm: SlidingCounter, Rates: twoRates, Buckets: 10})
	runRateSteps(t, l, "k", []rstep{
		{0, 1, true, 2, 3, w1s, 0},
		{0.1, 1, true, 1, 3, w1s, 0},
		{0.2, 1, true, 0, 3, w1s, 0},
		// The unit of bucket 0 counts in full until bucket 10 ends: the
		// counter's one-bucket lag.
		{0.3, 1, false, 0, 3, w1s, ms(800)},
		{1.1, 1, true, 0, 3, w1s, 0},
		{1.15, 1, false, 0, 3, w1s, ms(50)},
		{1.2, 2, false, 1, 3, w1s, ms(100)},
		{1.3, 2, true, 0, 3, w1s, 0},
		{2.5, 3, true, 0, 3, w1s, 0}, // the minute: 9 units, 1 left
		// Bucket 2.5 s weighs ceil(3*(100 ms-d)/100 ms) from 3.5 s: a unit
		// fits once that is 2, at d = 1/3 of the bucket.
		{3.5, 1, false, 0, 3, w1s, 33_333_334},
		// The minute's 9 units, all in its bucket 0, weigh
		// ceil(9*(6 s-d)/6 s) from 60 s: 2 more fit once that is 8, at
		// d = 2/3 s rounded up to the nanosecond.
		{3.6, 2, false, 1, 10, w1m, 57*time.Second + 66_666_667},
		{3.6, 1, true, 0, 10, w1m, 0},
		{4, 1, false, 0, 10, w1m, ms(56600)}, // 10 units weigh 9 from 60.6 s
		{60.6, 1, true, 0, 10, w1m, 0},
		{61, 4, false, 0, 10, w1m, Never},
	})

	// One bucket per window: the previous window weighs by its overlap.
	l = mustNew(t, Config{Algorithm: SlidingCounter, Rates: threeRates, Buckets: 1})
	runRateSteps(t, l, "k", []rstep{
		{0, 1, true, 1, 2, w100ms, 0},
		{0, 1, true, 0, 2, w100ms, 0},
		{0.05, 1, false, 0, 2, w100ms, ms(100)}, // 2 units weigh 1 from 0.15 s
		{0.15, 1, true, 0, 2, w100ms, 0},        // second: 2 left, 10 s: 5 left
		{0.2, 1, true, 0, 2, w100ms, 0},         // second: 1 left
		{0.25, 1, false, 0, 2, w100ms, ms(50)},  // the unit of 0.15 s weighs 1 until 0.3 s
		{0.3, 1, true, 0, 5, w1s, 0},            // 100 ms and second at 0: the second binds
		// The second's 5 units weigh 4 from 1.2 s; the 100 ms frees a
		// unit at 0.4 s.
		{0.35, 1, false, 0, 5, w1s, ms(850)},
		{1.2, 1, true, 0, 5, w1s, 0}, // 100 ms and 10 s: 1 left
		{1.2, 3, false, 0, 5, w1s, Never},
	})
}
