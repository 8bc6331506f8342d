package core

// Concurrency tests of several rates on one key, meant for go test -race.
// Goroutines pass an injected instant per call, shared within a phase and
// moving between phases, so every call is decided at its own instant and
// the verdict does not depend on the machine's speed.

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// raceRates: 8 per 100 ms, 20 per second, 120 per 10 s: at the tests' pace
// of 75 ms per phase each binds in turn.
var raceRates = []Rate{{20, time.Second}, {120, 10 * time.Second}, {8, 100 * time.Millisecond}}

// checkRateWindows checks the admissions of one key against every rate:
// for the sliding log, at most the limit in any window [s, s+W) of every
// rate; for the fixed window, in any aligned window. lims returns the
// largest limit rate k ever had.
func checkRateWindows(t *testing.T, alg Algorithm, rates []Rate, as []admission, lims func(k int) int) {
	t.Helper()
	slices.SortFunc(as, func(a, b admission) int { return cmp.Compare(a.at, b.at) })
	for k, r := range rates {
		w := int64(r.Window)
		for i, first := range as {
			start := first.at
			if alg == FixedWindow {
				start -= start % w
			}
			sum := 0
			for _, a := range as[i:] {
				if a.at >= start+w {
					break
				}
				sum += a.n
			}
			if sum > lims(k) {
				t.Fatalf("rate %v: %d units admitted in [%v, +%v), limit %d", r, sum, time.Duration(start-t0.UnixNano()), r.Window, lims(k))
			}
		}
	}
}

// TestRatesConcurrentOneKey: 16 goroutines call one key of three rates,
// 4 calls each per phase at the phase's instant, over 300 phases. With unit
// costs the order of calls within a phase does not matter, so each phase
// must admit exactly what a sequential twin admits for the same number of
// calls; with costs of 1-3 units the promise of the algorithm must hold.
// Either way admitted and denied add up to the calls made, in the results
// and in Stats.
func TestRatesConcurrentOneKey(t *testing.T) {
	const (
		workers = 16
		calls   = 4
		phases  = 300
	)
	for _, alg := range allAlgorithms {
		for _, costs := range []int{1, 3} {
			t.Run(alg.String()+map[int]string{1: "/unit", 3: "/costs"}[costs], func(t *testing.T) {
				cfg := rateCfg(alg, raceRates)
				l, twin := mustNew(t, cfg), mustNew(t, cfg)
				rng := rand.New(rand.NewPCG(3, uint64(alg)))
				now := at(0)
				logs := make([][]admission, workers)
				var admitted, denied atomic.Int64
				for p := range phases {
					now = now.Add(time.Duration(rng.IntN(150)) * time.Millisecond)
					var phaseAdmitted atomic.Int64
					parallel(workers, func(g int) {
						r := rand.New(rand.NewPCG(uint64(p), uint64(g)))
						for range calls {
							n := 1 + r.IntN(costs)
							var ok bool
							if g%2 == 0 {
								res := l.AllowN("k", now, n)
								checkResultSane(t, res)
								ok = res.Allowed
							} else if n == 1 {
								ok = l.AllowAt("k", now)
							} else {
								ok = l.AllowBytesN([]byte("k"), now, n).Allowed
							}
							if ok {
								logs[g] = append(logs[g], admission{"k", now.UnixNano(), n})
								admitted.Add(1)
								phaseAdmitted.Add(1)
							} else {
								denied.Add(1)
							}
						}
					})
					if costs == 1 {
						want := 0
						for range workers * calls {
							if twin.AllowAt("k", now) {
								want++
							}
						}
						if got := int(phaseAdmitted.Load()); got != want {
							t.Fatalf("phase %d at %v: %d admitted, a sequential twin admits %d", p, now.Sub(t0), got, want)
						}
					}
				}
				if got := admitted.Load() + denied.Load(); got != workers*calls*phases {
					t.Fatalf("%d decisions for %d calls", got, workers*calls*phases)
				}
				if st := l.Stats(); st.Allowed != uint64(admitted.Load()) || st.Denied != uint64(denied.Load()) {
					t.Fatalf("stats %+v; results: %d admitted, %d denied", st, admitted.Load(), denied.Load())
				}
				if admitted.Load() < 100 || denied.Load() < 10*phases {
					t.Fatalf("%d admitted, %d denied: the test does not exercise the limits", admitted.Load(), denied.Load())
				}
				var all []admission
				for _, lg := range logs {
					all = append(all, lg...)
				}
				if alg == SlidingLog || alg == FixedWindow {
					checkRateWindows(t, alg, raceRates, all, func(k int) int { return raceRates[k].Limit })
				}
			})
		}
	}
}

// TestRatesConcurrentFrozenClock: 64 goroutines, 20 calls each, at one
// instant: exactly the least limit is admitted, whatever the algorithm
// and the interleaving, and every call is counted once.
func TestRatesConcurrentFrozenClock(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, rateCfg(alg, []Rate{{300, time.Minute}, {100, time.Second}, {200, 10 * time.Second}}))
			var admitted, denied atomic.Int64
			var mu sync.Mutex
			var remaining []int
			parallel(64, func(g int) {
				for range 20 {
					r := l.AllowN("hot", at(5), 1)
					if r.Allowed {
						admitted.Add(1)
						mu.Lock()
						remaining = append(remaining, r.Remaining)
						mu.Unlock()
					} else {
						denied.Add(1)
						if r.RetryAfter <= 0 || r.Window != time.Second {
							t.Errorf("denied: %+v", r)
						}
					}
				}
			})
			if admitted.Load() != 100 || denied.Load() != 64*20-100 {
				t.Fatalf("%d admitted, %d denied, want 100 and %d", admitted.Load(), denied.Load(), 64*20-100)
			}
			// The second binds every decision: each remaining count once.
			slices.Sort(remaining)
			for i, r := range remaining {
				if r != i {
					t.Fatalf("remaining values %v, want each of 0..99 once", remaining)
				}
			}
			if st := l.Stats(); st.Allowed != 100 || st.Denied != 64*20-100 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestRatesConcurrentSetLimits: decisions on one key race SetLimits
// switching it between two tiers, ClearLimit and SetDefaultLimits, and
// Peek, Reset-free: every result is sane and, for the sliding log and the
// fixed window, no window of any rate holds more than the largest limit
// that rate ever had.
func TestRatesConcurrentSetLimits(t *testing.T) {
	tiers := [][]int{{4, 60, 2}, {10, 150, 5}, {0, 150, 5}} // the last bans the key
	defaults := [][]int{{6, 100, 3}, {8, 80, 4}}
	largest := func(k int) int {
		m := raceRates[k].Limit
		for _, x := range append(slices.Clone(tiers), defaults...) {
			m = max(m, x[k])
		}
		return m
	}
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, rateCfg(alg, raceRates))
			logs := make([][]admission, 9)
			now := at(0)
			rng := rand.New(rand.NewPCG(5, uint64(alg)))
			for p := range 200 {
				now = now.Add(time.Duration(rng.IntN(100)) * time.Millisecond)
				parallel(9, func(g int) {
					r := rand.New(rand.NewPCG(uint64(p), uint64(g)))
					for range 6 {
						switch {
						case g == 8:
							var err error
							switch r.IntN(4) {
							case 0:
								err = l.ClearLimit("k")
							case 1:
								err = l.SetDefaultLimits(defaults[r.IntN(len(defaults))]...)
							default:
								err = l.SetLimits("k", tiers[r.IntN(len(tiers))]...)
							}
							if err != nil {
								t.Error(err)
							}
						case g == 7:
							checkResultSane(t, l.Peek("k", now, 1+r.IntN(3)))
						default:
							n := 1 + r.IntN(3)
							res := l.AllowN("k", now, n)
							checkResultSane(t, res)
							if res.Allowed {
								logs[g] = append(logs[g], admission{"k", now.UnixNano(), n})
							}
						}
					}
				})
			}
			var all []admission
			for _, lg := range logs {
				all = append(all, lg...)
			}
			if len(all) < 40 {
				t.Fatalf("%d admissions: the test does not exercise the key", len(all))
			}
			if alg == SlidingLog || alg == FixedWindow {
				checkRateWindows(t, alg, raceRates, all, largest)
			}
		})
	}
}

// TestRatesConcurrentChaos is TestConcurrentChaos with two rates: 32 goroutines on
// 256 keys with SetLimits (tiers of other numbers per window), ClearLimit,
// peeks, Reset-free decisions and a janitor sweeping every millisecond by
// an injected clock that moves 10 ms per phase. Per key and rate, the
// recorded admissions keep each algorithm's promise: the sliding log at
// most the limit in any window, the fixed window in any aligned window,
// the counter and GCRA at most twice the limit (a burst at a bucket edge;
// a full bucket plus a window's refill).
func TestRatesConcurrentChaos(t *testing.T) {
	const (
		workers = 32
		phases  = 200
		ops     = 16
	)
	rates := []Rate{{25, 500 * time.Millisecond}, {10, 100 * time.Millisecond}}
	tiers := [][]int{{20, 8}, {25, 10}, {15, 10}}
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := NewManualClock(at(0))
			l, err := New(Config{Algorithm: alg, Rates: rates, Buckets: 10, JanitorInterval: time.Millisecond, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			logs := make([][]admission, workers)
			for p := range phases {
				now := clock.Advance(10 * time.Millisecond)
				parallel(workers, func(g int) {
					rng := rand.New(rand.NewPCG(uint64(p), uint64(g)))
					if g == 0 {
						l.Sweep(now) // as the janitor does, but surely
					}
					for range ops {
						// Four groups of 64 keys take turns for 250 ms: a
						// group's keys go idle, the janitor evicts them, and
						// they return.
						key := fmt.Sprint("k", p/25%4, "-", rng.IntN(64))
						switch rng.IntN(12) {
						case 0:
							if err := l.SetLimits(key, tiers[rng.IntN(len(tiers))]...); err != nil {
								t.Error(err)
							}
						case 1:
							if err := l.ClearLimit(key); err != nil {
								t.Error(err)
							}
						case 2:
							checkResultSane(t, l.Peek(key, now, 1+rng.IntN(3)))
						default:
							n := 1 + rng.IntN(2)
							r := l.AllowN(key, now, n)
							checkResultSane(t, r)
							if r.Err != nil {
								t.Error(r.Err)
							}
							if r.Allowed {
								logs[g] = append(logs[g], admission{key, now.UnixNano(), n})
							}
						}
					}
				})
			}
			evicted := l.Stats().Evicted
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if evicted == 0 {
				t.Fatal("the janitor evicted nothing: keys never left and returned")
			}
			byKey := map[string][]admission{}
			for _, lg := range logs {
				for _, a := range lg {
					byKey[a.key] = append(byKey[a.key], a)
				}
			}
			if len(byKey) < 100 {
				t.Fatalf("%d keys admitted anything", len(byKey))
			}
			for _, as := range byKey {
				switch alg {
				case SlidingLog, FixedWindow:
					checkRateWindows(t, alg, rates, as, func(k int) int { return rates[k].Limit })
				default:
					checkRateWindows(t, SlidingLog, rates, as, func(k int) int { return 2 * rates[k].Limit })
				}
			}
		})
	}
}
