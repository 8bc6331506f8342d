package sync

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// newShared returns a Shared limiter on client with the test's prefix and a
// manual clock at T0, closed by the test's cleanup.
func newShared(t testing.TB, client RedisClient, cfg SharedConfig) *Shared {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = redistest.Prefix(t)
	}
	if cfg.Clock == nil {
		cfg.Clock = shardlimit.NewManualClock(T0)
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Minute // tests flush by hand unless they say
	}
	s, err := NewShared(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustFlush(t testing.TB, s *Shared) {
	t.Helper()
	if err := s.Flush(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestSharedMaxFlushGap: the reconciler reports the longest time between
// the starts of two flushes, which is at least the flush interval.
func TestSharedMaxFlushGap(t *testing.T) {
	const interval = 20 * time.Millisecond
	s := newShared(t, sharedClient(t), SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute},
		FlushInterval: interval,
	})
	s.AllowN("k", at(time.Second), 1)
	eventually(t, 10*time.Second, func() string {
		if s.SharedStats().MaxFlushGap == 0 {
			return "no gap measured"
		}
		return ""
	})
	if g := s.SharedStats().MaxFlushGap; g < interval {
		t.Fatalf("MaxFlushGap %v, below the interval %v", g, interval)
	}
}

// TestSharedDroppedUnitsNeverReachTheStore: units a flush drops (their
// bucket is over by its clock) are counted dropped and never sent, also
// when the clock comes back and the bucket is flushed again: its floor no
// longer includes them. Every admitted unit is in Redis or dropped, once.
func TestSharedDroppedUnitsNeverReachTheStore(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			c := sharedClient(t)
			clock := shardlimit.NewManualClock(at(time.Second))
			s := newShared(t, c, SharedConfig{Config: shardlimit.Config{Algorithm: alg, Limit: 100, Window: 10 * time.Second, Clock: clock}})
			s.AllowN("k", at(time.Second), 3)
			clock.Set(at(time.Hour)) // the clock jumps ahead
			_ = s.Flush(ctxT(t, 5*time.Second))
			if st := s.SharedStats(); st.DroppedUnits != 3 {
				t.Fatalf("stats %+v: want the 3 units dropped", st)
			}
			clock.Set(at(1500 * time.Millisecond)) // and comes back
			s.AllowN("k", at(1500*time.Millisecond), 1)
			mustFlush(t, s)
			size := s.tab.SyncRates()[0].Size
			if got := counters(t, c, s, []string{"k"}, at(time.Second).UnixNano()/size)[0]; got != 1 {
				t.Fatalf("Redis holds %d units, want 1 (3 more were counted dropped)", got)
			}
		})
	}
}

func TestSharedTwoNodesShareOneLimit(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			c := sharedClient(t)
			prefix := redistest.Prefix(t)
			cfg := SharedConfig{Config: shardlimit.Config{Algorithm: alg, Limit: 10, Window: time.Hour}, Prefix: prefix}
			a, b := newShared(t, c, cfg), newShared(t, c, cfg)
			now := at(time.Second)
			for i := range 6 {
				if r := a.AllowN("client", now, 1); !r.Allowed || r.Remaining != 9-i {
					t.Fatalf("a %d: %+v", i, r)
				}
			}
			mustFlush(t, a)
			if r := b.AllowN("client", now, 1); !r.Allowed || r.Remaining != 9 {
				t.Fatalf("b before its flush: %+v", r)
			}
			mustFlush(t, b) // sends b's unit, learns a's 6
			if r := b.Peek("client", now, 0); r.Remaining != 3 {
				t.Fatalf("b after flush: remaining %d, want 3", r.Remaining)
			}
			mustFlush(t, a) // nothing pending: a learns nothing new yet
			a.AllowN("client", now, 1)
			mustFlush(t, a)
			if r := a.Peek("client", now, 0); r.Remaining != 2 {
				t.Fatalf("a after flush: remaining %d, want 2", r.Remaining)
			}
			admitted := 0
			for range 10 {
				if a.AllowN("client", now, 1).Allowed {
					admitted++
				}
				if b.AllowN("client", now, 1).Allowed {
					admitted++
				}
			}
			// a sees 7+1 used, b 1+6 (not a's 7th yet): 2 and 3 more
			// before the next flushes, 11 in all: the over-admission of
			// a node seeing the other one flush late.
			if admitted != 5 {
				t.Fatalf("admitted %d more, want 5", admitted)
			}
			mustFlush(t, a)
			mustFlush(t, b)
			if a.AllowN("client", now, 1).Allowed || b.AllowN("client", now, 1).Allowed {
				t.Fatal("admitted after both nodes flushed a full window")
			}
			if st := a.SharedStats(); st.Flushes != 3 || st.SentUnits != 9 || st.State != Healthy || st.ItemErrors != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestSharedAllowAtCountsLikeAllowN(t *testing.T) {
	// The bool forms decide on the same shared state: a's units taken
	// through AllowAt and AllowBytesAt reach b at the flushes.
	c := sharedClient(t)
	cfg := SharedConfig{Config: shardlimit.Config{Algorithm: shardlimit.SlidingCounter, Limit: 10, Window: time.Hour}, Prefix: redistest.Prefix(t)}
	a, b := newShared(t, c, cfg), newShared(t, c, cfg)
	now := at(time.Second)
	for i := range 6 {
		var ok bool
		if i%2 == 0 {
			ok = a.AllowAt("client", now)
		} else {
			ok = a.AllowBytesAt([]byte("client"), now)
		}
		if !ok {
			t.Fatalf("a %d denied", i)
		}
	}
	mustFlush(t, a)
	if !b.AllowAt("client", now) { // b learns of a key at its flush after a decision
		t.Fatal("b's first request denied")
	}
	mustFlush(t, b)
	if r := b.Peek("client", now, 0); r.Remaining != 3 {
		t.Fatalf("b after the flushes: %+v, want 3 remaining", r)
	}
	for range 3 {
		if !b.AllowAt("client", now) {
			t.Fatal("b denied within the shared limit")
		}
	}
	if b.AllowAt("client", now) || b.AllowBytesAt([]byte("client"), now) {
		t.Fatal("b admitted past the shared limit")
	}
}

func TestSharedRestartIsNotAFreeReset(t *testing.T) {
	c := sharedClient(t)
	cfg := SharedConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Hour},
		Prefix: redistest.Prefix(t)}
	a := newShared(t, c, cfg)
	a.AllowN("k", at(time.Second), 7)
	if err := a.Close(); err != nil { // the final flush sends the 7
		t.Fatal(err)
	}
	wantClosed(t, a.AllowN("k", at(time.Second), 1).Err)
	a2 := newShared(t, c, cfg)
	a2.AllowN("k", at(2*time.Second), 1)
	mustFlush(t, a2)
	if r := a2.Peek("k", at(2*time.Second), 0); r.Remaining != 2 {
		t.Fatalf("after restart: remaining %d, want 2", r.Remaining)
	}
}

func wantClosed(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, shardlimit.ErrClosed) {
		t.Fatalf("error %v, want ErrClosed", err)
	}
}

func TestSharedHealsAStoreThatLostData(t *testing.T) {
	c := sharedClient(t)
	cfg := SharedConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 100, Window: time.Hour},
		Prefix: redistest.Prefix(t)}
	a := newShared(t, c, cfg)
	be := a.backend.(*RedisBackend)
	now := at(time.Second)
	id := now.UnixNano() / int64(time.Hour)
	a.AllowN("k", now, 5)
	mustFlush(t, a)
	if err := c.Del(ctxT(t, time.Second), be.CounterKey("k", id)).Err(); err != nil {
		t.Fatal(err)
	}
	a.AllowN("k", now, 1)
	mustFlush(t, a)
	got, err := be.Read(ctxT(t, time.Second), "k", id, 0, nil)
	if err != nil || len(got) != 1 || got[0] != 6 {
		t.Fatalf("counter after heal %v %v, want [6]", got, err)
	}
	ttl, err := c.PTTL(ctxT(t, time.Second), be.CounterKey("k", id)).Result()
	if err != nil || ttl <= 0 {
		t.Fatalf("counter without expiry: %v %v", ttl, err)
	}
}

func TestSharedRedisDown(t *testing.T) {
	// Nothing listening, and a black hole.
	bh := redistest.StartProxy(t, redistest.RequireRedis(t))
	bh.SetMode(redistest.Blackhole)
	for name, addr := range map[string]string{"refused": "127.0.0.1:1", "blackhole": bh.Addr} {
		t.Run(name, func(t *testing.T) {
			var changes atomic.Int32
			start := time.Now()
			s, err := NewShared(newClient(t, addr), SharedConfig{
				// A frozen clock: six Allows straddling a minute would admit 6.
				Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 5, Window: time.Minute, Clock: shardlimit.NewManualClock(at(time.Second))},
				FlushInterval: 5 * time.Millisecond, FlushTimeout: 50 * time.Millisecond,
				OnStateChange: func(StateChange) { changes.Add(1) },
			})
			// A wait for the store would last the client's 10 s socket
			// timeouts; how fast it returns otherwise is the machine's load.
			if err != nil || time.Since(start) >= 10*time.Second {
				t.Fatalf("NewShared: %v after %v", err, time.Since(start))
			}
			admitted := 0
			for range 6 {
				if s.Allow("k") {
					admitted++
				}
			}
			if admitted != 5 {
				t.Fatalf("admitted %d of 6 with limit 5 while Redis is down", admitted)
			}
			deadline := time.Now().Add(10 * time.Second)
			for s.State() != Degraded {
				if time.Now().After(deadline) {
					t.Fatalf("never degraded: %+v", s.SharedStats())
				}
				s.Allow("other")
				time.Sleep(5 * time.Millisecond)
			}
			if changes.Load() == 0 {
				t.Fatal("no state change reported")
			}
			start = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			s.Shutdown(ctx)
			if d := time.Since(start); d >= 10*time.Second {
				t.Fatalf("Shutdown took %v with Redis down: it waited for the client's timeouts", d)
			}
		})
	}
}

func TestSharedFailClosed(t *testing.T) {
	s := newShared(t, newClient(t, "127.0.0.1:1"), SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.SlidingCounter, Limit: 5, Window: time.Minute},
		FlushInterval: time.Millisecond, FlushTimeout: 20 * time.Millisecond, FailAfter: 1, Policy: FailClosed,
	})
	s.AllowN("k", at(0), 1)
	deadline := time.Now().Add(10 * time.Second)
	for s.State() != Degraded {
		if time.Now().After(deadline) {
			t.Fatal("never degraded")
		}
		time.Sleep(time.Millisecond)
	}
	r := s.AllowN("k", at(0), 1)
	if r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("fail closed admitted: %+v", r)
	}
	if s.AllowAt("k", at(0)) || s.AllowBytesAt([]byte("k"), at(0)) {
		t.Fatal("fail closed admitted through AllowAt")
	}
	if r := s.AllowN("k", at(0), 0); !r.Allowed {
		t.Fatal("a peek failed closed")
	}
}

func TestSharedFallbackLimit(t *testing.T) {
	s := newShared(t, newClient(t, "127.0.0.1:1"), SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 8, Window: time.Minute},
		FlushInterval: time.Millisecond, FlushTimeout: 20 * time.Millisecond, FailAfter: 1, FallbackLimit: 2,
	})
	s.AllowN("k", at(0), 1)
	deadline := time.Now().Add(10 * time.Second)
	for s.State() != Degraded {
		if time.Now().After(deadline) {
			t.Fatal("never degraded")
		}
		time.Sleep(time.Millisecond)
	}
	if r := s.Peek("k2", at(0), 0); r.Limit != 2 {
		t.Fatalf("limit while degraded %d, want 2", r.Limit)
	}
}

// TestSharedConfigValidation: NewShared refuses bad configs, of one rate
// and of several, with ErrInvalidConfig.
func TestSharedConfigValidation(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	base := shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 1, Window: time.Second}
	rates := []shardlimit.Rate{{Limit: 10, Window: time.Second}, {Limit: 100, Window: time.Minute}}
	two := shardlimit.Config{Algorithm: shardlimit.FixedWindow, Rates: rates}
	for name, cfg := range map[string]SharedConfig{
		"gcra":           {Config: shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: 1, Window: time.Second}},
		"bad limit":      {Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: -1, Window: time.Second}},
		"interval":       {Config: base, FlushInterval: -1},
		"timeout":        {Config: base, FlushTimeout: 2 * time.Minute},
		"batch":          {Config: base, MaxBatch: -3},
		"fail after":     {Config: base, FailAfter: 5000},
		"policy":         {Config: base, Policy: 9},
		"fallback limit": {Config: base, FallbackLimit: -1},
		"prefix":         {Config: base, Prefix: "a{b"},
		// Several rates: fallback limits per rate, windows of whole
		// microseconds.
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
	if _, err := NewShared(nil, SharedConfig{Config: base}); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Error("nil client accepted")
	}
}

// TestSharedTwoNodesShareEveryRate: two nodes share a key of two rates (5 per
// second, 8 per 10 s) through one Redis. A request either rate denies
// consumes from neither, locally or in Redis; each rate's counters in
// Redis hold what was admitted in their buckets, under Redis keys that
// name the rate's window and carry the limiter key as their hash tag,
// with a TTL of the rate's own window.
func TestSharedTwoNodesShareEveryRate(t *testing.T) {
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
					if wantKey := fmt.Sprintf("%s{k}:sh:%d:%d", be.prefix, w.Microseconds(), id); key != wantKey || keySlot(key) != keySlot("{k}") {
						t.Errorf("Redis key %q, want %q in the slot of {k}", key, wantKey)
					}
				}
				// The bucket of t2 is kept until it stops counting, one
				// bucket and a second more, as the write that created it
				// (at t1 if t1 is in it, else at t2) counted from its
				// instant: later writes keep the TTL.
				id := t2.UnixNano() / rate.Size
				created := t2
				if t1.UnixNano()/rate.Size == id {
					created = t1
				}
				ttl := time.Duration((id+int64(rate.Count))*rate.Size-created.UnixNano()+rate.Size) + time.Second
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

// TestSharedFallbackLimitsPerRate: a limiter of several rates takes its
// default limits per rate, and its fallback limits per rate apply while
// Degraded (the bad configs are in TestSharedConfigValidation).
func TestSharedFallbackLimitsPerRate(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	rates := []shardlimit.Rate{{Limit: 10, Window: time.Second}, {Limit: 100, Window: time.Minute}}
	two := shardlimit.Config{Algorithm: shardlimit.FixedWindow, Rates: rates}
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

// TestSharedFailOpenDeniesACostAboveAnyRate: under FailOpen a request above one rate's limit
// is denied for good (no wait admits it), one within every limit is
// admitted.
func TestSharedFailOpenDeniesACostAboveAnyRate(t *testing.T) {
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
