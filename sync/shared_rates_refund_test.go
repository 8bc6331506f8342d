package sync

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedRatesRedisHoldsWhatWasAdmitted: two nodes share two keys of
// three rates through a real Redis, deciding costs of 1 to 6 units, so
// that many requests are denied by one rate after others admitted them
// (their units are given back). Flushed after every decision, each rate's
// Redis counter of each bucket holds exactly the units the two nodes
// admitted in it: no refund loses a unit or sends one that was given back.
func TestSharedRatesRedisHoldsWhatWasAdmitted(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			c := sharedClient(t)
			clock := shardlimit.NewManualClock(at(100 * time.Millisecond))
			cfg := SharedConfig{Config: shardlimit.Config{Algorithm: alg, Clock: clock,
				Rates: []shardlimit.Rate{{Limit: 5, Window: time.Second}, {Limit: 9, Window: 4 * time.Second}, {Limit: 3, Window: 200 * time.Millisecond}}},
				Prefix: redistest.Prefix(t)}
			nodes := []*Shared{newShared(t, c, cfg), newShared(t, c, cfg)}
			type bucket struct {
				key string
				w   time.Duration
				id  int64
			}
			admitted := map[bucket]int64{}
			rates := nodes[0].tab.Rates()
			rng := rand.New(rand.NewPCG(1, uint64(alg)))
			denied := 0
			for range 300 {
				// Instants only move forward: a flush brings keys near
				// their limit to its clock's instant.
				now := clock.Advance(time.Duration(rng.Int64N(int64(60 * time.Millisecond))))
				key := string(rune('a' + rng.IntN(2)))
				n := 1 + rng.IntN(6)
				if r := nodes[rng.IntN(2)].AllowN(key, now, n); r.Allowed {
					for _, rate := range rates {
						admitted[bucket{key, time.Duration(rate.Window), now.UnixNano() / rate.Size}] += int64(n)
					}
				} else {
					denied++
				}
				for _, s := range nodes {
					mustFlush(t, s)
				}
			}
			for b, n := range admitted {
				if got := rateCounters(t, c, nodes[0], []string{b.key}, b.w, b.id)[0]; got != n {
					t.Errorf("key %q, rate %v, bucket %d: Redis holds %d units, %d admitted", b.key, b.w, b.id, got, n)
				}
			}
			for i, s := range nodes {
				if st := s.SharedStats(); st.DroppedUnits != 0 || st.ItemErrors != 0 {
					t.Errorf("node %d: %+v", i, st)
				}
			}
			if denied < 50 || len(admitted) < 30 {
				t.Fatalf("%d denials, %d buckets written: the test tests little", denied, len(admitted))
			}
		})
	}
}
