package core

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// Comparison tables: the scenarios whose expected values differ by
// algorithm, each test named for the behaviour it checks. The sliding
// counter's values are those of its policy, S2: the oldest bucket weighted
// by its remaining overlap, rounded up (S1 would drop it whole). What every
// algorithm shares is in TestConformance.

func TestSeedScenarioBoundaryBurst(t *testing.T) {
	// Limit 10 per 60 s; 10 requests 100 ms before a window boundary, one
	// more 200 ms later. Only the fixed window admits it.
	type want struct {
		allowed    bool
		remaining  int
		retryAfter time.Duration
		resetAfter time.Duration
	}
	wants := map[Algorithm]want{
		FixedWindow:    {true, 9, 0, 59900 * time.Millisecond},
		SlidingLog:     {false, 0, 59800 * time.Millisecond, 59800 * time.Millisecond},
		SlidingCounter: {false, 0, 59 * time.Second, 59900 * time.Millisecond},
		GCRA:           {false, 0, 5800 * time.Millisecond, 59800 * time.Millisecond},
	}
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 10, time.Minute, time.Second))
		for i := range 10 {
			if r := l.AllowN("client", at(59.9), 1); !r.Allowed || r.Remaining != 9-i {
				t.Fatalf("%v: request %d: %+v", alg, i, r)
			}
		}
		r := l.AllowN("client", at(60.1), 1)
		w := wants[alg]
		got := want{r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter}
		if got != w {
			t.Errorf("%v: 11th request 200 ms later: got %+v, want %+v", alg, got, w)
		}
	}
}

func TestWindowBoundaryBurst(t *testing.T) {
	tables := map[Algorithm][]step{
		FixedWindow: concat(countdown(59, 10, 0), countdown(60, 10, 0),
			[]step{{118.999, 1, false, 0, 2}}, countdown(120, 10, 0),
			[]step{{120, 1, false, 0, 60}}),
		SlidingLog: concat(countdown(59, 10, 0), repeat(10, step{60, 1, false, 0, 59}),
			[]step{{118.999, 1, false, 0, 1}}, countdown(120, 10, 0),
			[]step{{120, 1, false, 0, 60}}),
		SlidingCounter: concat(countdown(59, 10, 0), repeat(10, step{60, 1, false, 0, 60}),
			[]step{{118.999, 1, false, 0, 1}}, countdown(120, 10, 0),
			[]step{{120, 1, false, 0, 61}}),
	}
	for alg, steps := range tables {
		t.Run(alg.String(), func(t *testing.T) {
			runSteps(t, mustNew(t, cfgFor(alg, 10, time.Minute, time.Second)), "k", steps)
		})
	}
}

func TestDeniedRequestsNotCounted(t *testing.T) {
	type row struct {
		allowed bool
		rem     int
		retry   int64
	}
	a := func(rem int) row { return row{true, rem, 0} }
	d := func(retry int64) row { return row{false, 0, retry} }
	tables := map[Algorithm][]row{
		FixedWindow: {a(4), a(3), a(2), a(1), a(0), d(5), d(4), d(3), d(2), d(1),
			a(4), a(3), a(2), a(1), a(0), d(5), d(4), d(3), d(2), d(1)},
		SlidingLog: {a(4), a(3), a(2), a(1), a(0), d(5), d(4), d(3), d(2), d(1),
			a(0), a(0), a(0), a(0), a(0), d(5), d(4), d(3), d(2), d(1)},
		SlidingCounter: {a(4), a(3), a(2), a(1), a(0), d(6), d(5), d(4), d(3), d(2),
			d(1), a(0), a(0), a(0), a(0), a(0), d(6), d(5), d(4), d(3)},
	}
	longRun := map[Algorithm]int{FixedWindow: 50, SlidingLog: 50, SlidingCounter: 46}
	for alg, rows := range tables {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, cfgFor(alg, 5, 10*time.Second, time.Second))
			steps := make([]step, len(rows))
			for i, r := range rows {
				steps[i] = step{float64(i), 1, r.allowed, r.rem, r.retry}
			}
			runSteps(t, l, "poller", steps)
			l2 := mustNew(t, cfgFor(alg, 5, 10*time.Second, time.Second))
			admitted := 0
			for i := range 100 {
				if l2.AllowN("poller", at(float64(i)), 1).Allowed {
					admitted++
				}
			}
			if admitted != longRun[alg] {
				t.Fatalf("one call per second for 100 s admitted %d, want %d", admitted, longRun[alg])
			}
		})
	}
}

func TestCounterKeepsSliding(t *testing.T) {
	for _, g := range []time.Duration{time.Second, 500 * time.Millisecond} {
		for _, alg := range []Algorithm{SlidingLog, SlidingCounter} {
			// Part 1: 6 calls at 0, then one poll every 5 s (and every 2 s).
			firstAdmit := 10.0
			if alg == SlidingCounter {
				firstAdmit = 10 + g.Seconds()
			}
			for _, period := range []float64{5, 2} {
				l := mustNew(t, cfgFor(alg, 5, 10*time.Second, g))
				sixth := int64(10)
				if alg == SlidingCounter {
					sixth = 11
				}
				runSteps(t, l, "p", concat(countdown(0, 5, 0), []step{{0, 1, false, 0, sixth}}))
				admitted, first := 0, -1.0
				for p := period; p <= 100; p += period {
					if l.AllowN("p", at(p), 1).Allowed {
						admitted++
						if first < 0 {
							first = p
						}
					}
				}
				wantFirst := math.Ceil(firstAdmit/period) * period
				if first != wantFirst {
					t.Errorf("%v G=%v period %v: first admitted poll at %v, want %v", alg, g, period, first, wantFirst)
				}
				want := map[float64]map[Algorithm]int{
					5: {SlidingLog: 19, SlidingCounter: 18},
					2: {SlidingLog: 46, SlidingCounter: 38},
				}[period][alg]
				if admitted != want {
					t.Errorf("%v G=%v period %v: admitted %d polls, want %d", alg, g, period, admitted, want)
				}
			}
		}
	}
	// Part 1 exact values with G = 1 s.
	l := mustNew(t, cfgFor(SlidingCounter, 5, 10*time.Second, time.Second))
	runSteps(t, l, "p", concat(countdown(0, 5, 0), []step{{0, 1, false, 0, 11},
		{5, 1, false, 0, 6}, {10, 1, false, 0, 1}, {15, 1, true, dontCare, 0}}))
	l = mustNew(t, cfgFor(SlidingLog, 5, 10*time.Second, 0))
	runSteps(t, l, "p", concat(countdown(0, 5, 0), []step{{0, 1, false, 0, 10},
		{5, 1, false, 0, 5}, {10, 1, true, dontCare, 0}}))

	// Part 2: a call every 0.5 s, gaps smaller than one bucket.
	wantAdmits := map[Algorithm][]float64{
		SlidingLog:     {0, 0.5, 1, 1.5, 2, 10, 10.5, 11, 11.5, 12, 20, 20.5, 21, 21.5, 22},
		SlidingCounter: {0, 0.5, 1, 1.5, 2, 10.5, 11, 11.5, 12, 13, 21, 21.5, 22},
	}
	for alg, want := range wantAdmits {
		l := mustNew(t, cfgFor(alg, 5, 10*time.Second, time.Second))
		var got []float64
		for i := 0; i <= 44; i++ {
			if l.AllowN("q", at(float64(i)/2), 1).Allowed {
				got = append(got, float64(i)/2)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%v part 2: admitted at %v, want %v", alg, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%v part 2: admitted at %v, want %v", alg, got, want)
			}
		}
	}
}

func TestRemainingNeverNegative(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 3, time.Minute, time.Second))
		retry := map[Algorithm]int64{FixedWindow: 59, SlidingLog: 59, SlidingCounter: 60, GCRA: 19}[alg]
		rem3 := map[Algorithm]int{FixedWindow: 0, SlidingLog: 0, SlidingCounter: 0, GCRA: 0}[alg]
		runSteps(t, l, "k", []step{
			{0, 2, true, 1, 0},
			{1, 2, false, dontCare, retry},
			{2, 1, true, rem3, 0},
		})
		if alg != GCRA {
			// The remaining of the denied call is 1, not -1.
			l := mustNew(t, cfgFor(alg, 3, time.Minute, time.Second))
			l.AllowN("k", at(0), 2)
			if r := l.AllowN("k", at(1), 2); r.Remaining != 1 {
				t.Fatalf("%v: denied AllowN(2) remaining %d, want 1", alg, r.Remaining)
			}
		}
		for i := range 5 {
			if r := l.AllowN("k", at(3+float64(i)), 1); r.Remaining < 0 {
				t.Fatalf("%v: negative remaining %+v", alg, r)
			}
		}
	}
}

func TestResetNotEarly(t *testing.T) {
	l := mustNew(t, cfgFor(FixedWindow, 2, 30*time.Second, 0))
	runSteps(t, l, "k", []step{{0, 1, true, 1, 0}, {0, 1, true, 0, 0}, {0.4, 1, false, 0, 30}, {30, 1, true, 1, 0}})
	if r := l.AllowN("k", at(30), 0); ceilSeconds(r.ResetAfter) != 30 {
		t.Fatalf("reset after %v", r.ResetAfter)
	}
	r := mustNew(t, cfgFor(FixedWindow, 2, 30*time.Second, 0)).AllowN("k", at(0.4), 1)
	if ceilSeconds(r.ResetAfter) != 30 {
		t.Fatalf("X-RateLimit-Reset at 0.4: %v, want ceil 30", r.ResetAfter)
	}

	// Step 5: sliding log.
	l = mustNew(t, cfgFor(SlidingLog, 2, 30*time.Second, 0))
	runSteps(t, l, "k", []step{{0, 1, true, 1, 0}, {10, 1, true, 0, 0}, {12, 1, false, 0, 18}})
	if r := l.Peek("k", at(12), 1); ceilSeconds(r.ResetAfter) != 18 {
		t.Fatalf("X-RateLimit-Reset at 12: %v, want ceil 18", r.ResetAfter)
	}
	runSteps(t, l, "k", []step{{30, 1, true, 0, 0}, {30.001, 1, false, 0, 10}})

	// Step 4: for every denied call, the advertised instant is in the
	// future and a call then is admitted, for every algorithm.
	for _, alg := range allAlgorithms {
		rng := rand.New(rand.NewPCG(8, uint64(alg)))
		times := make([]float64, 10000)
		for i := range times {
			times[i] = float64(rng.IntN(300_000)) / 1000
		}
		sortFloats(times)
		l := mustNew(t, cfgFor(alg, 2, 30*time.Second, time.Second))
		for _, sec := range times {
			r := l.AllowN("k", at(sec), 1)
			checkResultSane(t, r)
			if r.Allowed {
				continue
			}
			if r.RetryAfter <= 0 || r.ResetAfter <= 0 {
				t.Fatalf("%v at %v: %+v", alg, sec, r)
			}
			if p := l.Peek("k", at(sec).Add(r.RetryAfter), 1); !p.Allowed {
				t.Fatalf("%v at %v: retry after %v not admitted: %+v", alg, sec, r.RetryAfter, p)
			}
			if p := l.Peek("k", at(sec).Add(r.RetryAfter-1), 1); p.Allowed {
				t.Fatalf("%v at %v: admitted 1ns before retry-after %v: %+v", alg, sec, r.RetryAfter, p)
			}
		}
	}
}

func sortFloats(x []float64) {
	for i := 1; i < len(x); i++ {
		for j := i; j > 0 && x[j] < x[j-1]; j-- {
			x[j], x[j-1] = x[j-1], x[j]
		}
	}
}

func TestNegativeCost(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA} {
		l := mustNew(t, cfgFor(alg, 5, time.Minute, time.Second))
		runSteps(t, l, "k", []step{{0, 3, true, 2, 0}})
		r := l.AllowN("k", at(1), -2)
		wantErr(t, r.Err, ErrInvalidCost)
		if r.Allowed {
			t.Fatal("negative cost allowed")
		}
		if p := l.Peek("k", at(1), 0); p.Remaining != 2 {
			t.Fatalf("%v: remaining after negative cost %d, want 2", alg, p.Remaining)
		}
		if alg == GCRA {
			continue // GCRA refills continuously; the rest is about counts
		}
		retry := int64(57)
		if alg == SlidingCounter {
			retry = 58
		}
		runSteps(t, l, "k", []step{
			{2, 0, true, 2, 0},
			{3, 3, false, 2, retry},
			{3, 2, true, 0, 0},
			{4, 0, true, 0, 0},
		})
		wantErr(t, l.AllowN("k", at(5), math.MinInt).Err, ErrInvalidCost)
		wantErr(t, l.Peek("k", at(5), -1).Err, ErrInvalidCost)
		if p := l.Peek("k", at(5), 0); p.Remaining != 0 {
			t.Fatalf("%v: state changed by MinInt: %+v", alg, p)
		}
	}
}

func TestSubSecondWindow(t *testing.T) {
	tables := map[Algorithm][]step{
		FixedWindow: {{0, 1, true, 1, 0}, {0, 1, true, 0, 0}, {0, 1, false, 0, 1}, {0.25, 1, false, 0, 1},
			{0.5, 1, true, 1, 0}, {0.5, 1, true, 0, 0}, {0.5, 1, false, 0, 1}, {1, 1, true, 1, 0}},
		SlidingLog: {{0, 1, true, 1, 0}, {0, 1, true, 0, 0}, {0, 1, false, 0, 1}, {0.25, 1, false, 0, 1},
			{0.5, 1, true, 1, 0}, {0.5, 1, true, 0, 0}, {0.5, 1, false, 0, 1}, {1, 1, true, 1, 0}},
		SlidingCounter: {{0, 1, true, 1, 0}, {0, 1, true, 0, 0}, {0, 1, false, 0, 1}, {0.25, 1, false, 0, 1},
			{0.5, 1, false, 0, 1}, {0.5, 1, false, 0, 1}, {0.5, 1, false, 0, 1}, {1, 1, true, 1, 0}},
	}
	for alg, steps := range tables {
		runSteps(t, mustNew(t, cfgFor(alg, 2, 500*time.Millisecond, 100*time.Millisecond)), "k", steps)
	}
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 1, time.Millisecond, 0))
		if alg == SlidingCounter {
			// S2 counts a unit until the end of the bucket after W.
			runSteps(t, l, "k", []step{{0, 1, true, 0, 0}, {0.0005, 1, false, 0, 1}, {0.001, 1, false, 0, 1}, {0.0011, 1, true, 0, 0}})
		} else {
			runSteps(t, l, "k", []step{{0, 1, true, 0, 0}, {0.0005, 1, false, 0, 1}, {0.001, 1, true, 0, 0}})
		}
		for _, w := range []time.Duration{0, -time.Second, MaxWindow + 1} {
			_, err := New(Config{Algorithm: alg, Limit: 1, Window: w})
			wantErr(t, err, ErrInvalidConfig)
		}
	}
}

func TestYearLongWindow(t *testing.T) {
	const year = 365 * 24 * time.Hour
	const w = 31_536_000.0
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			l, err := New(Config{Algorithm: alg, Limit: 5, Window: year, Buckets: 365, JanitorInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			sixth, s2 := int64(31_536_000), alg == SlidingCounter
			if s2 {
				sixth = 31_553_280
			}
			runSteps(t, l, "k", concat(countdown(0, 5, 0), []step{{0, 1, false, 0, sixth}}))
			if r := l.Peek("k", at(0), 1); ceilSeconds(r.ResetAfter) != map[bool]int64{false: 31_536_000, true: 31_536_000 + 86_400}[s2] {
				t.Fatalf("reset %v", r.ResetAfter)
			}
			for i := 1; i <= 5; i++ {
				l.Sweep(at(float64(i) * 432_000)) // janitor ticks up to 25 days
			}
			if l.Len() != 1 {
				t.Fatal("janitor evicted a limited key")
			}
			retry25 := int64(29_376_000)
			if s2 {
				retry25 += 17_280
			}
			runSteps(t, l, "k", []step{{2_160_000, 1, false, 0, retry25}})
			if !s2 {
				runSteps(t, l, "k", []step{{w - 1, 1, false, 0, 1}, {w, 1, true, 4, 0}})
			} else {
				runSteps(t, l, "k", []step{{w - 1, 1, false, 0, dontCare}, {w, 1, false, 0, dontCare},
					{31_553_280 - 0.001, 1, false, 0, 1}, {31_553_280, 1, true, dontCare, 0}})
			}
		})
	}
	// Arithmetic headroom.
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, GCRA} {
		l := mustNew(t, Config{Algorithm: alg, Limit: 1_000_000_000, Window: year, Buckets: 365})
		if r := l.AllowN("k", at(0), 1_000_000_000); !r.Allowed || r.Remaining != 0 {
			t.Fatalf("%v: %+v", alg, r)
		}
		// S2 admits one more unit once the straddling bucket's weight has
		// dropped by 1/limit: W + G/1e9 = W + 86.4 µs.
		want := map[Algorithm]int64{FixedWindow: 31_536_000, SlidingCounter: 31_536_001, GCRA: 1}[alg]
		if r := l.AllowN("k", at(0), 1); r.Allowed || ceilSeconds(r.RetryAfter) != want {
			t.Fatalf("%v: %+v, want retry %d", alg, r, want)
		}
	}
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 1_000_000, Window: year})
	if r := l.AllowN("k", at(0), 1_000_000); !r.Allowed {
		t.Fatalf("%+v", r)
	}
	if r := l.AllowN("k", at(0), 1); r.Allowed || ceilSeconds(r.RetryAfter) != 31_536_000 {
		t.Fatalf("%+v", r)
	}
	_, err := New(Config{Algorithm: FixedWindow, Limit: 1, Window: 292 * year})
	wantErr(t, err, ErrInvalidConfig)
}

// TestRetryAfterIsTheFirstAdmittingInstant: for every algorithm, a denied
// request (a peek, or an AllowN) made again exactly RetryAfter later is
// admitted, and made a nanosecond sooner is not, at random instants off every
// resolution grid (windows of a second, a minute, an hour and a year; the
// sliding log's timestamps step 1 ns, 100 ns, 10 µs and 100 ms there).
func TestRetryAfterIsTheFirstAdmittingInstant(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 11))
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA} {
		for _, w := range []time.Duration{time.Second, time.Minute, time.Hour, 365 * 24 * time.Hour,
			1500*time.Millisecond + 7, 61*time.Second + 3} { // the last two off the log's 10 ns and 100 ns grids
			if alg == SlidingCounter && w%time.Duration(DefaultBuckets) != 0 {
				continue // its buckets must divide the window
			}
			l := mustNew(t, Config{Algorithm: alg, Limit: 3, Window: w, JanitorInterval: -1})
			denials := 0
			for trial := range 300 {
				key := strconv.Itoa(trial)
				now := at(float64(rnd.IntN(1000))).Add(time.Duration(rnd.Int64N(int64(w))))
				for range 3 {
					now = now.Add(time.Duration(rnd.Int64N(int64(w / 50))))
					l.AllowN(key, now, 1)
				}
				now = now.Add(time.Duration(rnd.Int64N(int64(w / 50))))
				n := 1 + rnd.IntN(3)
				r := l.Peek(key, now, n)
				switch trial % 3 {
				case 0:
					// A denied AllowN moves the key's latest instant.
					r = l.AllowN(key, now, n)
				case 1:
					// A peek up to 1 s behind the key's latest instant
					// (concurrent callers' jitter) is decided at the
					// latest, its durations measured from its own now.
					now = now.Add(-time.Duration(rnd.Int64N(int64(min(w/50, time.Second)))))
					r = l.Peek(key, now, n)
				}
				if r.Allowed {
					continue
				}
				denials++
				if r.RetryAfter <= 0 || r.RetryAfter == Never {
					t.Fatalf("%v W=%v: denied with RetryAfter %v", alg, w, r.RetryAfter)
				}
				// In this order: a peek at an instant before the key's
				// latest is decided at the latest (the clock rule).
				if p := l.Peek(key, now.Add(r.RetryAfter-time.Nanosecond), n); p.Allowed {
					t.Fatalf("%v W=%v n=%d: admitted a nanosecond before RetryAfter %v", alg, w, n, r.RetryAfter)
				}
				if p := l.Peek(key, now.Add(r.RetryAfter), n); !p.Allowed {
					t.Fatalf("%v W=%v n=%d: denied again RetryAfter %v later: %+v", alg, w, n, r.RetryAfter, p)
				}
			}
			if denials < 100 {
				t.Fatalf("%v W=%v: only %d of 300 trials were denied; the test tests little", alg, w, denials)
			}
			l.Close()
		}
	}
}

// TestDeniedRequestsConsumeNoRate: a limiter fed random requests, many of
// them denied by one rate while the others admit, decides every admitted
// request exactly as a twin fed only the admitted ones; then each rate,
// made binding in turn by raising the others' limits, reports the same
// state in both.
func TestDeniedRequestsConsumeNoRate(t *testing.T) {
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
