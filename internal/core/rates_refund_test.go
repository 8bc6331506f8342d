package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tests of the refunds of a decision of several rates (decideRates): a
// rate that denies a request makes the rates decided before it give their
// units back, locally and in the sync state of a shared key.

// sharedRateConfigs are the shared limiters the refund tests run: each
// algorithm that can be shared, with several rates (in no window order)
// and with one.
var sharedRateConfigs = []struct {
	alg   Algorithm
	rates []Rate
}{
	{FixedWindow, []Rate{{5, time.Second}, {8, 3 * time.Second}}},
	{FixedWindow, []Rate{{5, time.Second}, {8, 3 * time.Second}, {3, 500 * time.Millisecond}}},
	{SlidingCounter, []Rate{{5, time.Second}, {8, 3 * time.Second}}},
	{SlidingCounter, []Rate{{5, time.Second}, {8, 3 * time.Second}, {3, 500 * time.Millisecond}}},
	{SlidingLog, []Rate{{5, time.Second}, {8, 3 * time.Second}}},
	{SlidingLog, []Rate{{5, time.Second}, {8, 3 * time.Second}, {3, 500 * time.Millisecond}}},
	{FixedWindow, []Rate{{6, time.Second}}},
	{SlidingCounter, []Rate{{6, time.Second}}},
	{SlidingLog, []Rate{{6, time.Second}}},
}

// TestRatesSharedDeltasMatchAdmitted: a shared key of several rates,
// decided with costs up to a rate's limit and past it (so rates deny after
// others admitted, and give their units back), with instants behind the
// key's latest, limits of its own and default limits changing, peeks and
// other nodes' units: collected after every call, each rate's deltas, by
// bucket, are exactly the units admitted at the instants decided at, and
// no unit is dropped.
func TestRatesSharedDeltasMatchAdmitted(t *testing.T) {
	for ci, c := range sharedRateConfigs {
		t.Run(fmt.Sprint(c.alg, c.rates), func(t *testing.T) {
			for seed := range uint64(20) {
				rng := rand.New(rand.NewPCG(seed, uint64(ci)))
				l, tab := newSharedT(t, Config{Algorithm: c.alg, Rates: c.rates, Shards: 2})
				rates := tab.SyncRates()
				type bucket struct {
					key  string
					rate int
					id   int64
				}
				admitted, sent := map[bucket]int64{}, map[bucket]int64{}
				last := map[string]int64{} // each stored key's latest instant
				clock := at(0).UnixNano()
				denied := 0
				for range 400 {
					clock += rng.Int64N(int64(200 * time.Millisecond))
					now := clock
					if rng.IntN(4) == 0 {
						now -= rng.Int64N(int64(2 * time.Second)) // read early
					}
					key := string(rune('a' + rng.IntN(3)))
					n := rng.IntN(10)
					switch rng.IntN(10) {
					case 0:
						lims := make([]int, len(c.rates))
						for i := range lims {
							lims[i] = rng.IntN(9)
						}
						if rng.IntN(2) == 0 {
							l.SetDefaultLimits(lims...)
						} else {
							l.SetLimits(key, lims...)
						}
					case 1:
						l.Peek(key, time.Unix(0, now), n)
					case 2:
						l.ClearLimit(key)
					default:
						var ok bool
						if n == 1 && rng.IntN(2) == 0 {
							ok = l.AllowAt(key, time.Unix(0, now))
						} else {
							ok = l.AllowN(key, time.Unix(0, now), n).Allowed
						}
						if _, stored := keyShard(l, key); stored && n > 0 {
							te := max(now, last[key])
							last[key] = te
							if !ok {
								denied++
							}
							for k, r := range rates {
								if ok {
									admitted[bucket{key, k, floorDiv(te, r.Size)}] += int64(n)
								}
							}
						}
					}
					for _, f := range collectAll(tab) {
						for i, d := range f.Deltas {
							sent[bucket{f.Key, f.Rate, f.Newest - int64(len(f.Deltas)-1-i)}] += int64(d)
						}
						if rng.IntN(4) == 0 {
							// Other nodes' units: the store holds one more.
							totals := make([]int64, len(f.Deltas))
							for i := range totals {
								totals[i] = int64(f.Sent[i]) + int64(rng.IntN(2))
							}
							tab.Apply(&f, totals)
						}
					}
				}
				for b, n := range admitted {
					if sent[b] != n {
						t.Fatalf("seed %d: key %q rate %d bucket %d: %d units admitted, %d sent", seed, b.key, b.rate, b.id, n, sent[b])
					}
				}
				for b, n := range sent {
					if admitted[b] != n {
						t.Fatalf("seed %d: key %q rate %d bucket %d: %d units sent, %d admitted", seed, b.key, b.rate, b.id, n, admitted[b])
					}
				}
				if d, _ := tab.SyncStats(); d != 0 {
					t.Fatalf("seed %d: %d units dropped", seed, d)
				}
				if denied < 50 {
					t.Fatalf("seed %d: only %d denials: the test tests few refunds", seed, denied)
				}
			}
		})
	}
}

// TestRatesSharedUnitsConserved: every unit a shared key of several rates
// admits is, for each rate, sent (collected and not restored) or counted
// dropped, exactly once, while a full table evicts keys to make room
// (short keys and long ones, in one shard of long probe runs or two small
// ones), sweeps and Reset remove keys, limits change, requests deny after
// other rates admitted, and a reconciler collects, applies totals and
// restores failed flushes: in turn, and with three deciding goroutines
// beside the reconciler (run it under -race).
func TestRatesSharedUnitsConserved(t *testing.T) {
	for ci, c := range sharedRateConfigs {
		t.Run(fmt.Sprint(c.alg, c.rates), func(t *testing.T) {
			for _, concurrent := range []bool{false, true} {
				for seed := range uint64(4) {
					cfg := Config{Algorithm: c.alg, Rates: c.rates, Shards: 2, MaxKeys: 6, WhenFull: EvictLeastRecent}
					keys := []string{"a", "b", "c", "d", "e", "f", "g", "h",
						"a-long-key-kept-in-the-arena-1", "a-long-key-kept-in-the-arena-2", "a-long-key-kept-in-the-arena-3"}
					if seed%2 == 1 {
						cfg.Shards, cfg.MaxKeys = 1, 25 // a table of 42 positions, 25 keys
						for i := range 30 {
							keys = append(keys, fmt.Sprint("k", i), fmt.Sprintf("a-long-key-number-%d-in-the-arena", i))
						}
					}
					l, tab := newSharedT(t, cfg)
					var admitted, collected atomic.Int64
					var clock atomic.Int64
					clock.Store(at(0).UnixNano())
					decide := func(g uint64, ops int) {
						rng := rand.New(rand.NewPCG(seed, uint64(ci)*100+g))
						for range ops {
							now := clock.Add(rng.Int64N(int64(30 * time.Millisecond)))
							if rng.IntN(4) == 0 {
								now -= rng.Int64N(int64(2 * time.Second))
							}
							key := keys[rng.IntN(len(keys))]
							n := rng.IntN(8)
							switch rng.IntN(20) {
							case 0:
								lims := make([]int, len(c.rates))
								for i := range lims {
									lims[i] = rng.IntN(9)
								}
								if rng.IntN(2) == 0 {
									l.SetDefaultLimits(lims...)
								} else {
									l.SetLimits(key, lims...)
								}
							case 1:
								l.ClearLimit(key)
							case 2:
								l.Reset(key)
							case 3:
								l.Sweep(time.Unix(0, now))
							case 4:
								l.Peek(key, time.Unix(0, now), n)
							case 5:
								tab.Touch(key, now)
							default:
								if n == 1 && rng.IntN(2) == 0 {
									if l.AllowAt(key, time.Unix(0, now)) {
										admitted.Add(1)
									}
								} else if l.AllowN(key, time.Unix(0, now), n).Allowed {
									admitted.Add(int64(n))
								}
							}
						}
					}
					reconcile := func(rng *rand.Rand) {
						for _, f := range collectAll(tab) {
							if rng.IntN(3) == 0 {
								tab.Restore(&f) // the flush failed
								continue
							}
							totals := make([]int64, len(f.Deltas))
							for i, d := range f.Deltas {
								collected.Add(int64(d))
								totals[i] = int64(f.Sent[i]) + int64(rng.IntN(2))
							}
							tab.Apply(&f, totals)
						}
					}
					rng := rand.New(rand.NewPCG(seed, 99))
					if concurrent {
						var wg sync.WaitGroup
						for g := range uint64(3) {
							wg.Go(func() { decide(g, 1000) })
						}
						stop, done := make(chan struct{}), make(chan struct{})
						go func() {
							defer close(done)
							for {
								select {
								case <-stop:
									return
								default:
									reconcile(rng)
								}
							}
						}()
						wg.Wait()
						close(stop)
						<-done
					} else {
						for i := range 3000 {
							decide(uint64(i), 1)
							if rng.IntN(3) == 0 {
								reconcile(rng)
							}
						}
					}
					for _, f := range collectAll(tab) {
						for _, d := range f.Deltas {
							collected.Add(int64(d))
						}
					}
					dropped, pending := tab.SyncStats()
					if pending != 0 {
						t.Fatalf("%d keys pending after the last collect", pending)
					}
					got, want := collected.Load()+int64(dropped), int64(len(c.rates))*admitted.Load()
					if got != want {
						t.Fatalf("concurrent=%v seed %d: %d sent + %d dropped = %d, want %d rates x %d admitted = %d",
							concurrent, seed, collected.Load(), dropped, got, len(c.rates), admitted.Load(), want)
					}
					if admitted.Load() < 300 {
						t.Fatalf("concurrent=%v seed %d: only %d units admitted", concurrent, seed, admitted.Load())
					}
				}
			}
		})
	}
}

// TestRatesBigLimitsMatchModels runs keys of three rates with limits near
// MaxLimit (MaxSlidingLogLimit for the log) over windows the limits do not
// divide, costs up to half of MaxLimit, limits changing to any value (GCRA
// re-encoding debts of a billion units, then refunding them), against the
// reference models: no count or remainder overflows or borrows wrongly.
func TestRatesBigLimitsMatchModels(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rates := []Rate{{1_000_000_007, 7 * time.Second}, {999_999_937, 13 * time.Second}, {MaxLimit, 3 * time.Second}}
			buckets := 0
			switch alg {
			case SlidingLog:
				rates = []Rate{{MaxSlidingLogLimit - 7, 7 * time.Second}, {MaxSlidingLogLimit - 77, 13 * time.Second}, {MaxSlidingLogLimit, 3 * time.Second}}
			case SlidingCounter:
				buckets = 13
				for i := range rates {
					rates[i].Window *= 13
				}
			}
			for seed := range uint64(10) {
				rng := rand.New(rand.NewPCG(seed, uint64(alg)))
				h := newRatesHarness(t, alg, rates, buckets, false)
				clock := int64(t0Unix)*1e9 + rng.Int64N(1e9)
				for range 300 {
					clock += rng.Int64N(int64(2 * time.Second))
					now := clock
					if rng.IntN(4) == 0 {
						now -= rng.Int64N(int64(5 * time.Second))
					}
					now = now / h.unit * h.unit // the models keep exact stamps
					n := rng.IntN(MaxLimit/2) + rng.IntN(3)
					if alg == SlidingLog {
						n = rng.IntN(3) // one stamp per unit
					}
					key := string(rune('a' + rng.IntN(2)))
					switch rng.IntN(8) {
					case 0:
						h.allow(key, now, n, false)
					case 1:
						if alg == SlidingLog {
							continue
						}
						lims := []int{rng.IntN(MaxLimit + 1), rng.IntN(MaxLimit + 1), 1 + rng.IntN(MaxLimit)}
						if rng.IntN(2) == 0 {
							h.setDefaults(lims)
						} else {
							h.setLimits(key, lims)
						}
					default:
						h.allow(key, now, n, true)
					}
				}
			}
		})
	}
}

// TestRatesSlidingLogRetryOffGrid: a sliding log of several rates keeps
// one ring at the longest window's resolution (100 ns for a minute, 10 µs
// for an hour, 1 ms for a day); at instants off that grid, a denied
// request fits exactly at now+RetryAfter and not a nanosecond sooner,
// whichever rate binds.
func TestRatesSlidingLogRetryOffGrid(t *testing.T) {
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
