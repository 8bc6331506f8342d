package core

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tests of the units of shared keys, with one rate and several: each
// rate's deltas are exactly the units admitted, and no unit is lost or
// counted twice, through refunds (a rate that denies a request makes the
// rates decided before it give their units back), evictions, limit
// changes and the reconciler's collections.

// sharedRateConfigs are the shared limiters these tests run: each
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

// TestSharedDeltasMatchAdmitted: a shared key of several rates,
// decided with costs up to a rate's limit and past it (so rates deny after
// others admitted, and give their units back), with instants behind the
// key's latest, limits of its own and default limits changing, peeks and
// other nodes' units: collected after every call, each rate's deltas, by
// bucket, are exactly the units admitted at the instants decided at, and
// no unit is dropped.
func TestSharedDeltasMatchAdmitted(t *testing.T) {
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
						changeLimits(l, key, len(c.rates), rng)
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

// TestSharedUnitsConserved: every unit a shared key of several rates
// admits is, for each rate, sent (collected and not restored) or counted
// dropped, exactly once, while a full table evicts keys to make room
// (short keys and long ones, in one shard of long probe runs or two small
// ones), sweeps and Reset remove keys, limits change, requests deny after
// other rates admitted, and a reconciler collects, applies totals and
// restores failed flushes: in turn, and with three deciding goroutines
// beside the reconciler (run it under -race).
func TestSharedUnitsConserved(t *testing.T) {
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
								changeLimits(l, key, len(c.rates), rng)
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
					// A run that admitted almost nothing proves nothing.
					// The count depends on the limiter's random hash seed
					// (which keys share a shard): seed 2 of the log's three
					// rates admits 270-400, so the guard sits well below.
					if admitted.Load() < 100 {
						t.Fatalf("concurrent=%v seed %d: only %d units admitted", concurrent, seed, admitted.Load())
					}
				}
			}
		})
	}
}

// changeLimits sets, at random, the default limits or key's own: one in
// [0, 8] per rate of the limiter's nrates.
func changeLimits(l Limiter, key string, nrates int, rng *rand.Rand) {
	lims := make([]int, nrates)
	for i := range lims {
		lims[i] = rng.IntN(9)
	}
	if rng.IntN(2) == 0 {
		l.SetDefaultLimits(lims...)
	} else {
		l.SetLimits(key, lims...)
	}
}
