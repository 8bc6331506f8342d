package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// Tests of the sliding window log: its timestamp resolution, durations and
// memory.

func TestSlidingLogDurationsOffTheResolutionGrid(t *testing.T) {
	// A one-minute log stamps in 100 ns steps; a unit admitted between two
	// steps still reports a reset of exactly one minute.
	l := mustNew(t, cfgFor(SlidingLog, 2, time.Minute, 0))
	now := at(0.123456789)
	if r := l.AllowN("k", now, 1); r.ResetAfter != time.Minute {
		t.Fatalf("reset after %v, want 1m", r.ResetAfter)
	}
	l.AllowN("k", now.Add(time.Second), 1)
	// The first unit is stamped 0.1234568 s and counts until 60.1234568 s:
	// RetryAfter from 2.123456789 s is 58 s and 11 ns, not the 58 s the
	// rounded-up now would give, which was 11 ns early.
	r := l.AllowN("k", now.Add(2*time.Second), 1)
	if r.Allowed || r.RetryAfter != 58*time.Second+11*time.Nanosecond {
		t.Fatalf("%+v", r)
	}
	// Never early: the unit counts until its stamp plus W.
	if l.Peek("k", now.Add(time.Minute-time.Nanosecond), 1).Allowed {
		t.Fatal("admitted before the oldest unit's minute was over")
	}
	if !l.Peek("k", now.Add(time.Minute+100*time.Nanosecond), 1).Allowed {
		t.Fatal("still denied one resolution step after the minute")
	}
}

// TestSlidingLogCountsUnderOneStepPastW: a unit counts from its instant s
// until s+W plus less than one resolution step, also for a window that is
// not a whole number of steps (where rounding the stamp and the window
// separately made it almost two).
func TestSlidingLogCountsUnderOneStepPastW(t *testing.T) {
	for _, tc := range []struct {
		w, unit time.Duration
	}{{61*time.Second + 3, 100}, {1500*time.Millisecond + 7, 10}, {time.Hour + 13, 10 * time.Microsecond}} {
		for _, off := range []time.Duration{1, tc.unit / 2, tc.unit - 1, tc.unit} {
			l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 2, Window: tc.w, JanitorInterval: -1})
			s := at(10).Add(off)
			l.AllowN("k", s, 1)
			l.AllowN("k", s.Add(time.Second), 1) // the key is not cleared at s+W
			if l.Peek("k", s.Add(tc.w-1), 1).Allowed {
				t.Fatalf("W=%v: admitted before s+W", tc.w)
			}
			if r := l.Peek("k", s.Add(tc.w+tc.unit-1), 1); !r.Allowed {
				t.Fatalf("W=%v, s %v past a step: still counted a step past s+W: %+v", tc.w, off, r)
			}
		}
	}
}

// A small sliding log table stays small: ring pages start at 1 KiB per
// shard, not 256 KiB (the middleware builds one limiter per rule).
func TestSlidingLogSmallTableMemory(t *testing.T) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 10, Window: time.Minute, Shards: 64})
	for i := range 256 {
		l.AllowN(fmt.Sprint("k", i), at(0), 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	perKey := (int64(m1.HeapAlloc) - int64(m0.HeapAlloc)) / int64(l.Len())
	if perKey > 1024 {
		t.Errorf("%d keys holding one unit each cost %d B/key", l.Len(), perKey)
	}
	runtime.KeepAlive(l)
}

func TestSlidingLogMemoryFollowsLimit(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 100, Window: time.Second, Shards: 1}).(*LogLimiter)
	l.AllowN("k", at(0), 1)
	s := &l.tab.shards[0]
	rec := func() *logRec { // the key's record: it may move as the table grows
		slot, ok := find(s, l.tab.hash("k"), "k")
		if !ok {
			t.Fatal("key not stored")
		}
		return s.rec(slot)
	}
	if c := rec().cap; c != 4 {
		t.Fatalf("first ring capacity %d, want 4", c)
	}
	l.AllowN("k", at(0), 99)
	if c := rec().cap; c != 100 {
		t.Fatalf("full ring capacity %d, want exactly the limit", c)
	}
	l.SetLimit("k", 10) // usage 100 stays counted
	if r := l.AllowN("k", at(0.5), 1); r.Allowed {
		t.Fatal("shrunk limit admitted")
	}
	l.AllowN("k", at(1), 1) // all expired: the ring shrinks to the limit
	if c := rec().cap; c != 10 {
		t.Fatalf("ring capacity %d after shrink, want 10", c)
	}
}

// TestSlidingLogRetryAfterBehindTheLatest: a denied request behind the
// key's latest instant gets a RetryAfter after which, from its own now, it
// is admitted, and not a nanosecond sooner.
func TestSlidingLogRetryAfterBehindTheLatest(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 3, Window: time.Minute}) // 100 ns stamps
	last := at(100).Add(50)
	back := last.Add(-(2*time.Second + 90))
	for _, tt := range []time.Time{last, back, back} {
		if !l.AllowN("k", tt, 1).Allowed {
			t.Fatal("denied under the limit")
		}
	}
	now := back.Add(time.Second)
	r := l.AllowN("k", now, 3)
	if r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("%+v", r)
	}
	if p := l.Peek("k", now.Add(r.RetryAfter-1), 3); p.Allowed {
		t.Fatalf("admitted before RetryAfter %v", r.RetryAfter)
	}
	if p := l.Peek("k", now.Add(r.RetryAfter), 3); !p.Allowed {
		t.Fatalf("denied RetryAfter %v later: %+v", r.RetryAfter, p)
	}
}

// TestSlidingLogDecidesEveryRate: step tables of two and three rates against
// hand-computed values: all or nothing, the binding rate's numbers, and
// RetryAfter the first instant every rate admits (see runRateSteps).
func TestSlidingLogDecidesEveryRate(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingLog, Rates: twoRates})
	runRateSteps(t, l, "k", []rstep{
		{0, 1, true, 2, 3, w1s, 0},
		{0.1, 1, true, 1, 3, w1s, 0},
		{0.2, 1, true, 0, 3, w1s, 0},
		{0.3, 1, false, 0, 3, w1s, ms(700)}, // the unit of 0 s expires at 1 s
		{1, 1, true, 0, 3, w1s, 0},          // the minute: 6 left
		{1.05, 1, false, 0, 3, w1s, ms(50)},
		{1.1, 2, false, 1, 3, w1s, ms(100)}, // the unit of 0.2 s must expire too
		{1.2, 2, true, 0, 3, w1s, 0},        // the minute: 4 left
		{2.2, 3, true, 0, 3, w1s, 0},        // the units of 1.2 s expired at 2.2 s; the minute: 1 left
		// The second admits 2, the minute has 1 left: the unit of 0 s
		// must expire, at 60 s.
		{3.5, 2, false, 1, 10, w1m, ms(56500)},
		{3.5, 1, true, 0, 10, w1m, 0},
		{4, 1, false, 0, 10, w1m, 56 * time.Second},
		{60, 1, true, 0, 10, w1m, 0}, // the unit of 0 s expired
		{60.05, 1, false, 0, 10, w1m, ms(50)},
		{60.1, 2, false, 1, 10, w1m, ms(100)},
		{60.2, 2, true, 0, 10, w1m, 0},        // both at 0: the minute binds
		{60.3, 1, false, 0, 10, w1m, ms(700)}, // both deny until 61 s
		{61, 1, true, 0, 10, w1m, 0},
		{61, 4, false, 0, 10, w1m, Never},
	})

	l = mustNew(t, Config{Algorithm: SlidingLog, Rates: threeRates})
	runRateSteps(t, l, "k", []rstep{
		{0, 1, true, 1, 2, w100ms, 0},
		{0, 1, true, 0, 2, w100ms, 0},
		{0.05, 1, false, 0, 2, w100ms, ms(50)},
		{0.1, 2, true, 0, 2, w100ms, 0},
		{0.2, 2, false, 1, 5, w1s, ms(800)},
		{0.2, 3, false, 1, 5, w1s, Never},
		{0.2, 1, true, 0, 5, w1s, 0},
		{1, 2, true, 0, 5, w1s, 0},             // 100 ms and second at 0: the second binds
		{1.1, 2, false, 1, 8, w10s, ms(8900)},  // the 10 s binds
		{1.1, 1, true, 0, 8, w10s, 0},          //
		{1.15, 1, false, 0, 8, w10s, ms(8850)}, // only the 10 s denies
		{10, 2, true, 0, 8, w10s, 0},           // the units of 0 s expired
		{10.05, 1, false, 0, 8, w10s, ms(50)},  // 100 ms and 10 s both deny until 10.1 s
		{10.1, 1, true, 1, 8, w10s, 0},         // 100 ms and 10 s both at 1: the 10 s binds
		// Stale: decided at 10.1 s, durations from 5 s.
		{5, 2, false, 1, 8, w10s, ms(5200)},
		{10.2, 1, true, 1, 8, w10s, 0},
	})
}

// TestSlidingLogRetryAfterOffTheGrid: a sliding log of several rates keeps
// one ring at the longest window's resolution (100 ns for a minute, 10 µs
// for an hour, 1 ms for a day); at instants off that grid, a denied
// request fits exactly at now+RetryAfter and not a nanosecond sooner,
// whichever rate binds.
func TestSlidingLogRetryAfterOffTheGrid(t *testing.T) {
	for ci, rates := range [][]Rate{
		{{5, time.Hour}},
		{{5, time.Hour}, {3, time.Minute}},
		{{4, time.Minute}, {2, 7 * time.Second}, {3, 13 * time.Second}},
		{{6, 24 * time.Hour}, {3, time.Hour}},
	} {
		denied := 0
		for seed := range uint64(10) {
			rng := rand.New(rand.NewPCG(seed, uint64(ci)))
			l := mustNew(t, Config{Algorithm: SlidingLog, Rates: rates})
			shortest := rates[0].Window
			for _, r := range rates {
				shortest = min(shortest, r.Window)
			}
			now := at(0).Add(time.Duration(rng.Int64N(1e9)))
			for range 400 {
				now = now.Add(time.Duration(rng.Int64N(int64(shortest) / 3)))
				n := 1 + rng.IntN(2)
				r := l.AllowN("k", now, n)
				if r.Allowed || r.RetryAfter == Never {
					continue
				}
				denied++
				fit := now.Add(r.RetryAfter)
				if p := l.Peek("k", fit, n); !p.Allowed {
					t.Fatalf("%v seed %d: denied at now+RetryAfter (%v): %+v", rates, seed, r.RetryAfter, p)
				}
				if l.Peek("k", fit.Add(-1), n).Allowed {
					t.Fatalf("%v seed %d: admitted a nanosecond before now+RetryAfter (%v)", rates, seed, r.RetryAfter)
				}
			}
		}
		if denied < 100 {
			t.Fatalf("%v: only %d denials", rates, denied)
		}
	}
}

// TestStatsRingFullIsNotADenial: a sliding log key whose ring cannot grow
// (the shard's ring memory is exhausted) fails its decision with
// ErrTooManyKeys. Stats.Denied counts "decisions that denied a positive
// cost (errors excluded)", so the failure is not a denial: it is refused.
func TestStatsRingFullIsNotADenial(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 100, Window: 10 * time.Second, Shards: 1})
	if !l.AllowN("k", at(0.5), 1).Allowed {
		t.Fatal("the first unit was denied")
	}
	s := &l.(*LogLimiter).tab.shards[0]
	s.mu.Lock()
	s.rings.pages = append(s.rings.pages, make([][]uint32, maxRingPages-len(s.rings.pages))...)
	s.rings.cur = -1 // no page may be added: the ring of 4 cannot grow to 8
	s.mu.Unlock()
	if r := l.AllowN("k", at(0.5), 5); !errors.Is(r.Err, ErrTooManyKeys) {
		t.Fatalf("a ring that cannot grow: %+v", r)
	}
	if st := l.Stats(); st.Allowed != 1 || st.Denied != 0 || st.Refused != 1 {
		t.Fatalf("stats %+v: want 1 allowed, no denial and 1 refused (the failure is an error)", st)
	}
}
