package shardlimit

// Tests of the clock rules (CASES.md C11) against stale callers and bad
// instants, found by review.

import (
	"testing"
	"time"
)

// maxInAnyWindow returns the most instants of ts (ascending) inside any
// half-open interval of length w.
func maxInAnyWindow(ts []time.Time, w time.Duration) int {
	best := 0
	for i := range ts {
		c := 0
		for j := i; j < len(ts) && ts[j].Sub(ts[i]) < w; j++ {
			c++
		}
		best = max(best, c)
	}
	return best
}

// Out-of-order callers: one request in ten arrives with a now 20 ms older
// than the key's latest (fasthttp's ctx.Time() behind a slow auth
// middleware, a request's arrival time, a goroutine descheduled between its
// clock read and the lock). Each such call is taken as a clock step back and
// moves the key's whole state back by 20 ms, so usage expires early and the
// shifts accumulate. Limit 10/s over 10 s: at most 10 may be admitted in any
// one-second interval of the true time (20 for FixedWindow, 20 for GCRA's
// burst plus refill).
func TestStaleCallersDoNotMultiplyTheLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, Config{Algorithm: alg, Limit: 10, Window: time.Second})
			var admitted []time.Time
			for i := range 10000 {
				trueNow := at(float64(i) / 1000) // one call per ms
				now := trueNow
				if i%10 == 0 {
					now = trueNow.Add(-20 * time.Millisecond)
				}
				if l.AllowN("k", now, 1).Allowed {
					admitted = append(admitted, trueNow)
				}
			}
			bound := 10
			if alg == FixedWindow || alg == GCRA {
				bound = 20
			}
			// Allow the 20 ms of skew itself: widen the limit by one unit.
			if got := maxInAnyWindow(admitted, time.Second); got > bound+1 {
				t.Errorf("%d admitted in one second of true time (%d in 10 s), limit 10/s", got, len(admitted))
			}
		})
	}
}

// An instant before the epoch, the zero time.Time included (a caller's
// bug), is an error that changes nothing: it must not wipe a key's usage.
func TestZeroTimeIsAnError(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, Config{Algorithm: alg, Limit: 5, Window: time.Minute})
			admitted := 0
			for i := range 40 {
				now := at(float64(i))
				for range 5 {
					if l.AllowN("k", now, 1).Allowed {
						admitted++
					}
				}
				for _, bad := range []time.Time{{}, time.Unix(-1, 0), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
					wantErr(t, l.AllowN("k", bad, 1).Err, ErrInvalidTime)
					wantErr(t, l.Peek("k", bad, 0).Err, ErrInvalidTime)
				}
			}
			if admitted > 10 {
				t.Errorf("admitted %d in 40 s, limit 5 per minute", admitted)
			}
			if l.Sweep(time.Time{}) != 0 || l.Len() != 1 {
				t.Error("a sweep at the zero time evicted")
			}
		})
	}
}

// SlidingCounter keeps a skew per key that grows by every step back; near
// the largest accepted instant the sum must saturate, never overflow into
// negative durations.
func TestCounterSkewDoesNotOverflow(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingCounter, Limit: 3, Window: time.Millisecond, Buckets: 1})
	hi := time.Unix(0, maxInstant-1)
	for _, now := range []time.Time{hi, time.Unix(0, 0), time.Unix(0, 0), hi, hi} {
		for range 4 {
			r := l.AllowN("k", now, 1)
			checkResultSane(t, r)
			if r.Err != nil {
				t.Fatalf("at %v: %+v", now, r)
			}
		}
	}
}
