package core

// Tests of the time rule: per key, time never goes back. An instant behind
// a key's latest is decided at the latest, for every algorithm, peeks
// included, so a limiter fed a sequence of instants decides exactly as one
// fed the same sequence raised to each key's running maximum, and the
// sliding log never holds more than its limit in any window of that
// timeline. Durations stay measured from the caller's own now.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// timedCall is one call of a pattern: key, the caller's instant, the true
// instant it was made at (for reports), and whether it is a peek.
type timedCall struct {
	key  string
	now  time.Time
	true time.Time
	peek bool
}

// clampedRun feeds calls to a limiter as they are and to a twin with each
// instant raised to its key's running maximum, and checks that both decide
// alike: the same Allowed, Limit and Remaining, and durations that end at
// the same instants. It returns the instants decided at (the raised ones)
// and the true instants of the admitted calls, per key.
func clampedRun(t *testing.T, cfg Config, calls []timedCall) (decided, trueAt map[string][]time.Time) {
	t.Helper()
	l, twin := mustNew(t, cfg), mustNew(t, cfg)
	latest := map[string]time.Time{}
	decided, trueAt = map[string][]time.Time{}, map[string][]time.Time{}
	for i, c := range calls {
		raised := c.now
		if l, ok := latest[c.key]; ok && l.After(raised) {
			raised = l
		}
		var got, want Result
		if c.peek {
			got, want = l.Peek(c.key, c.now, 1), twin.Peek(c.key, raised, 1)
		} else {
			got, want = l.AllowN(c.key, c.now, 1), twin.AllowN(c.key, raised, 1)
			latest[c.key] = raised
		}
		checkResultSane(t, got)
		ends := func(r Result, from time.Time) (retry, reset time.Time) {
			retry = from.Add(r.RetryAfter)
			if r.RetryAfter == 0 || r.RetryAfter == Never {
				retry = time.Time{}
			}
			return retry, from.Add(r.ResetAfter)
		}
		gRetry, gReset := ends(got, c.now)
		wRetry, wReset := ends(want, raised)
		if got.Allowed != want.Allowed || got.Limit != want.Limit || got.Remaining != want.Remaining ||
			!gRetry.Equal(wRetry) || !gReset.Equal(wReset) || got.Err != nil {
			t.Fatalf("call %d (%q at %v, raised to %v, peek %v):\n got %+v\nwant %+v (at the raised instant)",
				i, c.key, c.now.Sub(t0), raised.Sub(t0), c.peek, got, want)
		}
		if got.Allowed && !c.peek {
			decided[c.key] = append(decided[c.key], raised)
			trueAt[c.key] = append(trueAt[c.key], c.true)
		}
	}
	return decided, trueAt
}

// maxInAnyWindow returns the most instants of ts (ascending) inside any
// half-open interval of length w.
func maxInAnyWindow(ts []time.Time, w time.Duration) int {
	best := 0
	for i := range ts {
		j, _ := slices.BinarySearchFunc(ts[i:], ts[i].Add(w), func(x, y time.Time) int { return x.Compare(y) })
		best = max(best, j)
	}
	return best
}

// maxInAlignedWindow returns the most instants of ts in one window
// [k*w, (k+1)*w) of Unix time.
func maxInAlignedWindow(ts []time.Time, w time.Duration) int {
	per := map[int64]int{}
	best := 0
	for _, x := range ts {
		k := x.UnixNano() / int64(w)
		per[k]++
		best = max(best, per[k])
	}
	return best
}

// checkPromise checks the promise of cfg's algorithm on the instants decided
// at: the sliding log never more than the limit in any window, the fixed
// window never more than the limit in one aligned window.
func checkPromise(t *testing.T, cfg Config, decided map[string][]time.Time) {
	t.Helper()
	for key, ts := range decided {
		switch cfg.Algorithm {
		case SlidingLog:
			if got := maxInAnyWindow(ts, cfg.Window); got > cfg.Limit {
				t.Fatalf("key %q: %d admitted in one window of the decided timeline, limit %d", key, got, cfg.Limit)
			}
		case FixedWindow:
			if got := maxInAlignedWindow(ts, cfg.Window); got > cfg.Limit {
				t.Fatalf("key %q: %d admitted in one window, limit %d", key, got, cfg.Limit)
			}
		}
	}
}

// TestTimeRuleStaleCallsAfterABurst is the report that started the rule:
// limit 10 per 10 s, 10 admitted at 0-0.9 s, then at 5 s one call with the
// current time and two with an instant of 2 s, then calls every 0.1 s with
// the current time. When the second stale instant was taken for a clock
// step, every algorithm admitted 20 within [0 s, 10 s).
func TestTimeRuleStaleCallsAfterABurst(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			var calls []timedCall
			for i := range 10 {
				calls = append(calls, timedCall{key: "k", now: at(0.1 * float64(i)), true: at(0.1 * float64(i))})
			}
			calls = append(calls, timedCall{key: "k", now: at(5), true: at(5)},
				timedCall{key: "k", now: at(2), true: at(5)}, timedCall{key: "k", now: at(2), true: at(5)})
			for i := 51; i < 200; i++ {
				calls = append(calls, timedCall{key: "k", now: at(0.1 * float64(i)), true: at(0.1 * float64(i))})
			}
			cfg := cfgFor(alg, 10, 10*time.Second, time.Second)
			decided, _ := clampedRun(t, cfg, calls)
			checkPromise(t, cfg, decided)
			n := 0
			for _, x := range decided["k"] {
				if x.Before(at(10)) {
					n++
				}
			}
			// GCRA refills one unit a second after its burst of 10.
			if want := map[Algorithm]int{GCRA: 19}[alg]; want == 0 && n != 10 || want != 0 && n != want {
				t.Fatalf("%d admitted within [0 s, 10 s)", n)
			}
		})
	}
}

// stalePattern is a traffic pattern of 20 calls per second for five
// minutes on one key, with some instants read early or from another clock.
type stalePattern struct {
	name string
	// skew returns how far call i's instant is behind the true time.
	skew func(i int, rng *rand.Rand) time.Duration
	wall bool // instants without a monotonic reading may step back an hour
}

var stalePatterns = []stalePattern{
	{"on time", func(int, *rand.Rand) time.Duration { return 0 }, false},
	{"every 10th and 11th read 1.2 s early", func(i int, _ *rand.Rand) time.Duration {
		if i%10 == 0 || i%10 == 1 {
			return 1200 * time.Millisecond
		}
		return 0
	}, false},
	{"every 50th and 51st read 3 s early", func(i int, _ *rand.Rand) time.Duration {
		if i%50 == 0 || i%50 == 1 {
			return 3 * time.Second
		}
		return 0
	}, false},
	{"two clocks 1.5 s apart, A B B", func(i int, _ *rand.Rand) time.Duration {
		if i%3 != 0 {
			return 1500 * time.Millisecond
		}
		return 0
	}, false},
	{"random staleness up to 5 s", func(_ int, rng *rand.Rand) time.Duration {
		return time.Duration(rng.Int64N(int64(5 * time.Second)))
	}, false},
	{"an hour-long step back for a minute", func(i int, _ *rand.Rand) time.Duration {
		if i >= 2000 && i < 3200 {
			return time.Hour
		}
		return 0
	}, true},
	{"sawtooth of ever earlier instants", func(i int, _ *rand.Rand) time.Duration {
		return time.Duration(i%40) * 100 * time.Millisecond
	}, false},
	{"every other call 30 s early", func(i int, _ *rand.Rand) time.Duration {
		return time.Duration(i%2) * 30 * time.Second
	}, false},
}

// TestTimeRuleStalePatterns runs every pattern on every algorithm, with
// 100 per minute alone and with 5 per second beside it: each decides
// exactly as the sequence raised to its running maximum, and on that
// timeline every rate keeps its algorithm's promise (checkAdmissions). It
// logs, for the report, the most admitted in one minute of true time.
func TestTimeRuleStalePatterns(t *testing.T) {
	for _, rates := range [][]Rate{{{100, time.Minute}}, {{100, time.Minute}, {5, time.Second}}} {
		for _, p := range stalePatterns {
			for _, alg := range allAlgorithms {
				t.Run(fmt.Sprint(len(rates), "_rates/", p.name, "/", alg), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(1, uint64(alg)))
					var calls []timedCall
					for i := range 20 * 300 {
						trueNow := at(float64(i) / 20)
						now := trueNow.Add(-p.skew(i, rng)).Truncate(time.Microsecond)
						calls = append(calls, timedCall{key: "k", now: now, true: trueNow, peek: i%7 == 3})
					}
					decided, trueAt := clampedRun(t, rateCfg(alg, rates), calls)
					var as []admission
					for _, x := range decided["k"] {
						as = append(as, admission{"k", x.UnixNano(), 1})
					}
					if len(as) < 100 {
						t.Fatalf("%d admitted", len(as))
					}
					checkAdmissions(t, alg, rates, 10, as, func(k int) int { return rates[k].Limit })
					t.Logf("most admitted in one minute of true time: %d (limit 100)", maxInAnyWindow(trueAt["k"], time.Minute))
				})
			}
		}
	}
}

// TestTimeRuleManyKeysRandomOrder interleaves keys whose callers are stale
// by random amounts, with costs, peeks and SetLimit, against the raised
// twin.
func TestTimeRuleManyKeysRandomOrder(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2, uint64(alg)))
			var calls []timedCall
			for i := range 20000 {
				trueNow := at(float64(i) / 100)
				now := trueNow.Add(-time.Duration(rng.Int64N(int64(8 * time.Second)))).Truncate(time.Microsecond)
				calls = append(calls, timedCall{key: fmt.Sprint("k", rng.IntN(5)), now: now, true: trueNow, peek: rng.IntN(5) == 0})
			}
			cfg := cfgFor(alg, 7, 10*time.Second, time.Second)
			decided, _ := clampedRun(t, cfg, calls)
			checkPromise(t, cfg, decided)
		})
	}
}

// TestClockStepsBack: instants without a monotonic
// reading that step back are decided at the key's latest instant: the key
// stands still until they catch up, its usage kept, and durations are
// measured from the caller's own now.
func TestClockStepsBack(t *testing.T) {
	// Fixed window and sliding log: exactly the case's values.
	for _, alg := range []Algorithm{FixedWindow, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, cfgFor(alg, 5, 10*time.Second, 0))
			runSteps(t, l, "k", []step{
				{100, 1, true, 4, 0}, {100, 1, true, 3, 0}, {100, 1, true, 2, 0},
				{95, 1, true, 1, 0}, {95, 1, true, 0, 0}, {95, 1, false, 0, 15},
				{105, 1, false, 0, 5}, {109.999, 1, false, 0, 1}, {110, 1, true, 4, 0},
			})
			// An hour-long step: the key stands still for the hour.
			runSteps(t, l, "hour", []step{
				{100, 1, true, 4, 0}, {100, 1, true, 3, 0}, {100, 1, true, 2, 0},
				{-3500, 1, true, 1, 0}, {-3500, 1, true, 0, 0}, {-3500, 1, false, 0, 3610},
				{-3490, 1, false, 0, 3600}, {0, 1, false, 0, 110}, {105, 1, false, 0, 5},
				{110, 1, true, 4, 0},
			})
		})
	}
	// The counter keeps its one-bucket lag; GCRA its smooth refill.
	l := mustNew(t, cfgFor(SlidingCounter, 5, 10*time.Second, time.Second))
	runSteps(t, l, "k", []step{
		{100, 1, true, 4, 0}, {100, 1, true, 3, 0}, {100, 1, true, 2, 0},
		{95, 1, true, 1, 0}, {95, 1, true, 0, 0}, {95, 1, false, 0, 16},
		{105, 1, false, 0, 6}, {110.1, 1, false, 0, 1}, {110.2, 1, true, 0, 0},
	})
	l = mustNew(t, cfgFor(GCRA, 5, 10*time.Second, 0))
	runSteps(t, l, "k", []step{
		{100, 1, true, 4, 0}, {100, 1, true, 3, 0}, {100, 1, true, 2, 0},
		{95, 1, true, 1, 0}, {95, 1, true, 0, 0}, {95, 1, false, 0, 7},
		{101, 1, false, 0, 1}, {102, 1, true, 0, 0},
	})
	// No result of any algorithm has a negative duration after a step.
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 3, 10*time.Second, time.Second))
		for _, sec := range []float64{100, 100.001, 99.995, 50, 50, 50, -1e6, 3, 200, 199.999} {
			checkResultSane(t, l.AllowN("k", at(sec), 1))
			checkResultSane(t, l.Peek("k", at(sec-20), 1))
		}
	}
}

// TestInstantsPlacedByMonotonicReading : an instant that
// carries a monotonic clock reading is placed on the limiter's timeline by
// its monotonic difference from the limiter's start, so a wall clock set
// after the start never reaches the limiter; one without is placed by its
// wall reading, exactly its Unix time.
func TestInstantsPlacedByMonotonicReading(t *testing.T) {
	tl := newTimeline()
	now := time.Now()
	for _, x := range []time.Time{now, now.Add(-time.Hour), now.Add(100 * 365 * 24 * time.Hour), time.Unix(0, 0), time.Unix(1, 5)} {
		// Wall-only in every location: Round(0) strips the monotonic
		// reading, UTC and In keep none.
		for _, w := range []time.Time{x.Round(0), x.UTC(), x.In(time.FixedZone("x", 3600)), x.Round(0).Local()} {
			if got, want := tl.instant(w), x.UnixNano(); got != want {
				t.Fatalf("wall-only %v placed at %d, want its Unix time %d", w, got, want)
			}
		}
	}
	// As if the wall clock read an hour less at the start than the
	// monotonic clock says it should now (it was set an hour forward
	// since): a reading from time.Now() keeps its monotonic place.
	tl.wall -= int64(time.Hour)
	if got, want := tl.instant(now), tl.wall+int64(now.Sub(tl.start)); got != want || got == now.UnixNano() {
		t.Fatalf("time.Now() placed at %d, want %d (the monotonic difference), not %d", got, want, now.UnixNano())
	}

	// Through a limiter: Allow (its SystemClock) and AllowN(time.Now())
	// place instants on one timeline, so they count in one window.
	for _, alg := range allAlgorithms {
		l := mustNew(t, Config{Algorithm: alg, Limit: 2, Window: time.Hour})
		if !l.Allow("k") || !l.AllowN("k", time.Now(), 1).Allowed {
			t.Fatalf("%v: denied under the limit", alg)
		}
		if l.AllowN("k", time.Now(), 1).Allowed || l.Allow("k") {
			t.Fatalf("%v: a third unit in the hour", alg)
		}
	}
}

// TestClockJitterDoesNotExpireUsage: a thousand stale callers each 5 ms in
// the past never make a unit expire early.
func TestClockJitterDoesNotExpireUsage(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, GCRA} {
		l := mustNew(t, cfgFor(alg, 1, time.Second, 0))
		if !l.AllowN("k", at(10), 1).Allowed {
			t.Fatal("first call denied")
		}
		for i := range 1000 {
			now := at(10 + float64(i)*0.000001)
			l.AllowN("k", now.Add(-5*time.Millisecond), 1)
			l.AllowN("k", now, 1)
		}
		if r := l.AllowN("k", at(10.99), 1); r.Allowed {
			t.Fatalf("%v: jitter made the unit of t=10 expire early: %+v", alg, r)
		}
	}
}

// TestDeniedFirstRequestSetsTheKeysLatestInstant: a key's first request,
// denied because its cost is above the limit, still makes its instant the
// key's latest, so a request read 1.2 s earlier is decided at that instant
// and the full limit cannot be spent twice (once at the earlier instant,
// once at the first's). With several rates too.
func TestDeniedFirstRequestSetsTheKeysLatestInstant(t *testing.T) {
	first := time.Unix(1_700_000_000, 5e8)
	for _, rates := range [][]Rate{{{10, time.Second}}, {{10, time.Second}, {30, time.Minute}}} {
		for _, alg := range allAlgorithms {
			l := mustNew(t, Config{Algorithm: alg, Rates: rates, Buckets: 10})
			if r := l.AllowN("k", first, 11); r.Allowed || r.RetryAfter != Never {
				t.Fatalf("%v %v: a cost above the limit: %+v", alg, rates, r)
			}
			if r := l.AllowN("k", first.Add(-1200*time.Millisecond), 10); !r.Allowed {
				t.Fatalf("%v %v: the earlier request was denied: %+v", alg, rates, r)
			}
			if r := l.AllowN("k", first, 10); r.Allowed {
				t.Fatalf("%v %v: 20 units admitted at one instant, limit 10: %+v", alg, rates, r)
			}
		}
	}
}

// TestPeekBehindDecidesAsAllow: a peek behind the key's latest instant
// answers what an AllowN at the same instant does, an hour back included.
func TestPeekBehindDecidesAsAllow(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 5, 10*time.Second, time.Second))
		for range 3 {
			l.AllowN("k", at(100), 1)
		}
		for _, sec := range []float64{99, 95, -3500} {
			for _, n := range []int{1, 2, 3} {
				p := l.Peek("k", at(sec), n)
				a := l.Peek("k", at(100), n)
				sameRetry := p.RetryAfter == a.RetryAfter && (p.RetryAfter == 0 || p.RetryAfter == Never) ||
					at(sec).Add(p.RetryAfter).Equal(at(100).Add(a.RetryAfter))
				if p.Allowed != a.Allowed || p.Remaining != a.Remaining || !sameRetry ||
					!at(sec).Add(p.ResetAfter).Equal(at(100).Add(a.ResetAfter)) {
					t.Fatalf("%v: peek at %v: %+v; at the latest instant: %+v", alg, sec, p, a)
				}
			}
		}
	}
}

// TestEvictedKeyDecidesNoEarlierThanItsEviction: a key evicted by a sweep
// at instant T (idle then) decides its next request at T or later, so a
// request read before the sweep cannot spend the window the key had
// already used up.
func TestEvictedKeyDecidesNoEarlierThanItsEviction(t *testing.T) {
	for _, alg := range allAlgorithms {
		cfg := Config{Algorithm: alg, Limit: 10, Window: 10 * time.Second, Buckets: 10, Shards: 1}
		l, fresh := mustNew(t, cfg), mustNew(t, cfg)
		for i := range 10 {
			if !l.AllowN("k", at(0.1*float64(i)), 1).Allowed {
				t.Fatalf("%v: denied under the limit", alg)
			}
		}
		if n := l.Sweep(at(12)); n != 1 {
			t.Fatalf("%v: swept %d keys, want the idle one", alg, n)
		}
		// Requests read at 9.95 s, decided after the sweep: as a fresh
		// key's at 12 s, durations from 9.95 s.
		for i := range 11 {
			got, want := l.AllowN("k", at(9.95), 1), fresh.AllowN("k", at(12), 1)
			if got.Allowed != want.Allowed || got.Remaining != want.Remaining ||
				!at(9.95).Add(got.ResetAfter).Equal(at(12).Add(want.ResetAfter)) {
				t.Fatalf("%v call %d at 9.95 s: %+v, want as at 12 s: %+v", alg, i, got, want)
			}
		}
	}
}

// TestZeroTimeIsAnError: an instant before the epoch, the zero time.Time
// included (a caller's bug), is an error that changes nothing: it must not
// wipe a key's usage.
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
				for _, bad := range []time.Time{{}, time.Unix(-1, 0), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)} {
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

// TestNearTheLastInstant: decisions near the largest accepted instant and
// back at the epoch keep every duration in range.
func TestNearTheLastInstant(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, Config{Algorithm: alg, Limit: 3, Window: time.Millisecond, Buckets: 1})
		hi := time.Unix(0, maxInstant-1)
		for _, now := range []time.Time{hi, time.Unix(0, 0), time.Unix(0, 0), hi, hi} {
			for range 4 {
				r := l.AllowN("k", now, 1)
				checkResultSane(t, r)
				if r.Err != nil {
					t.Fatalf("%v at %v: %+v", alg, now, r)
				}
			}
		}
	}
}

// TestResetKeepsTheKeysLatestInstant: Reset forgets a key's usage but not
// its latest instant, so a request read before the Reset is decided at the
// latest and the window cannot be spent twice; keys with and without
// limits of their own alike, with several rates too.
func TestResetKeepsTheKeysLatestInstant(t *testing.T) {
	base := time.Unix(1_734_480_000, 0)
	for _, rates := range [][]Rate{{{1, time.Second}}, {{1, time.Second}, {5, time.Minute}}} {
		for _, alg := range allAlgorithms {
			for _, own := range []bool{false, true} {
				l := mustNew(t, Config{Algorithm: alg, Rates: rates, Buckets: 2, JanitorInterval: -1})
				if own {
					lims := make([]int, len(rates))
					for i, r := range rates {
						lims[i] = r.Limit
					}
					if err := l.SetLimits("k", lims...); err != nil {
						t.Fatal(err)
					}
				}
				if !l.AllowAt("k", base.Add(1500*time.Millisecond)) {
					t.Fatalf("%v %v own=%v: first request denied", alg, rates, own)
				}
				if err := l.Reset("k"); err != nil {
					t.Fatal(err)
				}
				// Decided at 1.5 s, the key's latest: admitted (usage forgotten).
				if !l.AllowAt("k", base.Add(200*time.Millisecond)) {
					t.Fatalf("%v %v own=%v: request after Reset denied", alg, rates, own)
				}
				// 1.6 s: the unit taken at 1.5 s still counts.
				if l.AllowAt("k", base.Add(1600*time.Millisecond)) {
					t.Fatalf("%v %v own=%v: 2 units within 0.1 s of the key's time, limit 1 per second", alg, rates, own)
				}
			}
		}
	}
}

// TestEvictedKeyKeepsItsLatestInstant: under EvictLeastRecent, a key
// evicted while in use by a new key's early-read request comes back no
// earlier than its latest instant (up to the clock), so its usage is
// forgotten but its time does not go back.
func TestEvictedKeyKeepsItsLatestInstant(t *testing.T) {
	base := time.Unix(1_734_480_000, 0)
	for _, alg := range allAlgorithms {
		clk := NewManualClock(base.Add(2 * time.Second))
		l := mustNew(t, Config{Algorithm: alg, Limit: 2, Window: time.Second, Buckets: 1,
			Shards: 1, MaxKeys: 1, WhenFull: EvictLeastRecent, Clock: clk, JanitorInterval: -1})
		for range 2 {
			if !l.AllowAt("A", base.Add(1900*time.Millisecond)) {
				t.Fatalf("%v: A denied at 1.9 s", alg)
			}
		}
		if !l.AllowAt("B", base.Add(500*time.Millisecond)) { // read early: evicts A
			t.Fatalf("%v: B denied", alg)
		}
		// A returns with an instant behind its latest (1.9 s): decided at
		// 1.9 s or later, so its 2 units there and 2 more at 1.95 s would
		// be 4 within 50 ms of the key's time if it were decided at 0.6 s
		// and its old units' window ended before 1.95 s.
		got := 0
		for _, at := range []time.Duration{600, 600, 1950, 1950} {
			if l.AllowAt("A", base.Add(at*time.Millisecond)) {
				got++
			}
		}
		if got > 2 {
			t.Fatalf("%v: A admitted %d of 4 in one window after its eviction, limit 2", alg, got)
		}
	}
}
