package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The reference models (model_test.go) on a full table: one shard capped
// at two keys of the four the harness uses, under both FullPolicy values,
// with a clock that runs behind or ahead of the instants decided at. A new
// key may evict another (idle, or the least recent under
// EvictLeastRecent): the evicted key's model state is forgotten, and the
// shard's floor rises to the later of the instant it was judged at (the
// new key's) and its own latest, capped by the limiter's clock. Every decision still matches the
// models: an evicted key returning with an instant behind the floor is
// decided as a fresh key at the floor, and no key with limits of its own
// is evicted.

// cappedHarness is a harness whose limiter has MaxKeys.
type cappedHarness struct {
	*harness
	policy FullPolicy
	clock  *ManualClock // nil: the default clock, far ahead of the instants
	now    int64        // the clock's reading, Unix ns
	evicts int          // keys evicted by new keys
	refuse int          // new keys refused
}

// forget drops key's state from every model (its eviction).
func (h *cappedHarness) forget(key string) {
	for _, m := range h.m {
		switch m := m.(type) {
		case *fixedModel:
			delete(m.win, key)
			delete(m.count, key)
		case *logModel:
			delete(m.units, key)
		case *counterModel:
			delete(m.buckets, key)
		case *gcraModel:
			delete(m.tat, key)
		}
	}
	delete(h.enc, key)
	delete(h.last, key)
}

// allow is harness.allow on a full table: it finds the keys the call's
// insert evicted and a new key the table refused.
func (h *cappedHarness) allow(key string, t int64, n int, consume bool) {
	h.t.Helper()
	caller := t
	t = max(t, h.last[key])
	_, stored := h.enc[key]
	sh, _ := keyShard(h.l, key)
	if !stored {
		t = max(t, h.floor[sh])
	}
	var got Result
	boolOnly := false
	at := time.Unix(0, caller)
	switch h.calls++; {
	case !consume:
		got = h.l.Peek(key, at, n)
	case n == 1 && h.calls%4 == 1:
		got.Allowed, boolOnly = h.l.AllowAt(key, at), true
	case n == 1 && h.calls%4 == 2:
		got.Allowed, boolOnly = h.l.AllowBytesAt([]byte(key), at), true
	case h.calls%4 == 3:
		got = h.l.AllowBytesN([]byte(key), at, n)
	default:
		got = h.l.AllowN(key, at, n)
	}
	lims := h.limitsOf(key)
	real := consume && n > 0 // stored, denied or not (see harness.allow)
	evicted, evictedLast := false, int64(0)
	for k := range h.enc {
		if _, ok := keyShard(h.l, k); ok || k == key {
			continue
		}
		if _, own := h.own[k]; own {
			h.t.Fatalf("%v %v: key %q, which has limits of its own, was evicted", h.alg, h.rates, k)
		}
		if !real || stored {
			h.t.Fatalf("%v %v: key %q was evicted by a call that stores no key", h.alg, h.rates, k)
		}
		evictedLast = max(evictedLast, h.last[k])
		h.forget(k)
		evicted = true
		h.evicts++
	}
	if evicted {
		// An evicted key's next request is decided no earlier than its
		// latest instant, nor than the new key's, both capped by the
		// clock.
		h.floor[sh] = max(h.floor[sh], min(max(t, evictedLast), h.now))
	}
	if real && !stored {
		if _, ok := keyShard(h.l, key); !ok {
			h.refuse++
			if got.Allowed || !boolOnly && !errors.Is(got.Err, ErrTooManyKeys) {
				h.t.Fatalf("%v %v: new key %q refused: %+v", h.alg, h.rates, key, got)
			}
			if h.policy == EvictLeastRecent {
				for k := range h.enc {
					if s, _ := keyShard(h.l, k); s == sh {
						if _, own := h.own[k]; !own {
							h.t.Fatalf("%v %v: new key %q refused while key %q could be evicted", h.alg, h.rates, key, k)
						}
					}
				}
			}
			return
		}
	}
	enc := h.enc[key]
	want := h.decide(key, t, n, real, lims, enc)
	if real {
		h.last[key] = t
		if !stored {
			enc = make([]int, len(lims))
			h.enc[key] = enc
		}
		for k, lim := range lims {
			if lim > 0 || !stored {
				enc[k] = lim
			}
		}
	}
	want.ResetAfter += time.Duration(t - caller)
	if want.RetryAfter != 0 && want.RetryAfter != Never {
		want.RetryAfter += time.Duration(t - caller)
	}
	if boolOnly {
		got = Result{Allowed: got.Allowed, Limit: want.Limit, Remaining: want.Remaining, ResetAfter: want.ResetAfter, RetryAfter: want.RetryAfter, Window: want.Window}
	}
	if got != want {
		h.t.Fatalf("%v %v key %q t=%d (caller %d) n=%d consume=%v limits %v:\n got %+v\nwant %+v", h.alg, h.rates, key, t, caller, n, consume, lims, got, want)
	}
}

// cappedKeys are the keys of the capped model test in its large mode: short
// and long (kept in the arena) keys, 40 of them for a shard of 25.
var cappedKeys = func() []string {
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprint("k", i), fmt.Sprintf("a-key-long-enough-for-the-arena-%d", i))
	}
	return keys
}()

func TestCappedTablesMatchReferenceModels(t *testing.T) {
	totalEvicts := 0
	defer func() {
		if !t.Failed() && totalEvicts < 1000 {
			t.Fatalf("%d evictions in all: the test tests little", totalEvicts)
		}
	}()
	for _, c := range modelConfigs {
		for _, policy := range []FullPolicy{RejectNewKeys, EvictLeastRecent} {
			t.Run(fmt.Sprint(configName(c.alg, c.windows), "/", policy), func(t *testing.T) {
				evicts, refused := 0, 0
				for seed := range uint64(4) {
					rng := rand.New(rand.NewPCG(seed, uint64(c.alg)*7+uint64(policy)))
					base := newRatesHarness(t, c.alg, ratesOf(c.windows, func(int) int { return 1 + rng.IntN(8) }), c.buckets, c.asRates)
					cfg := base.l.Config()
					cfg.MaxKeys, cfg.WhenFull, cfg.Shards = 2, policy, 1
					large := seed%2 == 1 // 25 keys of 40 in a table of 42 positions: probe runs, keys moving back
					if large {
						cfg.MaxKeys = 25
					}
					h := &cappedHarness{harness: base, policy: policy, now: 1<<63 - 1}
					if seed%3 != 0 {
						h.clock = NewManualClock(time.Unix(t0Unix, 0))
						cfg.Clock = h.clock
					}
					base.l.Close()
					h.l = mustNew(t, cfg)
					h.floor = make([]int64, 1)
					clock := int64(t0Unix) * 1e9
					for range 800 {
						op, kb, gap, nb, lim := uint8(rng.Uint32()), uint8(rng.Uint32()), uint8(rng.IntN(24)|rng.IntN(4)<<6), uint8(rng.Uint32()), uint8(rng.Uint32())
						clock += int64(gap%64) * h.window / 64 / h.unit * h.unit
						now := clock
						if op>>4&3 == 0 {
							now -= int64(gap>>2) * h.window / 32 / h.unit * h.unit
						}
						if h.clock != nil {
							// The limiter's clock is up to a window behind
							// the instants or ahead of them.
							h.now = clock + (rng.Int64N(4)-2)*h.window/2
							h.clock.Set(time.Unix(0, h.now))
						}
						k := string('a' + rune(kb%4))
						if large {
							k = cappedKeys[rng.IntN(len(cappedKeys))]
						}
						cost := int(nb) % (slices.Max(h.limitsOf(k)) + 2)
						switch op % 16 {
						case 0:
							h.allow(k, now, cost, false)
						case 1:
							if lim%4 == 0 {
								h.setDefaults(h.limitsFrom(lim))
							} else if _, ok := h.enc[k]; ok {
								h.setLimits(k, h.limitsFrom(lim)) // not a new key: SetLimits may evict too
							}
						case 2:
							h.clearLimit(k)
						case 15:
							h.sweep(now)
						default:
							h.allow(k, now, cost, true)
						}
					}
					evicts += h.evicts
					refused += h.refuse
				}
				if evicts+refused < 50 {
					t.Fatalf("%d evictions and %d refusals: the test tests little", evicts, refused)
				}
				totalEvicts += evicts
			})
		}
	}
}
