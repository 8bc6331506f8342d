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
