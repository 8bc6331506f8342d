package sync

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Shared limiters of several rates (Config.Rates) against real Redis
// servers: each rate is shared with counters of its own.

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

// TestSharedRatesTwoNodes: two nodes share a key of two rates (5 per
// second, 8 per 10 s) through one Redis. A request either rate denies
// consumes from neither, locally or in Redis; each rate's counters in
// Redis hold what was admitted in their buckets, under Redis keys that
// name the rate's window and carry the limiter key as their hash tag,
// with a TTL of the rate's own window.
func TestSharedRatesTwoNodes(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			c := sharedClient(t)
			clock := shardlimit.NewManualClock(at(100 * time.Millisecond))
			cfg := SharedConfig{Config: shardlimit.Config{Algorithm: alg, Clock: clock,
				Rates: []shardlimit.Rate{{Limit: 5, Window: time.Second}, {Limit: 8, Window: 10 * time.Second}}},
				Prefix: redistest.Prefix(t)}
			a, b := newShared(t, c, cfg), newShared(t, c, cfg)
			t1 := clock.Now()
			if r := a.AllowN("k", t1, 3); !r.Allowed || r.Window != time.Second || r.Remaining != 2 {
				t.Fatalf("a: %+v", r)
			}
			mustFlush(t, a)
			if r := b.AllowN("k", t1, 2); !r.Allowed || r.Remaining != 3 {
				t.Fatalf("b before its flush: %+v", r)
			}
			mustFlush(t, b) // b learns a's 3 in both rates
			if r := b.Peek("k", t1, 0); r.Remaining != 0 || r.Window != time.Second {
				t.Fatalf("b's view after its flush: %+v, want the second's rate spent", r)
			}
			if r := b.AllowN("k", t1.Add(50*time.Millisecond), 1); r.Allowed || r.Window != time.Second {
				t.Fatalf("b: %+v, want denied by the second's rate", r)
			}
			// 1.4 s on: the second's rate is free, the ten seconds' holds
			// 5 of 8.
			t2 := clock.Advance(1400 * time.Millisecond)
			if r := b.AllowN("k", t2, 3); !r.Allowed || r.Window != 10*time.Second || r.Remaining != 0 {
				t.Fatalf("b in the next second: %+v", r)
			}
			if r := b.AllowN("k", t2, 1); r.Allowed || r.Window != 10*time.Second {
				t.Fatalf("b: %+v, want denied by the ten seconds' rate", r)
			}
			mustFlush(t, b)
			if st := b.SharedStats(); st.SentUnits != 2*5 || st.ItemErrors != 0 || st.DroppedUnits != 0 {
				t.Fatalf("b's stats %+v: want 5 units sent per rate", st)
			}

			be := a.backend.(*RedisBackend)
			ctx := ctxT(t, 5*time.Second)
			for _, rate := range a.tab.SyncRates() {
				w := time.Duration(rate.Window)
				want := map[int64]int64{} // bucket id -> units admitted in it
				want[t1.UnixNano()/rate.Size] += 5
				want[t2.UnixNano()/rate.Size] += 3
				for id, n := range want {
					if got := rateCounters(t, c, a, []string{"k"}, w, id)[0]; got != n {
						t.Errorf("rate %v, bucket %d: Redis holds %d units, admitted %d", w, id, got, n)
					}
					key := be.RateCounterKey("k", w, id)
					if wantKey := fmt.Sprintf("%s{k}:%d:%d", be.prefix, w.Microseconds(), id); key != wantKey || keySlot(key) != keySlot("{k}") {
						t.Errorf("Redis key %q, want %q in the slot of {k}", key, wantKey)
					}
				}
				// The bucket of t2 was written last, at t2: kept until it
				// stops counting, one bucket and a second more.
				id := t2.UnixNano() / rate.Size
				ttl := time.Duration((id+int64(rate.Count))*rate.Size-t2.UnixNano()+rate.Size) + time.Second
				if got := c.PTTL(ctx, be.RateCounterKey("k", w, id)).Val(); got > ttl || got < ttl-2*time.Second {
					t.Errorf("rate %v: TTL %v, want %v less the test's time", w, got, ttl)
				}
				if n := c.Exists(ctx, be.CounterKey("k", id)).Val(); n != 0 {
					t.Errorf("a counter of one rate's format for bucket %d exists", id)
				}
			}
		})
	}
}

// TestSharedRatesNearLimit: a key is read at every flush when any of its
// rates is near its own limit, once however many are; a key whose shorter
// rate has little room but no other node's units in it, and whose longer
// rate has room to spare, is not.
func TestSharedRatesNearLimit(t *testing.T) {
	c := sharedClient(t)
	clock := shardlimit.NewManualClock(at(time.Second))
	cfg := SharedConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Clock: clock,
		Rates: []shardlimit.Rate{{Limit: 1000, Window: time.Minute}, {Limit: 1000, Window: time.Hour}}},
		Prefix: redistest.Prefix(t)}
	pair := func(limits map[string][2]int) (a, b *Shared) {
		cfg.Prefix = redistest.Prefix(t)
		a, b = newShared(t, c, cfg), newShared(t, c, cfg)
		for _, s := range []*Shared{a, b} {
			for key, l := range limits {
				if err := s.SetLimits(key, l[0], l[1]); err != nil {
					t.Fatal(err)
				}
			}
		}
		return a, b
	}
	limits := map[string][2]int{ // per minute, per hour
		"short": {10, 1000}, // near in the minute
		"long":  {1000, 10}, // near in the hour
		"both":  {10, 10},   // near in both
		"far":   {1000, 1000},
	}
	a, b := pair(limits)
	now := clock.Now()
	for key := range limits {
		a.AllowN(key, now, 5)
	}
	mustFlush(t, a)
	for key := range limits {
		b.AllowN(key, now, 4)
	}
	mustFlush(t, b)
	// a takes one more unit of every key; b flushes without deciding and
	// reads those near a limit.
	for key := range limits {
		a.AllowN(key, now, 1)
	}
	mustFlush(t, a)
	mustFlush(t, b)
	if st := b.SharedStats(); st.NearKeys != 3 {
		t.Errorf("b read %d keys for being near their limit, want short, long and both, once each", st.NearKeys)
	}
	for key, want := range map[string]int{"short": 0, "long": 0, "both": 0, "far": 991} {
		if r := b.Peek(key, now, 0); r.Remaining != want {
			t.Errorf("b's view of %s after its flush: %+v, want %d left", key, r, want)
		}
	}

	// x: a's 5 units are in the first minute, b's 1 in the third: b's
	// minute has 4 left, none of them another node's units, and its hour
	// 994, much more than the others could take before its next flush.
	a, b = pair(map[string][2]int{"x": {5, 1000}})
	a.AllowN("x", now, 5)
	mustFlush(t, a)
	clock.Advance(2 * time.Minute)
	b.AllowN("x", clock.Now(), 1)
	mustFlush(t, b)
	if r := b.Peek("x", clock.Now(), 0); r.Remaining != 4 || r.Window != time.Minute {
		t.Fatalf("b's view of x: %+v", r)
	}
	mustFlush(t, b)
	if st := b.SharedStats(); st.NearKeys != 0 {
		t.Errorf("b read x for being near its limit: %+v", st)
	}
}

// TestSharedRatesConfig: a limiter of several rates takes its fallback
// limits per rate, windows of whole microseconds, and default limits per
// rate; the fallback limits apply while Degraded.
func TestSharedRatesConfig(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	rates := []shardlimit.Rate{{Limit: 10, Window: time.Second}, {Limit: 100, Window: time.Minute}}
	two := shardlimit.Config{Algorithm: shardlimit.FixedWindow, Rates: rates}
	for name, cfg := range map[string]SharedConfig{
		"FallbackLimit":        {Config: two, FallbackLimit: 5},
		"both fallbacks":       {Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 1, Window: time.Second}, FallbackLimit: 1, FallbackLimits: []int{1}},
		"fallback count":       {Config: two, FallbackLimits: []int{5}},
		"fallback zero":        {Config: two, FallbackLimits: []int{5, 0}},
		"fallback range":       {Config: two, FallbackLimits: []int{5, shardlimit.MaxLimit + 1}},
		"log fallback range":   {Config: shardlimit.Config{Algorithm: shardlimit.SlidingLog, Limit: 1, Window: time.Second}, FallbackLimit: shardlimit.MaxSlidingLogLimit + 1},
		"window below 1us":     {Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Rates: []shardlimit.Rate{{Limit: 1, Window: time.Second + 1}, {Limit: 2, Window: time.Minute}}}},
		"gcra of several":      {Config: shardlimit.Config{Algorithm: shardlimit.GCRA, Rates: rates}},
		"counter not multiple": {Config: shardlimit.Config{Algorithm: shardlimit.SlidingCounter, Buckets: 7, Rates: rates}},
	} {
		if s, err := NewShared(c, cfg); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
			if s != nil {
				s.Close()
			}
		}
	}

	s := newShared(t, c, SharedConfig{Config: two, FallbackLimits: []int{2, 20},
		FlushInterval: time.Millisecond, FlushTimeout: 20 * time.Millisecond, FailAfter: 1})
	if err := s.SetDefaultLimit(5); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("one default limit for two rates: %v", err)
	}
	if err := s.SetDefaultLimits(8, -1); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("a negative default limit: %v", err)
	}
	s.AllowN("k", at(0), 1)
	eventually(t, 10*time.Second, func() string {
		if s.State() != Degraded {
			return "never degraded"
		}
		return ""
	})
	if r := s.Peek("k2", at(0), 0); r.Limit != 2 || r.Window != time.Second {
		t.Fatalf("while degraded %+v, want the second's fallback limit 2 binding", r)
	}
	if err := s.SetDefaultLimits(8, 80); err != nil { // taken on recovery
		t.Fatal(err)
	}
	if r := s.Peek("k2", at(0), 0); r.Limit != 2 {
		t.Fatalf("while degraded after SetDefaultLimits %+v, want the fallback limit 2", r)
	}
	if r := s.AllowN("k3", at(0), 3); r.Allowed || r.Window != time.Second {
		t.Fatalf("3 units above the fallback limit 2: %+v", r)
	}
}

// TestSharedRatesByPolicy: under FailOpen a request above one rate's limit
// is denied for good (no wait admits it), one within every limit is
// admitted.
func TestSharedRatesByPolicy(t *testing.T) {
	s := newShared(t, newClient(t, "127.0.0.1:1"), SharedConfig{
		Config: shardlimit.Config{Algorithm: shardlimit.SlidingCounter,
			Rates: []shardlimit.Rate{{Limit: 3, Window: time.Second}, {Limit: 100, Window: time.Minute}}},
		FlushInterval: time.Millisecond, FlushTimeout: 20 * time.Millisecond, FailAfter: 1, Policy: FailOpen,
	})
	s.AllowN("k", at(0), 1)
	eventually(t, 10*time.Second, func() string {
		if s.State() != Degraded {
			return "never degraded"
		}
		return ""
	})
	if r := s.AllowN("k", at(0), 4); r.Allowed || r.RetryAfter != shardlimit.Never {
		t.Fatalf("4 units above the second's limit 3: %+v", r)
	}
	if r := s.AllowN("k", at(0), 3); !r.Allowed {
		t.Fatalf("3 units fail open: %+v", r)
	}
}
