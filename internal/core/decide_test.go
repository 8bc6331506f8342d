package core

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Tests of the decision forms: the bool forms (AllowAt, AllowBytesAt)
// decide, and leave the state, as the Result forms do, with one rate and
// several, local and shared.

// TestBoolFormsDecideAsResultForms: AllowAt decides as AllowN: a
// request the first rate denies still brings every rate's state to the
// decision's instant. GCRA keeps a rate's usage when its limit changes by
// re-encoding its debt at the key's next decision; a denied AllowAt that
// stopped at the first denying rate left the other rates encoded for
// their old limit, so they were re-encoded later, from a smaller debt,
// and the key admitted what AllowN's twin denied.
func TestBoolFormsDecideAsResultForms(t *testing.T) {
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

// TestBoolAndResultFormsLeaveTheSameState: AllowAt and AllowN(key,
// now, 1) on two limiters fed the same calls, with limits of their own and
// default limits changing and instants behind the keys' latest, leave the
// same state after every call (records, side words, extra records, rings):
// the denial paths (refunds, then the other rates decided without
// consuming) of the two forms agree, local and shared.
func TestBoolAndResultFormsLeaveTheSameState(t *testing.T) {
	for ci, c := range modelConfigs {
		for _, shared := range []bool{false, true} {
			if shared && c.alg == GCRA {
				continue
			}
			t.Run(fmt.Sprint(configName(c.alg, c.windows), "/shared=", shared), func(t *testing.T) {
				for seed := range uint64(3) {
					rng := rand.New(rand.NewPCG(seed, uint64(ci)))
					rates := ratesOf(c.windows, func(int) int { return 1 + rng.IntN(8) })
					cfg := Config{Algorithm: c.alg, Rates: rates, Buckets: c.buckets, Shards: 2}
					mk := func() Limiter {
						var l Limiter
						if shared {
							l, _ = newSharedT(t, cfg)
						} else {
							l = mustNew(t, cfg)
						}
						seedTable(l, tableSeed)
						return l
					}
					a, b := mk(), mk()
					clock := at(0).UnixNano()
					lims := func() []int {
						out := make([]int, len(rates))
						for i := range out {
							out[i] = rng.IntN(9)
						}
						return out
					}
					for op := range 600 {
						clock += rng.Int64N(int64(c.windows[0]) / 8)
						now := clock
						if rng.IntN(4) == 0 {
							now -= rng.Int64N(int64(c.windows[0]))
						}
						key := string(rune('a' + rng.IntN(4)))
						switch rng.IntN(12) {
						case 0:
							v := lims()
							a.SetLimits(key, v...)
							b.SetLimits(key, v...)
						case 1:
							v := lims()
							a.SetDefaultLimits(v...)
							b.SetDefaultLimits(v...)
						case 2:
							a.ClearLimit(key)
							b.ClearLimit(key)
						default:
							x, y := a.AllowAt(key, time.Unix(0, now)), b.AllowN(key, time.Unix(0, now), 1)
							if x != y.Allowed {
								t.Fatalf("seed %d op %d: AllowAt %v, AllowN %+v", seed, op, x, y)
							}
						}
						if err := sameState(a, b); err != "" {
							t.Fatalf("seed %d op %d: %s", seed, op, err)
						}
					}
				}
			})
		}
	}
}

// seedTable gives l's table the hash seed seed.
func seedTable(l Limiter, seed uint64) {
	switch l := l.(type) {
	case *FixedLimiter:
		setTableSeed(&l.tab, seed)
	case *LogLimiter:
		setTableSeed(&l.tab, seed)
	case *CounterLimiter:
		setTableSeed(&l.tab, seed)
	case *GCRALimiter:
		setTableSeed(&l.tab, seed)
	}
}

// sameState reports how the tables of two limiters of one algorithm differ
// ("" if they do not), see sameTables.
func sameState(a, b Limiter) string {
	switch a := a.(type) {
	case *FixedLimiter:
		return sameTables(&a.tab, &b.(*FixedLimiter).tab)
	case *LogLimiter:
		return sameTables(&a.tab, &b.(*LogLimiter).tab)
	case *CounterLimiter:
		return sameTables(&a.tab, &b.(*CounterLimiter).tab)
	case *GCRALimiter:
		return sameTables(&a.tab, &b.(*GCRALimiter).tab)
	}
	panic("no table")
}

// sameTables reports how the state of two tables differs ("" if it does
// not): positions, side words, extra records, rings, floors, dropped
// units.
func sameTables[E comparable](a, b *table[E]) string {
	for i := range a.shards {
		x, y := &a.shards[i], &b.shards[i]
		switch {
		case !slices.Equal(x.recs, y.recs):
			return "records differ"
		case !slices.Equal(x.side, y.side):
			return "side words differ"
		case !slices.Equal(x.extra, y.extra):
			return "extra records differ"
		case !slices.EqualFunc(x.rings.pages, y.rings.pages, slices.Equal):
			return "rings differ"
		case x.floor != y.floor:
			return "floors differ"
		case x.syncDropped.Load() != y.syncDropped.Load():
			return "dropped units differ"
		}
	}
	return ""
}
