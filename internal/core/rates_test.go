package core

// Tests of several rates per key (Config.Rates): all or nothing, the
// binding rate, RetryAfter the first instant every rate admits, limits
// per key and by default, and the time rule, for every algorithm, as step
// tables against hand-computed values; model_test.go checks the same
// against reference models on random sequences.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRatesBoolFormsDecideAsResultForms: AllowAt decides as AllowN: a
// request the first rate denies still brings every rate's state to the
// decision's instant. GCRA keeps a rate's usage when its limit changes by
// re-encoding its debt at the key's next decision; a denied AllowAt that
// stopped at the first denying rate left the other rates encoded for
// their old limit, so they were re-encoded later, from a smaller debt,
// and the key admitted what AllowN's twin denied.
func TestRatesBoolFormsDecideAsResultForms(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			mk := func() Limiter {
				return mustNew(t, Config{Algorithm: alg, Buckets: 4, Rates: []Rate{{2, 2 * time.Second}, {4, time.Second}}})
			}
			a, b := mk(), mk()
			for _, l := range []Limiter{a, b} {
				if r := l.AllowN("k", at(0), 2); !r.Allowed {
					t.Fatalf("first burst denied: %+v", r)
				}
				// The 1 s rate's limit drops from 4 to 1 while the key
				// has used 2 of it.
				if err := l.SetDefaultLimits(2, 1); err != nil {
					t.Fatal(err)
				}
			}
			// Both denied by the 2 s rate (full until 1 s or 2 s).
			if a.AllowAt("k", at(0.1)) {
				t.Fatal("AllowAt admitted a request over the 2 s rate")
			}
			if r := b.AllowN("k", at(0.1), 1); r.Allowed {
				t.Fatalf("AllowN admitted a request over the 2 s rate: %+v", r)
			}
			for _, sec := range []float64{0.5, 1, 1.5, 1.9, 2, 2.5} {
				if pa, pb := a.Peek("k", at(sec), 1), b.Peek("k", at(sec), 1); pa != pb {
					t.Fatalf("peek at %v s after a denied AllowAt: %+v\nafter a denied AllowN: %+v", sec, pa, pb)
				}
			}
		})
	}
}

// rstep is one call in a step table of several rates: at seconds after t0,
// cost n, and the expected Result: Allowed, the binding rate's Remaining,
// Limit and Window, and RetryAfter exactly (0 when admitted, Never, or
// anyRetry to skip).
type rstep struct {
	at      float64
	n       int
	allowed bool
	rem     int
	limit   int
	window  time.Duration
	retry   time.Duration
}

const anyRetry = time.Duration(-1)

// ms returns x milliseconds, exact for whole nanoseconds.
func ms(x float64) time.Duration { return time.Duration(x * 1e6) }

// runRateSteps applies steps to key in order. Before each call a Peek at
// the same instant must answer what the call decides; after a denied call
// whose RetryAfter is finite, a peek RetryAfter later must be admitted and
// one a nanosecond sooner denied.
func runRateSteps(t *testing.T, l Limiter, key string, steps []rstep) {
	t.Helper()
	for i, s := range steps {
		now := at(s.at)
		p := l.Peek(key, now, s.n)
		r := l.AllowN(key, now, s.n)
		if r.Err != nil {
			t.Fatalf("step %d (t=%v n=%d): error %v", i, s.at, s.n, r.Err)
		}
		if p != r {
			t.Fatalf("step %d (t=%v n=%d): peek %+v, then AllowN %+v", i, s.at, s.n, p, r)
		}
		if r.Allowed != s.allowed || r.Remaining != s.rem || r.Limit != s.limit || r.Window != s.window ||
			s.retry != anyRetry && r.RetryAfter != s.retry {
			t.Fatalf("step %d (t=%v n=%d): %+v\nwant allowed=%v remaining=%d limit=%d window=%v retry=%v",
				i, s.at, s.n, r, s.allowed, s.rem, s.limit, s.window, s.retry)
		}
		checkResultSane(t, r)
		if !r.Allowed && r.RetryAfter != Never {
			checkRetryExact(t, l, key, now, s.n, r.RetryAfter)
		}
	}
}

// checkRetryExact checks that n units for key fit at now+retry and not a
// nanosecond sooner, by peeks (which change nothing).
func checkRetryExact(t *testing.T, l Limiter, key string, now time.Time, n int, retry time.Duration) {
	t.Helper()
	if r := l.Peek(key, now.Add(retry-1), n); r.Allowed {
		t.Fatalf("n=%d at %v: admitted a nanosecond before its RetryAfter %v: %+v", n, now.Sub(t0), retry, r)
	}
	if r := l.Peek(key, now.Add(retry), n); !r.Allowed {
		t.Fatalf("n=%d at %v: denied at its RetryAfter %v: %+v", n, now.Sub(t0), retry, r)
	}
}

// twoRates is the shape: a short burst limit and a long quota,
// given longest last.
var twoRates = []Rate{{3, time.Second}, {10, time.Minute}}

// threeRates: 2 per 100 ms, 5 per second, 8 per 10 s, given out of order.
var threeRates = []Rate{{5, time.Second}, {8, 10 * time.Second}, {2, 100 * time.Millisecond}}

const (
	w100ms = 100 * time.Millisecond
	w1s    = time.Second
	w10s   = 10 * time.Second
	w1m    = time.Minute
)

func TestRatesFixedWindowSteps(t *testing.T) {
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

func TestRatesSlidingLogSteps(t *testing.T) {
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

func TestRatesSlidingCounterSteps(t *testing.T) {
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

func TestRatesGCRASteps(t *testing.T) {
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

// rateCfg returns a config of alg with rates (10 buckets per window for
// the counter), no janitor.
func rateCfg(alg Algorithm, rates []Rate) Config {
	return Config{Algorithm: alg, Rates: rates, Buckets: 10, JanitorInterval: -1}
}

// TestRatesDenialConsumesNothing: a limiter fed random requests, many of
// them denied by one rate while the others admit, decides every admitted
// request exactly as a twin fed only the admitted ones; then each rate,
// made binding in turn by raising the others' limits, reports the same
// state in both.
func TestRatesDenialConsumesNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := rateCfg(alg, threeRates)
			a, b := mustNew(t, cfg), mustNew(t, cfg)
			rng := rand.New(rand.NewPCG(7, uint64(alg)))
			now := at(0)
			denied := 0
			for range 3000 {
				now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
				n := 1 + rng.IntN(2)
				r := a.AllowN("k", now, n)
				if !r.Allowed {
					denied++
					continue
				}
				if w := b.AllowN("k", now, n); w != r {
					t.Fatalf("at %v n=%d: %+v; the twin that saw no denials: %+v", now.Sub(t0), n, r, w)
				}
			}
			if denied < 500 {
				t.Fatalf("only %d denials: the test does not exercise them", denied)
			}
			end := now
			for k := range threeRates {
				lims := []int{MaxSlidingLogLimit, MaxSlidingLogLimit, MaxSlidingLogLimit}
				lims[k] = threeRates[k].Limit
				for _, l := range []Limiter{a, b} {
					if err := l.SetLimits("k", lims...); err != nil {
						t.Fatal(err)
					}
				}
				for _, d := range []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond, 5 * time.Second} {
					for n := range threeRates[k].Limit + 2 {
						if pa, pb := a.Peek("k", end.Add(d), n), b.Peek("k", end.Add(d), n); pa != pb || pa.Window != threeRates[k].Window {
							t.Fatalf("rate %v binding, peek n=%d at +%v: %+v; twin %+v", threeRates[k], n, d, pa, pb)
						}
					}
				}
			}
		})
	}
}

// TestRatesSetLimitsKeepUsage: a tier set with SetLimits counts the usage
// the key already has against each new limit; the sliding log keeps every
// stamp (its ring shrinks later, under the skips of the shorter window).
func TestRatesSetLimitsKeepUsage(t *testing.T) {
	set := func(l Limiter, lims ...int) {
		t.Helper()
		if err := l.SetLimits("k", lims...); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("sliding_log", func(t *testing.T) {
		l := mustNew(t, Config{Algorithm: SlidingLog, Rates: []Rate{{3, time.Second}, {10, 10 * time.Second}}})
		runRateSteps(t, l, "k", []rstep{
			{0, 3, true, 0, 3, w1s, 0},
			{1, 3, true, 0, 3, w1s, 0},
			{2, 3, true, 0, 3, w1s, 0}, // 10 s: 1 left
		})
		set(l, 5, 9)
		runRateSteps(t, l, "k", []rstep{{2.5, 1, false, 0, 9, w10s, ms(7500)}})
		set(l, 5, 20)
		runRateSteps(t, l, "k", []rstep{{2.5, 2, true, 0, 5, w1s, 0}}) // 10 s: 11 of 20
		set(l, 3, 10)                                                  // both rates above their limit now
		runRateSteps(t, l, "k", []rstep{
			{2.6, 1, false, 0, 10, w10s, ms(7400)},
			{10, 3, false, 2, 10, w10s, time.Second}, // the second is empty, 10 s holds 8
			// The ring (16 stamps since the limit of 20) shrinks to 10
			// while the second's skip counts 8 stamps.
			{10, 2, true, 0, 10, w10s, 0},
			{10.5, 1, false, 0, 10, w10s, ms(500)},
			{11, 1, true, 2, 10, w10s, 0}, // the second at 2 left too
			{11, 2, true, 0, 10, w10s, 0}, // 10 s: 10; the second: 3
			{11.5, 1, false, 0, 10, w10s, ms(500)},
		})
		ll := l.(*LogLimiter)
		s := ll.tab.shardFor(ll.tab.hash("k"))
		s.mu.Lock()
		slot, _ := find(s, ll.tab.hash("k"), "k")
		if r := s.rec(slot); r.cap != 10 || r.count != 10 {
			t.Errorf("ring of capacity %d holding %d stamps, want 10 and 10", r.cap, r.count)
		}
		s.mu.Unlock()
	})
	t.Run("gcra", func(t *testing.T) {
		// Emission intervals 250 ms and 6 s; the debt scales by old/new.
		l := mustNew(t, Config{Algorithm: GCRA, Rates: []Rate{{4, time.Second}, {10, time.Minute}}})
		runRateSteps(t, l, "k", []rstep{{0, 4, true, 0, 4, w1s, 0}})
		set(l, 2, 5) // debts 1 s -> 2 s, 24 s -> 48 s
		runRateSteps(t, l, "k", []rstep{
			{0, 1, false, 0, 2, w1s, ms(1500)},
			{1.5, 1, true, 0, 5, w1m, 0},
		})
		set(l, 4, 10) // debts 1 s -> 0.5 s, 58.5 s -> 29.25 s
		runRateSteps(t, l, "k", []rstep{
			{1.5, 0, true, 2, 4, w1s, 0},
			{1.5, 3, false, 2, 4, w1s, ms(250)},
		})
		if err := l.ClearLimit("k"); err != nil {
			t.Fatal(err)
		}
		if err := l.SetDefaultLimits(2, 10); err != nil {
			t.Fatal(err)
		}
		// The second's default drops to 2: its debt of 0.5 s doubles at
		// the key's next decision.
		runRateSteps(t, l, "k", []rstep{{1.5, 1, false, 0, 2, w1s, ms(500)}})
	})
	t.Run("fixed_window", func(t *testing.T) {
		l := mustNew(t, Config{Algorithm: FixedWindow, Rates: twoRates})
		runRateSteps(t, l, "k", []rstep{{0, 3, true, 0, 3, w1s, 0}, {1, 3, true, 0, 3, w1s, 0}})
		set(l, 10, 5) // the minute holds 6 of 5
		runRateSteps(t, l, "k", []rstep{{2, 1, false, 0, 5, w1m, 58 * time.Second}})
		set(l, 10, 8)
		runRateSteps(t, l, "k", []rstep{{2, 2, true, 0, 8, w1m, 0}, {2, 1, false, 0, 8, w1m, 58 * time.Second}})
	})
	t.Run("sliding_counter", func(t *testing.T) {
		l := mustNew(t, Config{Algorithm: SlidingCounter, Rates: twoRates, Buckets: 10})
		runRateSteps(t, l, "k", []rstep{{0, 3, true, 0, 3, w1s, 0}, {1.1, 3, true, 0, 3, w1s, 0}})
		set(l, 10, 5) // the minute holds 6 of 5 in its bucket 0
		runRateSteps(t, l, "k", []rstep{{2, 1, false, 0, 5, w1m, anyRetry}})
		set(l, 10, 8)
		runRateSteps(t, l, "k", []rstep{{2, 2, true, 0, 8, w1m, 0}, {2, 1, false, 0, 8, w1m, anyRetry}})
	})
}

// TestRatesBanOneRate: a limit of 0 on any one rate bans the key, whatever
// the others allow; lifting it restores the key's usage. Other keys keep
// the defaults.
func TestRatesBanOneRate(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, rateCfg(alg, twoRates))
			if r := l.AllowN("k", at(0), 2); !r.Allowed {
				t.Fatalf("first call: %+v", r)
			}
			for _, ban := range [][]int{{0, 10}, {3, 0}, {0, 0}} {
				if err := l.SetLimits("k", ban...); err != nil {
					t.Fatal(err)
				}
				win := w1m // both at 0 remaining: ties to the longest window
				if ban[1] != 0 {
					win = w1s
				}
				for _, sec := range []float64{0.5, 100, 1e6} {
					for _, n := range []int{1, 2, 11} {
						r := l.Peek("k", at(sec), n)
						if r.Allowed || r.RetryAfter != Never || r.Limit != 0 || r.Remaining != 0 || r.Window != win {
							t.Fatalf("banned %v, peek n=%d at %v s: %+v", ban, n, sec, r)
						}
					}
				}
				if r := l.AllowN("k", at(0.5), 1); r.Allowed || r.RetryAfter != Never || r.Window != win {
					t.Fatalf("banned %v: %+v", ban, r)
				}
				if l.AllowAt("k", at(0.5)) || l.AllowBytesAt([]byte("k"), at(0.5)) {
					t.Fatalf("banned %v: admitted by a bool form", ban)
				}
				if r := l.AllowN("k", at(0.5), 0); !r.Allowed {
					t.Fatalf("banned %v: a peek of 0 units denied: %+v", ban, r)
				}
				if r := l.AllowN(fmt.Sprint("other", ban), at(0.5), 3); !r.Allowed {
					t.Fatalf("banned %v: another key denied: %+v", ban, r)
				}
			}
			if err := l.ClearLimit("k"); err != nil {
				t.Fatal(err)
			}
			// The 2 units of 0 s still count in the second (GCRA has
			// refilled 1.5 of them by 0.5 s).
			want := 1
			if alg == GCRA {
				want = 2
			}
			got := 0
			for got <= 3 && l.AllowN("k", at(0.5), 1).Allowed {
				got++
			}
			if got != want {
				t.Fatalf("after the ban was lifted: %d admitted at 0.5 s, want %d", got, want)
			}
		})
	}
}

// TestRatesDefaultLimits: SetDefaultLimits takes one limit per rate in the
// order of Config.Rates and changes every key without limits of its own;
// Config reports them; bad calls change nothing.
func TestRatesDefaultLimits(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, rateCfg(alg, twoRates))
			if err := l.SetLimits("vip", 5, 100); err != nil {
				t.Fatal(err)
			}
			if err := l.SetDefaultLimits(1, 10); err != nil {
				t.Fatal(err)
			}
			if got := l.Config().Rates; !slices.Equal(got, []Rate{{1, time.Second}, {10, time.Minute}}) {
				t.Fatalf("Config().Rates = %v", got)
			}
			runRateSteps(t, l, "k", []rstep{{0, 1, true, 0, 1, w1s, 0}, {0, 1, false, 0, 1, w1s, anyRetry}, {0, 2, false, 0, 1, w1s, Never}})
			runRateSteps(t, l, "vip", []rstep{{0, 5, true, 0, 5, w1s, 0}})
			if err := l.ClearLimit("vip"); err != nil {
				t.Fatal(err)
			}
			// vip used 5 in this second: over the default 1.
			runRateSteps(t, l, "vip", []rstep{{0.5, 1, false, 0, 1, w1s, anyRetry}})

			bad := []func() error{
				func() error { return l.SetDefaultLimits(1) },
				func() error { return l.SetDefaultLimits(1, 2, 3) },
				func() error { return l.SetDefaultLimit(1) },
				func() error { return l.SetDefaultLimits(-1, 2) },
				func() error { return l.SetDefaultLimits(1, MaxLimit+1) },
				func() error { return l.SetLimit("k", 1) },
				func() error { return l.SetLimits("k") },
				func() error { return l.SetLimits("new", 1, 2, 3) },
				func() error { return l.SetLimits("new", 1, -2) },
				func() error { return l.SetLimits("", 1, 2) },
			}
			if alg == SlidingLog {
				bad = append(bad, func() error { return l.SetLimits("new", 1, MaxSlidingLogLimit+1) })
			}
			for i, f := range bad {
				if err := f(); err == nil || !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrInvalidKey) {
					t.Fatalf("bad call %d: %v", i, err)
				}
			}
			if got := l.Config().Rates; !slices.Equal(got, []Rate{{1, time.Second}, {10, time.Minute}}) {
				t.Fatalf("after bad calls, Config().Rates = %v", got)
			}
			if r := l.Peek("new", at(0), 1); !r.Allowed || l.Len() != 2 {
				t.Fatalf("after bad calls: peek %+v, %d keys (a bad SetLimits stored a key?)", r, l.Len())
			}
		})
	}
}

// TestRatesReset: Reset forgets every rate's usage and keeps a key's own
// limits.
func TestRatesReset(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, rateCfg(alg, twoRates))
			for i, n := range []int{3, 3, 3, 1} {
				if r := l.AllowN("k", at(1.1*float64(i)), n); !r.Allowed {
					t.Fatalf("%d at %v s: %+v", n, 1.1*float64(i), r)
				}
			}
			if r := l.AllowN("k", at(3.5), 1); r.Allowed {
				t.Fatalf("over both rates: %+v", r)
			}
			if err := l.Reset("k"); err != nil {
				t.Fatal(err)
			}
			runRateSteps(t, l, "k", []rstep{{3.5, 3, true, 0, 3, w1s, 0}})
			if err := l.SetLimits("k", 2, 6); err != nil {
				t.Fatal(err)
			}
			runRateSteps(t, l, "k", []rstep{{5, 2, true, 0, 2, w1s, 0}, {6.1, 2, false, 1, 6, w1m, anyRetry}})
			if err := l.Reset("k"); err != nil {
				t.Fatal(err)
			}
			runRateSteps(t, l, "k", []rstep{{5, 3, false, 2, 2, w1s, Never}, {5, 2, true, 0, 2, w1s, 0}}) // stale: decided at 6.1 s
			// Reset does not move time back: a stale call is decided at
			// the key's latest instant.
			if err := l.Reset("k"); err != nil {
				t.Fatal(err)
			}
			runRateSteps(t, l, "k", []rstep{{1, 2, true, 0, 2, w1s, 0}, {1, 1, false, 0, 2, w1s, anyRetry}})
			if r := l.AllowN("k", at(1), 1); !at(1).Add(r.RetryAfter).After(at(6.1)) {
				t.Fatalf("stale call after Reset: %+v, decided before the key's latest instant", r)
			}
		})
	}
}

// TestRatesBindingTiesToTheLongestWindow: of rates with equal remaining,
// the Result reports the longest window's, even when another's resets
// later: at 59.5 s the 7 s window [55 s, 62 s) (t0 is 1 s past a multiple
// of 7 s) resets 2 s after the minute.
func TestRatesBindingTiesToTheLongestWindow(t *testing.T) {
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

// TestRatesTimeRule runs stale patterns (time_test.go's and some of its
// own: a sawtooth of ever earlier instants, every other call half a minute
// early) on every algorithm with 100 per minute and 5 per second: each
// decides exactly as the sequence raised to its running maximum, and on
// that timeline the sliding log never holds more than a limit in any
// window of any rate, nor the fixed window in an aligned one.
func TestRatesTimeRule(t *testing.T) {
	rates := []Rate{{100, time.Minute}, {5, time.Second}}
	patterns := append(slices.Clone(stalePatterns),
		stalePattern{"sawtooth of ever earlier instants", func(i int, _ *rand.Rand) time.Duration {
			return time.Duration(i%40) * 100 * time.Millisecond
		}, false},
		stalePattern{"every other call 30 s early", func(i int, _ *rand.Rand) time.Duration {
			return time.Duration(i%2) * 30 * time.Second
		}, false},
	)
	for _, p := range patterns {
		for _, alg := range allAlgorithms {
			t.Run(p.name+"/"+alg.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(11, uint64(alg)))
				var calls []timedCall
				for i := range 20 * 120 {
					trueNow := at(float64(i) / 20)
					now := trueNow.Add(-p.skew(i, rng)).Truncate(time.Microsecond)
					calls = append(calls, timedCall{key: "k", now: now, true: trueNow, peek: i%7 == 3})
				}
				cfg := rateCfg(alg, rates)
				decided, _ := clampedRun(t, cfg, calls)
				var as []admission
				for _, x := range decided["k"] {
					as = append(as, admission{"k", x.UnixNano(), 1})
				}
				if len(as) < 100 {
					t.Fatalf("%d admitted", len(as))
				}
				if alg == SlidingLog || alg == FixedWindow {
					checkAdmissions(t, alg, rates, 10, as, func(k int) int { return rates[k].Limit })
				}
			})
		}
	}
}

// TestRatesConfig: Config.Rates is validated rate by rate, copied by New
// and by Config.
func TestRatesConfig(t *testing.T) {
	bad := []struct {
		name string
		alg  Algorithm
		cfg  Config
	}{
		{"too many rates", FixedWindow, Config{Rates: []Rate{{1, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 5}}}},
		{"a window twice", GCRA, Config{Rates: []Rate{{1, time.Second}, {2, time.Second}}}},
		{"Rates and Limit", FixedWindow, Config{Limit: 3, Rates: []Rate{{1, time.Second}}}},
		{"Rates and Window", FixedWindow, Config{Window: time.Second, Rates: []Rate{{1, time.Minute}}}},
		{"a zero window", SlidingLog, Config{Rates: []Rate{{1, time.Second}, {1, 0}}}},
		{"a window too long", GCRA, Config{Rates: []Rate{{1, time.Second}, {1, MaxWindow + 1}}}},
		{"a negative limit", FixedWindow, Config{Rates: []Rate{{1, time.Second}, {-1, time.Minute}}}},
		{"a log limit too large", SlidingLog, Config{Rates: []Rate{{1, time.Second}, {MaxSlidingLogLimit + 1, time.Minute}}}},
		{"a window not a multiple of the buckets", SlidingCounter, Config{Buckets: 10, Rates: []Rate{{1, time.Second}, {1, 15}}}},
	}
	for _, b := range bad {
		b.cfg.Algorithm = b.alg
		if l, err := New(b.cfg); !errors.Is(err, ErrInvalidConfig) || l != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalidConfig", b.name, l, err)
		}
	}
	four := []Rate{{4, time.Second}, {3, 2 * time.Second}, {2, 3 * time.Second}, {1, 4 * time.Second}}
	for _, alg := range allAlgorithms {
		cfg := Config{Algorithm: alg, Rates: slices.Clone(four), JanitorInterval: -1}
		l := mustNew(t, cfg)
		cfg.Rates[0].Limit = 99 // the caller's slice is not the limiter's
		got := l.Config()
		if got.Limit != 0 || got.Window != 0 || !slices.Equal(got.Rates, four) {
			t.Fatalf("%v: Config() = %+v", alg, got)
		}
		got.Rates[1].Limit = 99
		if !slices.Equal(l.Config().Rates, four) {
			t.Fatalf("%v: Config().Rates aliases the limiter's", alg)
		}
		// Four rates: the 4 s one (1 unit) binds a fresh key.
		if r := l.AllowN("k", at(0), 1); !r.Allowed || r.Window != 4*time.Second || r.Limit != 1 || r.Remaining != 0 {
			t.Fatalf("%v: %+v", alg, r)
		}
		if r := l.AllowN("k", at(0), 2); r.Allowed || r.RetryAfter != Never || r.Window != 4*time.Second {
			t.Fatalf("%v: %+v", alg, r)
		}
	}
}

// TestRatesExtremes: a nanosecond's window beside ten years', limits of 1
// and the largest, costs up to MaxLimit, instants from the epoch to the
// last accepted one and back: every Result is sane, and a finite
// RetryAfter is exact.
func TestRatesExtremes(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			big := MaxLimit
			if alg == SlidingLog {
				big = 1000 // the ring would grow to 64 MiB at MaxSlidingLogLimit
			}
			for _, rates := range [][]Rate{
				{{1, 1}, {big, MaxWindow}},
				{{big, 1}, {1, MaxWindow}},
				{{3, 1}, {5, 2}, {7, 3}, {big, MaxWindow}},
			} {
				l := mustNew(t, Config{Algorithm: alg, Rates: rates, Buckets: 1})
				hi := time.Unix(0, maxInstant-1)
				instants := []time.Time{time.Unix(0, 0), time.Unix(0, 1), time.Unix(0, 2), t0, t0, t0.Add(1), t0.Add(-1),
					hi.Add(-MaxWindow), hi.Add(-2), hi.Add(-1), hi, time.Unix(0, 5), hi}
				for _, now := range instants {
					for _, n := range []int{0, 1, 2, 3, big, big + 1, MaxLimit} {
						r := l.AllowN("k", now, n)
						if r.Err != nil {
							t.Fatalf("%v at %d n=%d: %+v", rates, now.UnixNano(), n, r)
						}
						checkResultSane(t, r)
						if !r.Allowed && r.RetryAfter != Never && now.UnixNano()+int64(r.RetryAfter) <= maxInstant {
							checkRetryExact(t, l, "k", now, n, r.RetryAfter)
						}
					}
				}
			}
		})
	}
}
