package sync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	stdsync "sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// writtenBackend is a Backend that records the counters each Add wrote.
type writtenBackend struct {
	*RedisBackend
	mu      stdsync.Mutex
	written []Item
}

func (b *writtenBackend) Add(ctx context.Context, items []Item, out []ItemResult) []ItemResult {
	b.mu.Lock()
	b.written = append(b.written, items...)
	b.mu.Unlock()
	return b.RedisBackend.Add(ctx, items, out)
}

// take returns the items written since the last take.
func (b *writtenBackend) take() []Item {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.written
	b.written = nil
	return w
}

// TestSharedRedisHoldsWhatWasAdmitted: two nodes share two keys of one
// rate and of three through a real Redis, deciding costs of 1 to 6 units, so
// that many requests are denied by one rate after others admitted them
// (their units are given back). Flushed after every decision, each rate's
// Redis counter of each bucket holds exactly the units the two nodes
// admitted in it: no refund loses a unit or sends one that was given back.
//
// Each counter is read right after every flush that wrote it and every
// decision that admitted into it, not once at the end, and the windows are
// long: Redis expires a counter in real time, while the test's clock is a
// manual one, and a loaded machine may take longer than a window to run
// all 300 steps.
func TestSharedRedisHoldsWhatWasAdmitted(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.SlidingLog} {
		for _, nrates := range []int{1, 3} {
			t.Run(fmt.Sprint(alg, "/", nrates, "_rates"), func(t *testing.T) {
				c := sharedClient(t)
				rb, err := NewRedisBackend(c, redistest.Prefix(t))
				if err != nil {
					t.Fatal(err)
				}
				// Windows of a minute and more: Redis expires a counter in
				// real time, about a second plus the rest of its window after
				// its last write, and a loaded machine stalled over a second
				// between a flush and the read after it.
				const scale = 60
				clock := shardlimit.NewManualClock(at(scale * 100 * time.Millisecond))
				backends := []*writtenBackend{{RedisBackend: rb}, {RedisBackend: rb}}
				nodes := make([]*Shared, 2)
				for i := range nodes {
					nodes[i] = newShared(t, nil, SharedConfig{Config: shardlimit.Config{Algorithm: alg, Clock: clock,
						Rates: []shardlimit.Rate{{Limit: 5, Window: scale * time.Second}, {Limit: 9, Window: scale * 4 * time.Second}, {Limit: 3, Window: scale * 200 * time.Millisecond}}[:nrates]},
						Backend: backends[i]})
				}
				type bucket struct {
					key string
					w   time.Duration
					id  int64
				}
				admitted := map[bucket]int64{}
				check := func(step int, bs []bucket) {
					t.Helper()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					seen := map[bucket]bool{}
					for _, b := range bs {
						if seen[b] {
							continue
						}
						seen[b] = true
						got, err := c.HGet(ctx, rb.RateCounterKey(b.key, b.w, b.id), "t").Int64()
						if err != nil && !errors.Is(err, redis.Nil) {
							t.Fatalf("step %d: HGET counter of %+v: %v", step, b, err)
						}
						if got != admitted[b] {
							t.Errorf("step %d: key %q, rate %v, bucket %d: Redis holds %d units, %d admitted", step, b.key, b.w, b.id, got, admitted[b])
						}
					}
				}
				rates := nodes[0].tab.SyncRates()
				rng := rand.New(rand.NewPCG(1, uint64(alg)))
				denied := 0
				for step := range 300 {
					// Instants only move forward: a flush brings keys near
					// their limit to its clock's instant.
					now := clock.Advance(scale * time.Duration(rng.Int64N(int64(60*time.Millisecond))))
					key := string(rune('a' + rng.IntN(2)))
					n := 1 + rng.IntN(6)
					node := rng.IntN(2)
					var mine []bucket
					if r := nodes[node].AllowN(key, now, n); r.Allowed {
						for _, rate := range rates {
							w := time.Duration(rate.Window)
							if nrates == 1 {
								w = 0 // the counters of a limiter of one rate do not name its window
							}
							b := bucket{key, w, now.UnixNano() / rate.Size}
							admitted[b] += int64(n)
							mine = append(mine, b)
						}
					} else {
						denied++
					}
					// The deciding node first: after its flush, nothing the
					// nodes admitted is pending anywhere.
					for _, i := range []int{node, 1 - node} {
						mustFlush(t, nodes[i])
						var bs []bucket
						for _, it := range backends[i].take() {
							bs = append(bs, bucket{it.Key, it.Window, it.ID})
						}
						if i == node {
							bs = append(bs, mine...)
						}
						check(step, bs)
					}
					if t.Failed() {
						t.FailNow()
					}
				}
				for i, s := range nodes {
					if st := s.SharedStats(); st.DroppedUnits != 0 || st.ItemErrors != 0 {
						t.Errorf("node %d: %+v", i, st)
					}
				}
				if denied < 50 || len(admitted) < 10*nrates {
					t.Fatalf("%d denials, %d buckets written: the test tests little", denied, len(admitted))
				}
			})
		}
	}
}

// rateCounters reads the Redis counters of keys for the rate of window w
// (0: a limiter of one rate), bucket id, failing the test on an error.
func rateCounters(t *testing.T, c redis.Cmdable, s *Shared, keys []string, w time.Duration, id int64) []int64 {
	t.Helper()
	out, err := readRateCounters(t, c, s, keys, w, id)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
