package core

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrency tests, meant for `go test -race`.

// parallel runs f(g) on g goroutines released together and waits for all.
func parallel(g int, f func(g int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range g {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			f(i)
		}()
	}
	start.Done()
	done.Wait()
}

// rateSets are the rates of the concurrency tests, as a function of the
// least limit: one rate, and three (given out of window order) of which
// the second binds a burst at one instant.
var rateSets = []struct {
	name  string
	rates func(least int) []Rate
}{
	{"one_rate", func(least int) []Rate { return []Rate{{least, time.Minute}} }},
	{"three_rates", func(least int) []Rate {
		return []Rate{{3 * least, time.Minute}, {least, time.Second}, {2 * least, 10 * time.Second}}
	}},
}

// TestConcurrentSameKey: 64 goroutines, 10 calls each, on one key at one
// instant: exactly the least limit is admitted, whatever the algorithm,
// the number of rates and the interleaving; the binding rate reports each
// remaining count once and denies with its window; every call is counted
// once in Stats; costs of 3 and a limit of 3 fill the limit exactly.
func TestConcurrentSameKey(t *testing.T) {
	for _, set := range rateSets {
		for _, alg := range allAlgorithms {
			t.Run(set.name+"/"+alg.String(), func(t *testing.T) {
				clock := NewManualClock(at(1))
				cfg := Config{Algorithm: alg, Rates: set.rates(100), Buckets: 10, Clock: clock}
				binding := cfg.Rates[min(1, len(cfg.Rates)-1)].Window
				l := mustNew(t, cfg)

				var mu sync.Mutex
				var remaining []int
				parallel(64, func(int) {
					for range 10 {
						r := l.AllowN("hot", clock.Now(), 1)
						if r.Allowed {
							mu.Lock()
							remaining = append(remaining, r.Remaining)
							mu.Unlock()
						} else if r.RetryAfter <= 0 || r.Window != binding {
							t.Errorf("denied: %+v, want a positive RetryAfter and the %v window", r, binding)
						}
					}
				})
				slices.Sort(remaining)
				if len(remaining) != 100 {
					t.Fatalf("admitted %d of 640, want 100", len(remaining))
				}
				for i, r := range remaining {
					if r != i {
						t.Fatalf("remaining values %v, want each of 0..99 once", remaining)
					}
				}
				if st := l.Stats(); st.Allowed != 100 || st.Denied != 540 {
					t.Fatalf("stats %+v", st)
				}

				count := make(chan struct{}, 640)
				parallel(64, func(int) {
					for range 10 {
						if l.AllowN("hot2", clock.Now(), 3).Allowed {
							count <- struct{}{}
						}
					}
				})
				if len(count) != 33 {
					t.Fatalf("AllowN(3) admitted %d times, want 33", len(count))
				}
				if r := l.AllowN("hot2", clock.Now(), 1); !r.Allowed || r.Remaining != 0 {
					t.Fatalf("last unit: %+v", r)
				}
				if l.Allow("hot2") {
					t.Fatal("admitted past the limit")
				}

				cfg.Rates = set.rates(3)
				l3 := mustNew(t, cfg)
				ok := make(chan bool, 10)
				parallel(10, func(int) { ok <- l3.Allow("few") })
				close(ok)
				n := 0
				for v := range ok {
					if v {
						n++
					}
				}
				if n != 3 {
					t.Fatalf("limit 3 admitted %d of 10 concurrent calls", n)
				}
			})
		}
	}
}

// admission is one admitted decision recorded by a worker.
type admission struct {
	key string
	at  int64
	n   int
}

// TestConcurrentChaos: 32 goroutines on 256 keys with concurrent
// SetLimits (tiers of other numbers per window), ClearLimit, peeks, key
// counts, Reset-free decisions and a janitor sweeping every millisecond
// by an injected clock that moves 10 ms per phase, with one rate and with
// two. Phases keep every key's time monotone, so the recorded admissions
// can be checked exactly: per key and rate they keep each algorithm's
// promise (see checkAdmissions).
func TestConcurrentChaos(t *testing.T) {
	const (
		workers = 32
		phases  = 200
		ops     = 16
	)
	sets := []struct {
		name  string
		rates []Rate
		tiers [][]int
	}{
		{"one_rate", []Rate{{10, 500 * time.Millisecond}}, [][]int{{5}, {6}, {7}, {8}, {9}, {10}}},
		{"two_rates", []Rate{{25, 500 * time.Millisecond}, {10, 100 * time.Millisecond}}, [][]int{{20, 8}, {25, 10}, {15, 10}}},
	}
	for _, set := range sets {
		for _, alg := range allAlgorithms {
			t.Run(set.name+"/"+alg.String(), func(t *testing.T) {
				clock := NewManualClock(at(0))
				l, err := New(Config{Algorithm: alg, Rates: set.rates, Buckets: 10, JanitorInterval: time.Millisecond, Clock: clock})
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
							// group's keys go idle, the janitor evicts them,
							// and they return.
							key := fmt.Sprint("k", p/25%4, "-", rng.IntN(64))
							if a, ok := chaosOp(t, l, key, now, rng, set.tiers); ok {
								logs[g] = append(logs[g], a)
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
					checkAdmissions(t, alg, set.rates, 10, as, func(k int) int { return set.rates[k].Limit })
				}
			})
		}
	}
}

// chaosOp is one random operation of TestConcurrentChaos on key at now:
// it returns the admission of a decision that admitted.
func chaosOp(t *testing.T, l Limiter, key string, now time.Time, rng *rand.Rand, tiers [][]int) (admission, bool) {
	switch rng.IntN(12) {
	case 0:
		if err := setLimits(l, key, tiers[rng.IntN(len(tiers))]); err != nil {
			t.Error(err)
		}
	case 1:
		if err := l.ClearLimit(key); err != nil {
			t.Error(err)
		}
	case 2:
		checkResultSane(t, l.Peek(key, now, 1+rng.IntN(3)))
		l.Len()
	default:
		n := 1 + rng.IntN(2)
		r := l.AllowN(key, now, n)
		checkResultSane(t, r)
		if r.Err != nil {
			t.Error(r.Err)
		}
		return admission{key, now.UnixNano(), n}, r.Allowed
	}
	return admission{}, false
}

// setLimits gives key limits of its own, one per rate (SetLimit with one).
func setLimits(l Limiter, key string, lims []int) error {
	if len(lims) == 1 {
		return l.SetLimit(key, lims[0])
	}
	return l.SetLimits(key, lims...)
}

// checkAdmissions checks the admissions of one key against every rate and
// the promise of alg: the sliding log admits at most the limit in any
// window [s, s+W), the fixed window in any aligned window, the counter
// (of buckets per window) in any window that starts where a bucket does,
// and GCRA at most twice the limit in any window (a full bucket plus a
// window's refill). lims returns the largest limit rate k ever had.
func checkAdmissions(t *testing.T, alg Algorithm, rates []Rate, buckets int, as []admission, lims func(k int) int) {
	t.Helper()
	slices.SortFunc(as, func(a, b admission) int { return cmp.Compare(a.at, b.at) })
	for k, r := range rates {
		w := int64(r.Window)
		bound := lims(k)
		for i, first := range as {
			start := first.at
			switch alg {
			case FixedWindow:
				start -= start % w
			case SlidingCounter:
				start -= start % (w / int64(buckets))
			case GCRA:
				bound = 2 * lims(k)
			}
			sum := 0
			for _, a := range as[i:] {
				if a.at >= start+w {
					break
				}
				sum += a.n
			}
			if sum > bound {
				t.Fatalf("%v rate %v: %d units admitted in [%v, +%v), bound %d", alg, r, sum, time.Duration(start-t0.UnixNano()), r.Window, bound)
			}
		}
	}
}

func TestConcurrentDistinctKeysAndSweeps(t *testing.T) {
	// Inserts racing sweeps, rebuilds and ring compaction: every key keeps
	// its own count. Worker g works in rounds 10 s apart; the sweeper
	// sweeps at the slowest worker's round, so only finished rounds' keys
	// (idle after 1 s) are evicted. A worker starts round r only once a
	// sweep at round r-1 has finished, so sweeps do run among the inserts
	// however the goroutines are scheduled (without that gate the workers
	// could finish before the sweeper's first sweep, 1 run in 16).
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 3, Window: time.Second, Shards: 2})
	const workers = 8
	var rounds [workers]atomic.Int64
	const nrounds = 20
	var sweptRound [nrounds]chan struct{} // closed once a sweep at that round finished
	for i := range sweptRound {
		sweptRound[i] = make(chan struct{})
	}
	done := make(chan struct{})
	swept := make(chan int)
	go func() {
		n, closed := 0, int64(0) // rounds whose channel is closed
		for {
			select {
			case <-done:
				swept <- n
				return
			default:
				slowest := rounds[0].Load()
				for i := range rounds {
					slowest = min(slowest, rounds[i].Load())
				}
				n += l.Sweep(at(float64(slowest * 10)))
				for ; closed <= slowest && closed < nrounds; closed++ {
					close(sweptRound[closed])
				}
			}
		}
	}()
	parallel(workers, func(g int) {
		for round := range int64(nrounds) {
			if round > 0 {
				select {
				case <-sweptRound[round-1]:
				case <-time.After(10 * time.Second):
					t.Errorf("worker %d: no sweep at round %d within 10s", g, round-1)
					return
				}
			}
			rounds[g].Store(round)
			sec := float64(round * 10)
			for i := range 200 {
				key := fmt.Sprint(g, "-", round, "-", i)
				for j := range 4 {
					r := l.AllowN(key, at(sec), 1)
					if r.Allowed != (j < 3) {
						t.Errorf("key %s call %d: %+v", key, j, r)
						return
					}
				}
			}
		}
	})
	close(done)
	if n := <-swept; n == 0 {
		t.Fatal("the sweeper evicted nothing: the test did not race sweeps against inserts")
	}
}

// raceRates: 20 per second, 120 per 10 s, 8 per 100 ms: at the tests' pace
// of 75 ms per phase each binds in turn. The tests run with the first one
// and with all three.
var raceRates = []Rate{{20, time.Second}, {120, 10 * time.Second}, {8, 100 * time.Millisecond}}

// TestConcurrentOneKeyMatchesASequentialTwin: 16 goroutines call one key
// of one rate or three,
// 4 calls each per phase at the phase's instant, over 300 phases. With unit
// costs the order of calls within a phase does not matter, so each phase
// must admit exactly what a sequential twin admits for the same number of
// calls; with costs of 1-3 units the promise of the algorithm must hold.
// Either way admitted and denied add up to the calls made, in the results
// and in Stats.
func TestConcurrentOneKeyMatchesASequentialTwin(t *testing.T) {
	const (
		workers = 16
		calls   = 4
		phases  = 300
	)
	for _, rates := range [][]Rate{raceRates[:1], raceRates} {
		for _, alg := range allAlgorithms {
			for _, costs := range []int{1, 3} {
				t.Run(fmt.Sprint(len(rates), "_rates/", alg, map[int]string{1: "/unit", 3: "/costs"}[costs]), func(t *testing.T) {
					cfg := rateCfg(alg, rates)
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
						checkAdmissions(t, alg, rates, 10, all, func(k int) int { return rates[k].Limit })
					}
				})
			}
		}
	}
}

// TestConcurrentLimitChangesKeepEveryRate: decisions on one key of one
// rate or three race SetLimits
// switching it between two tiers, ClearLimit and SetDefaultLimits, and
// Peek, Reset-free: every result is sane and, for the sliding log and the
// fixed window, no window of any rate holds more than the largest limit
// that rate ever had.
func TestConcurrentLimitChangesKeepEveryRate(t *testing.T) {
	tiers := [][]int{{4, 60, 2}, {10, 150, 5}, {0, 150, 5}} // the last bans the key
	defaults := [][]int{{6, 100, 3}, {8, 80, 4}}
	largest := func(k int) int {
		m := raceRates[k].Limit
		for _, x := range append(slices.Clone(tiers), defaults...) {
			m = max(m, x[k])
		}
		return m
	}
	for _, nrates := range []int{1, 3} {
		rates := raceRates[:nrates]
		for _, alg := range allAlgorithms {
			t.Run(fmt.Sprint(nrates, "_rates/", alg), func(t *testing.T) {
				l := mustNew(t, rateCfg(alg, rates))
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
									err = setDefaultLimits(l, defaults[r.IntN(len(defaults))][:nrates])
								default:
									err = setLimits(l, "k", tiers[r.IntN(len(tiers))][:nrates])
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
					checkAdmissions(t, alg, rates, 10, all, largest)
				}
			})
		}
	}
}

// setDefaultLimits sets the default limits, one per rate
// (SetDefaultLimit with one).
func setDefaultLimits(l Limiter, lims []int) error {
	if len(lims) == 1 {
		return l.SetDefaultLimit(lims[0])
	}
	return l.SetDefaultLimits(lims...)
}

// A new key refused by a full table reports the default limit, which
// SetDefaultLimit changes under the shard's lock: decideKey read it after
// unlocking, a data race under -race.
func TestFullTableErrorDoesNotRaceSetDefaultLimit(t *testing.T) {
	l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 1})
	l.AllowN("resident", at(0), 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			l.SetDefaultLimit(5 + i%2)
		}
	}()
	for i := range 2000 {
		if r := l.AllowN(fmt.Sprint("new", i), at(1), 1); !errors.Is(r.Err, ErrTooManyKeys) || r.Limit < 5 {
			t.Fatalf("%+v", r)
		}
	}
	<-done
}
