package sync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// newExact returns an Exact limiter under a prefix of the test's own,
// closed by the test's cleanup.
func newExact(t testing.TB, c RedisClient, cfg ExactConfig) *Exact {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = redistest.Prefix(t)
	}
	if cfg.Timeout == 0 {
		// Tests of decisions must not fall back because a loaded machine
		// under -race was slow; tests of failures set DefaultTimeout.
		cfg.Timeout = 5 * time.Second
	}
	e, err := NewExact(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// replay returns an Exact limiter whose scripts decide at the instants the
// test passes (the unexported test seam), on the shared Redis.
func replay(t testing.TB, cfg shardlimit.Config) *Exact {
	t.Helper()
	e := newExact(t, sharedClient(t), ExactConfig{Config: cfg})
	e.callerTime = true
	return e
}

// persistingClient runs every script in a MULTI/EXEC with a PERSIST of
// the script's keys, so Redis never expires them.
type persistingClient struct{ *redis.Client }

func (c persistingClient) tx(ctx context.Context, keys []string, run func(redis.Pipeliner) *redis.Cmd) *redis.Cmd {
	var cmd *redis.Cmd
	_, _ = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		cmd = run(p)
		for _, k := range keys {
			p.Persist(ctx, k)
		}
		return nil
	})
	return cmd
}

func (c persistingClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.tx(ctx, keys, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha1, keys, args...) })
}

func (c persistingClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.tx(ctx, keys, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, script, keys, args...) })
}

// replayNoExpiry is replay whose state keys never expire (deleted at the
// test's end): the scripts set TTLs from the replayed instants, but Redis
// counts them down in real time, so a key whose state matters for a few
// replayed microseconds (plus the scripts' one second of slack) was gone
// when a loaded machine took over a second to come back to it.
func replayNoExpiry(t testing.TB, cfg shardlimit.Config) *Exact {
	t.Helper()
	c := sharedClient(t)
	prefix := redistest.Prefix(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	e := newExact(t, persistingClient{c}, ExactConfig{Config: cfg, Prefix: prefix})
	e.callerTime = true
	return e
}

// Configurations of the step tables.
func fixedCfg(limit int, w time.Duration) shardlimit.Config {
	return shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: limit, Window: w}
}

func counterCfg(limit int, w time.Duration, buckets int) shardlimit.Config {
	return shardlimit.Config{Algorithm: shardlimit.SlidingCounter, Limit: limit, Window: w, Buckets: buckets}
}

func gcraCfg(limit int, w time.Duration) shardlimit.Config {
	return shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: limit, Window: w}
}

// never marks a step whose Retry-After is Never.
const never = -1

// step is one call of a case: at seconds after T0, cost n; the expected
// decision, remaining (-1: not checked) and Retry-After in whole seconds,
// ceil(RetryAfter) as HTTP sends it (checked when denied; never for Never).
type step struct {
	at      float64
	n       int
	allowed bool
	rem     int
	retry   int
}

// ceilSec returns d rounded up to whole seconds.
func ceilSec(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// runSteps applies steps to key of l in order.
func runSteps(t *testing.T, l shardlimit.Limiter, key string, steps []step) {
	t.Helper()
	for i, s := range steps {
		r := l.AllowN(key, at(sec(s.at)), s.n)
		ok := r.Err == nil && r.Allowed == s.allowed && (s.rem < 0 || r.Remaining == s.rem)
		if ok && !s.allowed {
			if s.retry == never {
				ok = r.RetryAfter == shardlimit.Never
			} else {
				ok = r.RetryAfter != shardlimit.Never && ceilSec(r.RetryAfter) == s.retry
			}
		}
		if ok && s.allowed && r.RetryAfter != 0 {
			ok = false
		}
		if !ok {
			t.Fatalf("step %d (t=%v n=%d): got %+v (retry %ds); want allowed=%v rem=%d retry=%ds",
				i, s.at, s.n, r, ceilSec(r.RetryAfter), s.allowed, s.rem, s.retry)
		}
	}
}

// times returns k copies of s, the i-th with remaining rem-i if s is allowed.
func times(k int, s step) []step {
	out := make([]step, k)
	for i := range out {
		out[i] = s
		if s.allowed && s.rem >= 0 {
			out[i].rem = s.rem - i
		}
	}
	return out
}

func cat(parts ...[]step) []step { return slices.Concat(parts...) }

func TestBoundaryBurstExact(t *testing.T) {
	t.Run("fixed", func(t *testing.T) {
		runSteps(t, replay(t, fixedCfg(10, time.Minute)), "k", cat(
			times(10, step{59, 1, true, 9, 0}),
			times(10, step{60, 1, true, 9, 0}),
			[]step{{118.999, 1, false, 0, 2}},
			times(10, step{120, 1, true, 9, 0}),
			[]step{{120, 1, false, 0, 60}},
		))
	})
	t.Run("counterS2", func(t *testing.T) {
		runSteps(t, replay(t, counterCfg(10, time.Minute, 60)), "k", cat(
			times(10, step{59, 1, true, 9, 0}),
			times(10, step{60, 1, false, 0, 60}),
			[]step{{118.999, 1, false, 0, 1}},
			times(10, step{120, 1, true, 9, 0}),
			[]step{{120, 1, false, 0, 61}},
		))
	})
}

func TestSteadyPollerExact(t *testing.T) {
	fixed := []step{}
	s2 := []step{}
	for i := range 5 {
		fixed = append(fixed, step{float64(i), 1, true, 4 - i, 0})
		s2 = append(s2, step{float64(i), 1, true, 4 - i, 0})
	}
	for i := 5; i <= 9; i++ {
		fixed = append(fixed, step{float64(i), 1, false, 0, 10 - i})
		s2 = append(s2, step{float64(i), 1, false, 0, 11 - i})
	}
	fixed = append(fixed, step{10, 1, true, 4, 0})
	s2 = append(s2, step{10, 1, false, 0, 1})
	for i := 11; i <= 14; i++ {
		fixed = append(fixed, step{float64(i), 1, true, 14 - i, 0})
		s2 = append(s2, step{float64(i), 1, true, 0, 0})
	}
	fixed = append(fixed, step{15, 1, false, 0, 5})
	s2 = append(s2, step{15, 1, true, 0, 0})
	for i := 16; i <= 19; i++ {
		fixed = append(fixed, step{float64(i), 1, false, 0, 20 - i})
		s2 = append(s2, step{float64(i), 1, false, 0, 22 - i})
	}
	t.Run("fixed", func(t *testing.T) { runSteps(t, replay(t, fixedCfg(5, 10*time.Second)), "k", fixed) })
	t.Run("counterS2", func(t *testing.T) { runSteps(t, replay(t, counterCfg(5, 10*time.Second, 10)), "k", s2) })
	// Long run: one Allow per second for 100 s.
	for _, c := range []struct {
		name string
		cfg  shardlimit.Config
		want int
	}{{"fixed", fixedCfg(5, 10*time.Second), 50}, {"counterS2", counterCfg(5, 10*time.Second, 10), 46}} {
		e := replay(t, c.cfg)
		got := 0
		for i := range 100 {
			if e.AllowN("long", at(time.Duration(i)*time.Second), 1).Allowed {
				got++
			}
		}
		if got != c.want {
			t.Errorf("%s: long run admitted %d, want %d", c.name, got, c.want)
		}
	}
}

func TestWeightRoundedUpExact(t *testing.T) {
	runSteps(t, replay(t, counterCfg(1, 10*time.Second, 10)), "k", []step{
		{0.5, 1, true, 0, 0},
		{10.2, 1, false, 0, 1},
		{11.0, 1, true, 0, 0},
	})
	runSteps(t, replay(t, counterCfg(10, 10*time.Second, 10)), "k", cat(
		times(10, step{0.5, 1, true, 9, 0}),
		[]step{{10.2, 1, true, 1, 0}, {10.2, 1, true, 0, 0}, {10.2, 1, false, 0, 1}},
	))
}

func TestRemainingExact(t *testing.T) {
	e := replay(t, fixedCfg(3, time.Minute))
	runSteps(t, e, "api", []step{{0, 2, true, 1, 0}, {1, 2, false, 1, 59}, {2, 1, true, 0, 0}})
	for i, want := range []struct{ rem, retry, reset int }{{2, 0, 60}, {1, 0, 59}, {0, 0, 58}, {0, 57, 57}, {0, 56, 56}} {
		r := e.AllowN("peer", at(time.Duration(i)*time.Second), 1)
		if r.Remaining != want.rem || ceilSec(r.RetryAfter) != want.retry || ceilSec(r.ResetAfter) != want.reset || r.Allowed != (i < 3) {
			t.Errorf("t=%d: %+v, want %+v", i, r, want)
		}
	}
}

func TestRetryAfterUnitsExact(t *testing.T) {
	e := replay(t, fixedCfg(5, time.Minute))
	runSteps(t, e, "k", times(5, step{0, 1, true, 4, 0}))
	for _, c := range []struct {
		at          float64
		retry, rset time.Duration
	}{{0, 60 * time.Second, 60 * time.Second}, {30.25, 29750 * time.Millisecond, 29750 * time.Millisecond}, {59.5, 500 * time.Millisecond, 500 * time.Millisecond}} {
		r := e.AllowN("k", at(sec(c.at)), 1)
		if r.Allowed || r.RetryAfter != c.retry || r.ResetAfter != c.rset {
			t.Errorf("t=%v: %+v, want RetryAfter %v exactly", c.at, r, c.retry)
		}
	}
	r := e.AllowN("k", at(time.Minute), 1)
	if !r.Allowed || r.Remaining != 4 || r.ResetAfter != time.Minute || r.RetryAfter != 0 {
		t.Errorf("t=60: %+v", r)
	}
}

func TestAdvertisedResetExact(t *testing.T) {
	e := replay(t, fixedCfg(2, 30*time.Second))
	runSteps(t, e, "k", []step{{0, 1, true, 1, 0}, {0, 1, true, 0, 0}, {0.4, 1, false, 0, 30}})
	if r := e.Peek("k", at(sec(0.4)), 1); r.ResetAfter != 29600*time.Millisecond || r.RetryAfter != 29600*time.Millisecond {
		t.Errorf("at 0.4: %+v, want ResetAfter = RetryAfter = 29.6s", r)
	}
	runSteps(t, e, "k", []step{{30, 1, true, 1, 0}})
}

// TestRetryAfterOnRedisClockExact: with Redis's own clock (W = 2 s), a
// client that is denied, sleeps exactly RetryAfter and retries is admitted:
// 100 of 100 trials, for each algorithm (trials run in parallel).
func TestRetryAfterOnRedisClockExact(t *testing.T) {
	c := sharedClient(t)
	cfgs := map[string]shardlimit.Config{
		"fixed":     fixedCfg(2, 2*time.Second),
		"counterS2": counterCfg(2, 2*time.Second, 10),
		"gcra":      gcraCfg(2, 2*time.Second),
	}
	var wg stdsync.WaitGroup
	var failures atomic.Int64
	var msgs stdsync.Map
	var limiters []*Exact
	for name, cfg := range cfgs {
		// newExact's 5 s Timeout, not 1 s: a call cut short is decided by
		// the local fallback, whose RetryAfter Redis need not honour, and
		// 300 trials at once on a loaded machine under -race made calls
		// that slow.
		e := newExact(t, c, ExactConfig{Config: cfg})
		limiters = append(limiters, e)
		for trial := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("trial%d", trial)
				var r shardlimit.Result
				for range 10 { // a window may end between two calls
					if r = e.AllowN(key, time.Now(), 1); !r.Allowed {
						break
					}
				}
				if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > 3*time.Second {
					failures.Add(1)
					msgs.Store(name+key, fmt.Sprintf("%s %s: no denial with a usable RetryAfter: %+v", name, key, r))
					return
				}
				time.Sleep(r.RetryAfter)
				if r2 := e.AllowN(key, time.Now(), 1); !r2.Allowed {
					failures.Add(1)
					msgs.Store(name+key, fmt.Sprintf("%s %s: denied again after sleeping RetryAfter %v: %+v", name, key, r.RetryAfter, r2))
				}
			}()
		}
	}
	wg.Wait()
	for _, e := range limiters {
		if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
			t.Errorf("Redis errors during the test: %+v", st)
		}
	}
	if n := failures.Load(); n > 0 {
		msgs.Range(func(_, v any) bool { t.Error(v); return true })
		t.Fatalf("%d of 300 trials failed", n)
	}
}

// TestConcurrentExact: one script per decision, so concurrent
// callers never both see the same room.
// TestConcurrentExact: 64 goroutines on one key at one instant, with one
// rate and with a looser second one beside it: exactly the limit is
// admitted, each remaining count reported once, costs of 3 fill it to 99,
// and a key's own limit of 3 admits 3 of 10 concurrent calls.
func TestConcurrentExact(t *testing.T) {
	loose := rate(200, 30*time.Second) // never binds
	for name, cfg := range map[string]shardlimit.Config{
		"fixed":               fixedCfg(100, time.Minute),
		"counterS2":           counterCfg(100, time.Minute, 60),
		"gcra":                gcraCfg(100, time.Minute),
		"fixed/two_rates":     ratesCfg(shardlimit.FixedWindow, 0, rate(100, time.Minute), loose),
		"counterS2/two_rates": ratesCfg(shardlimit.SlidingCounter, 60, rate(100, time.Minute), loose),
		"gcra/two_rates":      ratesCfg(shardlimit.GCRA, 0, rate(100, time.Minute), loose),
	} {
		t.Run(name, func(t *testing.T) {
			// A generous timeout: 64 goroutines on a loaded machine under
			// -race must not fall back to the local limiter.
			e := replay(t, cfg)
			defer func() {
				if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
					t.Errorf("Redis errors during the test: %+v", st)
				}
			}()
			now := at(time.Second)
			burst := func(key string, n, goroutines, calls int) (allowed int, rems []int) {
				var mu stdsync.Mutex
				var wg stdsync.WaitGroup
				start := make(chan struct{})
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						for range calls {
							r := e.AllowN(key, now, n)
							if r.Err != nil {
								t.Error(r.Err)
							}
							if r.Allowed {
								mu.Lock()
								allowed++
								rems = append(rems, r.Remaining)
								mu.Unlock()
							}
						}
					}()
				}
				close(start)
				wg.Wait()
				return allowed, rems
			}
			allowed, rems := burst("hot", 1, 64, 10)
			slices.Sort(rems)
			want := make([]int, 100)
			for i := range want {
				want[i] = i
			}
			if allowed != 100 || !slices.Equal(rems, want) {
				t.Fatalf("hot: %d allowed, remaining %v; want 100 allowed with remaining 0..99 once each", allowed, rems)
			}
			if allowed, _ := burst("hot2", 3, 64, 10); allowed != 33 {
				t.Fatalf("hot2: %d allowed, want 33", allowed)
			}
			if r := e.AllowN("hot2", now, 1); !r.Allowed || r.Remaining != 0 {
				t.Fatalf("hot2 last unit: %+v", r)
			}
			if r := e.AllowN("hot2", now, 1); r.Allowed {
				t.Fatalf("hot2 over limit: %+v", r)
			}
			own := []int{3, 6}[:len(ratesOf(cfg))]
			if err := e.SetLimits("three", own...); err != nil {
				t.Fatal(err)
			}
			if allowed, _ := burst("three", 1, 10, 1); allowed != 3 {
				t.Fatalf("limit 3: %d allowed", allowed)
			}
		})
	}
}

func TestNegativeCostExact(t *testing.T) {
	e := replay(t, fixedCfg(5, time.Minute))
	runSteps(t, e, "k", []step{{0, 3, true, 2, 0}})
	if r := e.AllowN("k", at(time.Second), -2); !errors.Is(r.Err, shardlimit.ErrInvalidCost) || r.Allowed {
		t.Fatalf("n=-2: %+v", r)
	}
	runSteps(t, e, "k", []step{{2, 0, true, 2, 0}, {3, 3, false, 2, 57}, {3, 2, true, 0, 0}, {4, 0, true, 0, 0}})
	if r := e.AllowN("k", at(4*time.Second), math.MinInt); !errors.Is(r.Err, shardlimit.ErrInvalidCost) {
		t.Fatalf("n=MinInt: %+v", r)
	}
	runSteps(t, e, "k", []step{{4, 0, true, 0, 0}})
}

func TestLimitZeroExact(t *testing.T) {
	for name, c := range map[string]struct {
		cfg   shardlimit.Config
		retry int
	}{"fixed": {fixedCfg(5, time.Minute), 20}, "counterS2": {counterCfg(5, time.Minute, 60), 61}, "gcra": {gcraCfg(5, time.Minute), 20}} {
		t.Run(name, func(t *testing.T) {
			e := replay(t, c.cfg)
			if err := e.SetLimit("blocked", 0); err != nil {
				t.Fatal(err)
			}
			for _, s := range []float64{0, 1, 59.999, 60, 3600} {
				runSteps(t, e, "blocked", []step{{s, 1, false, 0, never}, {s, 0, true, 0, 0}})
			}
			for i := range 200 {
				if e.AllowN("blocked", at(time.Duration(i)*time.Millisecond), 1).Allowed {
					t.Fatal("limit 0 admitted a request")
				}
			}
			if err := e.SetLimit("blocked", -1); !errors.Is(err, shardlimit.ErrInvalidConfig) {
				t.Fatalf("SetLimit(-1) = %v", err)
			}
			if err := e.SetLimit("blocked", 3); err != nil {
				t.Fatal(err)
			}
			runSteps(t, e, "blocked", cat(times(3, step{100, 1, true, 2, 0}), []step{{100, 1, false, 0, c.retry}}))
			// Decided by Redis, not by the fallback (which would agree).
			if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestPerKeyLimitExact(t *testing.T) {
	e := replay(t, fixedCfg(5, time.Minute))
	if err := e.SetLimit("A", 2); err != nil {
		t.Fatal(err)
	}
	runSteps(t, e, "A", []step{{0, 1, true, 1, 0}, {0, 1, true, 0, 0}, {0, 1, false, 0, 60}})
	runSteps(t, e, "B", cat(times(5, step{0, 1, true, 4, 0}), []step{{0, 1, false, 0, 60}}))
	if r := e.AllowN("A", at(0), 1); r.Limit != 2 {
		t.Fatalf("Limit of A = %d", r.Limit)
	}
	if err := e.ClearLimit("A"); err != nil {
		t.Fatal(err)
	}
	runSteps(t, e, "A", cat(times(3, step{1, 1, true, 2, 0}), []step{{1, 1, false, 0, 59}}))
}

func TestSubSecondWindowExact(t *testing.T) {
	fixed := []step{{0, 1, true, 1, 0}, {0, 1, true, 0, 0}, {0, 1, false, 0, 1}, {0.25, 1, false, 0, 1},
		{0.5, 1, true, 1, 0}, {0.5, 1, true, 0, 0}, {0.5, 1, false, 0, 1}, {1.0, 1, true, 1, 0}}
	s2 := []step{{0, 1, true, 1, 0}, {0, 1, true, 0, 0}, {0, 1, false, 0, 1}, {0.25, 1, false, 0, 1},
		{0.5, 1, false, 0, 1}, {0.5, 1, false, 0, 1}, {0.5, 1, false, 0, 1}, {1.0, 1, true, 1, 0}}
	runSteps(t, replay(t, fixedCfg(2, 500*time.Millisecond)), "k", fixed)
	runSteps(t, replay(t, counterCfg(2, 500*time.Millisecond, 5)), "k", s2)
	for _, cfg := range []shardlimit.Config{fixedCfg(1, time.Millisecond), gcraCfg(1, time.Millisecond)} {
		runSteps(t, replay(t, cfg), "ms", []step{{0, 1, true, 0, 0}, {0.0005, 1, false, 0, 1}, {0.001, 1, true, 0, 0}})
	}
}

// TestLongWindowExact: a 365-day window in microseconds keeps every
// Lua product below 2^53 (muldiv), so a one-year window and a limit of
// 10^9 decide exactly.
func TestLongWindowExact(t *testing.T) {
	year := 365 * 24 * time.Hour
	runSteps(t, replay(t, fixedCfg(5, year)), "k", cat(
		times(5, step{0, 1, true, 4, 0}),
		[]step{{0, 1, false, 0, 31_536_000}, {2_160_000, 1, false, 0, 29_376_000},
			{31_535_999, 1, false, 0, 1}, {31_536_000, 1, true, 4, 0}},
	))
	runSteps(t, replay(t, counterCfg(5, year, 365)), "k", cat(
		times(5, step{0, 1, true, 4, 0}),
		[]step{{0, 1, false, 0, 31_553_280}, {2_160_000, 1, false, 0, 29_393_280},
			{31_535_999, 1, false, 0, 17_281}, {31_536_000, 1, false, 0, 17_280}, {31_553_280, 1, true, 0, 0}},
	))
	big := 1_000_000_000
	runSteps(t, replay(t, fixedCfg(big, year)), "big", []step{{0, big, true, 0, 0}, {0, 1, false, 0, 31_536_000}})
	// S2: the straddling bucket holds 10^9 units; one fits once its weight
	// is below 1 - 10^-9, 86.4us into the bucket: ceil gives 31,536,001 s.
	runSteps(t, replay(t, counterCfg(big, year, 365)), "big", []step{{0, big, true, 0, 0}, {0, 1, false, 0, 31_536_001}})
	// GCRA: one unit every W/10^9 = 31.536 ms.
	runSteps(t, replay(t, gcraCfg(big, year)), "big", []step{{0, big, true, 0, 0}, {0, 1, false, 0, 1}})
	if r := replayPeek(t, gcraCfg(big, year), big); r.RetryAfter != 31536*time.Microsecond {
		t.Errorf("GCRA RetryAfter %v, want 31.536ms", r.RetryAfter)
	}
}

// replayPeek spends limit units of a fresh key at T0 and returns the
// decision on one more.
func replayPeek(t *testing.T, cfg shardlimit.Config, limit int) shardlimit.Result {
	e := replay(t, cfg)
	e.AllowN("p", T0, limit)
	return e.Peek("p", T0, 1)
}

// TestExactMatchesCore replays random schedules against Exact (at the
// instants given) and against the in-process limiter of the same Config,
// one rate or several (see matchCore): every decision, Limit, Window and
// Remaining agree exactly, and every duration is the core's rounded up to
// the microsecond (Redis TIME's resolution).
func TestExactMatchesCore(t *testing.T) {
	s := time.Second
	cfgs := map[string]shardlimit.Config{
		"fixed":      fixedCfg(5, 10*time.Second),
		"counter10":  counterCfg(5, 10*time.Second, 10),
		"counter4":   counterCfg(10, time.Second, 4),
		"gcra":       gcraCfg(7, 3*time.Second),
		"gcraSmallW": gcraCfg(1000, 3*time.Millisecond),
		"fixed2":     ratesCfg(shardlimit.FixedWindow, 0, rate(3, s), rate(10, 10*s)),
		"fixed4":     ratesCfg(shardlimit.FixedWindow, 0, rate(20, 2*time.Minute), rate(3, s), rate(12, 30*s), rate(7, 5*s)),
		"counter2":   ratesCfg(shardlimit.SlidingCounter, 4, rate(4, s), rate(10, 8*s)),
		"counter3":   ratesCfg(shardlimit.SlidingCounter, 10, rate(30, time.Minute), rate(5, s), rate(12, 10*s)),
		"gcra2":      ratesCfg(shardlimit.GCRA, 0, rate(3, s), rate(10, 20*s)),
		"gcra3":      ratesCfg(shardlimit.GCRA, 0, rate(1000, 3*ms), rate(7, 3*s), rate(50, 10*time.Minute)),
	}
	for name, cfg := range cfgs {
		t.Run(name, func(t *testing.T) {
			matchCore(t, cfg, 1500, uint64(len(name)))
		})
	}
}

// ceilMicro rounds d up to a whole microsecond (Never stays Never).
func ceilMicro(d time.Duration) time.Duration {
	if d == shardlimit.Never {
		return d
	}
	return (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

// TestExactServerClockAndTTL: with Redis TIME as the clock, state keys are
// written with a TTL no longer than the state can matter, a denial writes
// nothing, and Peek never creates a key.
func TestExactServerClockAndTTL(t *testing.T) {
	c := sharedClient(t)
	ctx := ctxT(t, 10*time.Second)
	for name, cc := range map[string]struct {
		cfg    shardlimit.Config
		maxTTL time.Duration
	}{
		"fixed":     {fixedCfg(3, 2*time.Second), 2 * time.Second},
		"counterS2": {counterCfg(3, 2*time.Second, 4), 2500 * time.Millisecond},
		"gcra":      {gcraCfg(3, 2*time.Second), 2 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			e := newExact(t, c, ExactConfig{Config: cc.cfg})
			if cc.cfg.Algorithm == shardlimit.FixedWindow {
				awaitWindowStart(t, c, cc.cfg.Window)
			}
			if r := e.Peek("k", time.Now(), 1); !r.Allowed || r.Remaining != 2 {
				t.Fatalf("peek: %+v", r)
			}
			if c.Exists(ctx, e.StateKeys("k")[0]).Val() != 0 {
				t.Fatal("Peek created the state key")
			}
			for i := range 3 {
				r := e.AllowN("k", time.Now(), 1)
				if !r.Allowed || r.Remaining != 2-i || r.ResetAfter <= 0 || r.ResetAfter > cc.maxTTL {
					t.Fatalf("call %d: %+v", i, r)
				}
				// The TTL is the time the state still matters, rounded up
				// to a millisecond, plus one second of slack.
				ttl := c.PTTL(ctx, e.StateKeys("k")[0]).Val()
				if ttl <= time.Second || ttl > cc.maxTTL+time.Second+time.Millisecond {
					t.Fatalf("call %d: PTTL %v, want in (1s, %v]", i, ttl, cc.maxTTL+time.Second+time.Millisecond)
				}
			}
			r := e.AllowN("k", time.Now(), 1)
			if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > cc.maxTTL {
				t.Fatalf("4th call: %+v", r)
			}
			if st := e.ExactStats(); st.Calls != 5 || st.Errors != 0 || st.PolicyDecisions != 0 || st.State != Healthy {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// awaitWindowStart sleeps, if needed, until Redis's clock is in the first
// half of a window of length w, so a short test does not straddle two
// windows unless the machine stalls it for half a window.
func awaitWindowStart(t *testing.T, c *redis.Client, w time.Duration) {
	t.Helper()
	rt, err := c.Time(ctxT(t, time.Second)).Result()
	if err != nil {
		t.Fatal(err)
	}
	left := w - time.Duration(rt.UnixNano()%int64(w))
	if left < w/2 {
		time.Sleep(left + 10*time.Millisecond)
	}
}

func TestExactInvalid(t *testing.T) {
	c := sharedClient(t)
	bad := []ExactConfig{
		{Config: shardlimit.Config{Algorithm: shardlimit.SlidingLog, Limit: 1, Window: time.Second}},
		{Config: shardlimit.Config{Algorithm: 0, Limit: 1, Window: time.Second}},
		{Config: fixedCfg(1, 1500*time.Nanosecond)},
		{Config: counterCfg(1, 3*time.Microsecond, 2)},
		{Config: fixedCfg(-1, time.Second)},
		{Config: fixedCfg(1, 0)},
		{Config: fixedCfg(1, time.Second), Prefix: "a{b"},
		{Config: fixedCfg(1, time.Second), Timeout: time.Microsecond},
		{Config: fixedCfg(1, time.Second), Policy: 7},
		{Config: fixedCfg(1, time.Second), ProbeInterval: time.Second, MaxProbeInterval: time.Millisecond},
		{Config: fixedCfg(1, time.Second), DegradeAfter: -time.Second},
		{Config: fixedCfg(1, time.Second), DegradeAfter: 2 * time.Minute},
	}
	for i, cfg := range bad {
		if e, err := NewExact(c, cfg); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			if e != nil {
				e.Close()
			}
			t.Errorf("config %d: err %v, want ErrInvalidConfig", i, err)
		}
	}
	if _, err := NewExact(nil, ExactConfig{Config: fixedCfg(1, time.Second)}); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("nil client: %v", err)
	}
	e := newExact(t, c, ExactConfig{Config: fixedCfg(1, time.Second)})
	for _, key := range []string{"", strings.Repeat("k", shardlimit.DefaultMaxKeyBytes+1)} {
		if r := e.AllowN(key, time.Now(), 1); !errors.Is(r.Err, shardlimit.ErrInvalidKey) || r.Allowed {
			t.Errorf("key of %d bytes: %+v", len(key), r)
		}
		if err := e.SetLimit(key, 1); !errors.Is(err, shardlimit.ErrInvalidKey) {
			t.Errorf("SetLimit key of %d bytes: %v", len(key), err)
		}
	}
	if err := e.SetDefaultLimit(shardlimit.MaxLimit + 1); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("SetDefaultLimit too large: %v", err)
	}
	cfg := e.Config()
	if cfg.Algorithm != shardlimit.FixedWindow || cfg.Limit != 1 || cfg.MaxKeyBytes != shardlimit.DefaultMaxKeyBytes || cfg.Clock == nil {
		t.Errorf("Config() = %+v", cfg)
	}
}

// TestExactResetAndDefaultLimit: Reset clears the shared state for every
// process; SetDefaultLimit applies at once.
func TestExactResetAndDefaultLimit(t *testing.T) {
	c := sharedClient(t)
	prefix := redistest.Prefix(t)
	a := newExact(t, c, ExactConfig{Config: gcraCfg(2, time.Minute), Prefix: prefix})
	b := newExact(t, c, ExactConfig{Config: gcraCfg(2, time.Minute), Prefix: prefix})
	a.Allow("k")
	b.Allow("k")
	if a.Allow("k") || b.Allow("k") {
		t.Fatal("two processes admitted more than the shared limit")
	}
	if err := a.Reset("k"); err != nil {
		t.Fatal(err)
	}
	if !b.Allow("k") {
		t.Fatal("Reset by one process did not clear the shared state")
	}
	if err := b.SetDefaultLimit(3); err != nil {
		t.Fatal(err)
	}
	if r := b.AllowN("k", time.Now(), 1); !r.Allowed || r.Limit != 3 {
		t.Fatalf("after SetDefaultLimit(3): %+v", r)
	}
	if st := b.Stats(); st.Allowed != 3 || st.Denied != 1 || st.Keys != 1 {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestExactFallbackRecordsUsage: units Redis admitted are recorded in the
// local fallback, so losing Redis does not hand out a fresh budget.
func TestExactFallbackRecordsUsage(t *testing.T) {
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	e := newExact(t, newClient(t, p.Addr), ExactConfig{Config: fixedCfg(5, time.Minute), ProbeInterval: time.Hour, DegradeAfter: time.Nanosecond})
	now := time.Now()
	for range 3 {
		if !e.AllowN("k", now, 1).Allowed {
			t.Fatal("denied while healthy")
		}
	}
	p.SetMode(redistest.Drop)
	got := 0
	for range 5 {
		if e.AllowN("k", now, 1).Allowed {
			got++
		}
	}
	if got != 2 || e.State() != Degraded {
		t.Fatalf("fallback admitted %d (state %v), want 2 (5 - 3 already used)", got, e.State())
	}
}

// TestRedisDownExact: with nothing listening or a black hole,
// NewExact returns at once, every call returns within the timeout (not
// the client's own), three failures in a row degrade the limiter
// (DegradeAfter 1ns), later calls never touch Redis (none is sent, all are
// decided by the policy), and the local fallback still enforces the limit.
func TestRedisDownExact(t *testing.T) {
	const timeout = 500 * time.Millisecond
	hole := redistest.StartProxy(t, "127.0.0.1:1")
	hole.SetMode(redistest.Blackhole)
	for name, addr := range map[string]string{"refused": "127.0.0.1:1", "blackhole": hole.Addr} {
		t.Run(name, func(t *testing.T) {
			var changes []StateChange
			var mu stdsync.Mutex
			start := time.Now()
			e := newExact(t, newClient(t, addr), ExactConfig{
				Config:        fixedCfg(5, time.Minute),
				Timeout:       timeout,
				DegradeAfter:  time.Nanosecond,
				ProbeInterval: 20 * time.Millisecond,
				OnStateChange: func(c StateChange) { mu.Lock(); changes = append(changes, c); mu.Unlock() },
			})
			if d := time.Since(start); d > time.Second {
				t.Fatalf("NewExact took %v", d)
			}
			lat := make([]time.Duration, 0, 10_000)
			for i := range 10_000 {
				s := time.Now()
				r := e.AllowN(fmt.Sprintf("key%d", i%100), s, 1)
				lat = append(lat, time.Since(s))
				if r.Err != nil {
					t.Fatalf("call %d: %v", i, r.Err)
				}
			}
			// The calls that failed before the limiter degraded.
			sent := int(e.ExactStats().Calls)
			if sent != degradeCount {
				t.Fatalf("%d calls sent to Redis, want %d", sent, degradeCount)
			}
			for i, d := range lat[:sent] {
				if d >= 10*time.Second { // newClient's ReadTimeout: the Timeout was not applied
					t.Errorf("call %d took %v, timeout %v", i, d, timeout)
				}
			}
			// No decision after the limiter degraded waited for Redis: none
			// was sent (ExactStats.Calls above), and a degraded decision
			// takes no lock the probe holds. How long they took is the
			// machine's speed, logged but not judged: on a loaded machine
			// under -race the 99th percentile passed 1 ms.
			rest := lat[sent:]
			slices.Sort(rest)
			p99, mx := rest[len(rest)*99/100], rest[len(rest)-1]
			t.Logf("after the first %d calls (%v): p99 %v, max %v", sent, lat[:sent], p99, mx)
			now := time.Now()
			got := 0
			for range 6 {
				if r := e.AllowN("k", now, 1); r.Allowed {
					got++
				}
			}
			if got != 5 {
				t.Errorf("fallback admitted %d of 6, want 5", got)
			}
			st := e.ExactStats()
			if st.State != Degraded || st.Trips != 1 || st.Calls != degradeCount || st.PolicyDecisions != 10_006 {
				t.Errorf("stats %+v", st)
			}
			// The change is reported by the background goroutine before it
			// starts probing; wait for it, and for probes that failed.
			eventually(t, 30*time.Second, func() string {
				mu.Lock()
				defer mu.Unlock()
				if st := e.ExactStats(); len(changes) == 0 || st.ProbeFailures < 2 {
					return fmt.Sprintf("changes %+v, stats %+v", changes, st)
				}
				return ""
			})
			mu.Lock()
			defer mu.Unlock()
			if len(changes) != 1 || changes[0].From != Healthy || changes[0].To != Degraded || changes[0].Err == nil {
				t.Errorf("state changes %+v", changes)
			}
		})
	}
}

// TestExactRecovery: a black-holed Redis degrades the limiter; once it
// answers again the probe restores it, the callback sees both changes, and
// decisions come from Redis again.
//
// Each verdict rests on what the limiter counted, not on how long a call
// took: a call into the black hole must be sent and counted as a timeout
// (so it waited for its deadline), and must end well before the client's
// own 10 s ReadTimeout (so the deadline was the Timeout). A healthy call
// that a loaded machine made slower than the Timeout is a timeout too, and
// once started a run of failures: the test makes decisions until one is
// decided by Redis before it black-holes the proxy, and measures every
// count from there.
func TestExactRecovery(t *testing.T) {
	// A Timeout with room for a loaded machine, far below the client's
	// 10 s ReadTimeout, the wait if the Timeout were not applied.
	const timeout = 500 * time.Millisecond
	const clientTimeout = 10 * time.Second // newClient's ReadTimeout
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	client := newClient(t, p.Addr)
	if err := client.Ping(ctxT(t, 10*time.Second)).Err(); err != nil { // a pooled connection
		t.Fatal(err)
	}
	changes := make(chan StateChange, 64)
	e := newExact(t, client, ExactConfig{
		Config:           fixedCfg(1_000_000, time.Minute),
		Timeout:          timeout,
		DegradeAfter:     time.Nanosecond,
		ProbeInterval:    20 * time.Millisecond,
		MaxProbeInterval: 40 * time.Millisecond,
		OnStateChange:    func(c StateChange) { changes <- c },
	})
	// change returns the next state change, failing the test if none
	// comes within 30 s.
	change := func(what string) StateChange {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("no state change within 30s: %s; stats %+v", what, e.ExactStats())
			return StateChange{}
		}
	}
	// fromRedis makes decisions until one is decided by Redis: a call is
	// sent and does not fail. A limiter a slow moment degraded recovers
	// by its probe, through the proxy in Pass mode.
	fromRedis := func(what string) {
		t.Helper()
		eventually(t, 30*time.Second, func() string {
			before := e.ExactStats()
			r := e.AllowN("k", time.Now(), 1)
			after := e.ExactStats()
			if after.Calls == before.Calls+1 && after.Errors == before.Errors && r.Allowed {
				return ""
			}
			return fmt.Sprintf("%s: no decision by Redis: %+v, stats %+v", what, r, after)
		})
	}
	fromRedis("before the black hole")
	base := e.ExactStats()
	for range 2 * base.Trips { // changes of a slow start, if any
		change("a slow start's")
	}

	p.SetMode(redistest.Blackhole)
	for i := range degradeCount {
		before := e.ExactStats()
		start := time.Now()
		r := e.AllowN("k", time.Now(), 1)
		d := time.Since(start)
		after := e.ExactStats()
		if after.Calls != before.Calls+1 || after.Timeouts != before.Timeouts+1 {
			t.Fatalf("call %d to a black hole (%v, %+v) was not sent and timed out: stats before %+v, after %+v", i, d, r, before, after)
		}
		if d >= clientTimeout {
			t.Fatalf("call %d to a black hole took %v: the Timeout %v was not applied", i, d, timeout)
		}
	}
	if st := e.ExactStats(); st.State != Degraded || st.Trips != base.Trips+1 || st.Timeouts != base.Timeouts+degradeCount {
		t.Fatalf("after %d timeouts in a row: stats %+v, from %+v", degradeCount, st, base)
	}
	if c := change("to degraded"); c.From != Healthy || c.To != Degraded || !isTimeout(c.Err) || !errors.Is(c.Err, ErrUnavailable) {
		t.Fatalf("change %+v, want to degraded by a timeout", c)
	}
	eventually(t, 30*time.Second, func() string { // a probe failed in the black hole
		if e.ExactStats().ProbeFailures == base.ProbeFailures {
			return "no failed probe"
		}
		return ""
	})
	p.SetMode(redistest.Pass)
	if c := change("recovery"); c.From != Degraded || c.To != Healthy || c.Err != nil {
		t.Fatalf("change %+v, want a recovery", c)
	}
	if st := e.ExactStats(); st.Trips != base.Trips+1 || st.Recoveries != base.Recoveries+1 {
		t.Fatalf("after the recovery: stats %+v, from %+v", st, base)
	}
	fromRedis("after the recovery")
}

// TestExactLaxClient: a client that ignores context deadlines (go-redis's
// default) still cannot make a decision wait past the Timeout.
func TestExactLaxClient(t *testing.T) {
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	lax := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = lax.Close() })
	e := newExact(t, lax, ExactConfig{Config: fixedCfg(5, time.Minute), Timeout: DefaultTimeout, ProbeInterval: time.Hour})
	e.Allow("k")
	p.SetMode(redistest.Blackhole)
	start := time.Now()
	r := e.AllowN("k", time.Now(), 1)
	if d := time.Since(start); d > DefaultTimeout+time.Second || !r.Allowed { // the lax client alone waits 3 s
		t.Fatalf("call took %v: %+v", d, r)
	}
	p.SetMode(redistest.Drop) // end the abandoned call before cleanup
}

// TestExactPolicies: fail open admits what the limit could ever admit,
// fail closed denies with the probe's delay; neither touches the fallback.
func TestExactPolicies(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	open := newExact(t, c, ExactConfig{Config: fixedCfg(3, time.Minute), Policy: FailOpen, Timeout: DefaultTimeout, ProbeInterval: time.Hour})
	for i := range 5 {
		if r := open.AllowN("k", time.Now(), 1); !r.Allowed || r.Remaining != 2 || r.Limit != 3 {
			t.Fatalf("fail open call %d: %+v", i, r)
		}
	}
	if r := open.AllowN("k", time.Now(), 4); r.Allowed || r.RetryAfter != shardlimit.Never {
		t.Fatalf("fail open, n > limit: %+v", r)
	}
	closed := newExact(t, c, ExactConfig{Config: fixedCfg(3, time.Minute), Policy: FailClosed, Timeout: DefaultTimeout, ProbeInterval: 2 * time.Second})
	for i := range 3 {
		if r := closed.AllowN("k", time.Now(), 1); r.Allowed || r.RetryAfter != 2*time.Second || r.Err != nil {
			t.Fatalf("fail closed call %d: %+v", i, r)
		}
	}
	if r := closed.AllowN("k", time.Now(), 0); !r.Allowed {
		t.Fatalf("fail closed peek: %+v", r)
	}
	if open.Len() != 0 || closed.Len() != 0 || open.Sweep(time.Now()) != 0 {
		t.Fatal("a policy without fallback holds keys")
	}
}

// TestExactGarbageReplies: any malformed reply is decided by the policy,
// counted as an error, and does not degrade the limiter (Redis answered).
func TestExactGarbageReplies(t *testing.T) {
	replies := []string{
		"+OK\r\n", ":1\r\n", "$-1\r\n", "*-1\r\n", "*3\r\n:1\r\n:1\r\n:1\r\n",
		"*4\r\n:1\r\n:1\r\n:1\r\n$1\r\n0\r\n", "*4\r\n:2\r\n:0\r\n:0\r\n:0\r\n",
		"*4\r\n:1\r\n:99\r\n:0\r\n:0\r\n", "*4\r\n:0\r\n:0\r\n:-5\r\n:0\r\n",
		"*4\r\n:1\r\n:0\r\n:0\r\n:7\r\n", "*4\r\n:0\r\n:0\r\n:0\r\n:-2\r\n",
		"*4\r\n*1\r\n:1\r\n:0\r\n:0\r\n:0\r\n", "-ERR boom\r\n", "-NOSCRIPT x\r\n",
	}
	var next atomic.Int64
	f := redistest.StartFake(t, func(args []string) []byte {
		switch strings.ToUpper(args[0]) {
		case "EVALSHA", "EVAL":
			return []byte(replies[int(next.Add(1)-1)%len(replies)])
		}
		return nil
	})
	e := newExact(t, newClient(t, f.Addr), ExactConfig{Config: fixedCfg(2, time.Minute)})
	now := time.Now()
	for i := range 2 * len(replies) {
		r := e.AllowN("k", now, 1)
		if r.Err != nil || r.Allowed != (i < 2) {
			t.Fatalf("call %d: %+v, want the fallback's decision", i, r)
		}
	}
	st := e.ExactStats()
	if st.State != Healthy || st.Trips != 0 || st.Errors != st.Calls || st.PolicyDecisions != uint64(2*len(replies)) {
		t.Fatalf("stats %+v", st)
	}
}

// TestExactCorruptState: a state key holding foreign data is an error reply
// (decided by the policy); the key is left alone.
func TestExactCorruptState(t *testing.T) {
	c := sharedClient(t)
	ctx := ctxT(t, 5*time.Second)
	for _, cfg := range []shardlimit.Config{fixedCfg(2, time.Minute), counterCfg(2, time.Minute, 6), gcraCfg(2, time.Minute)} {
		e := newExact(t, c, ExactConfig{Config: cfg})
		c.Set(ctx, e.StateKeys("str")[0], "x", time.Minute)
		c.HSet(ctx, e.StateKeys("bad")[0], "w", "abc", "c", "1", "t", "1e3", "r", "0", "l", "2", "5", "-1")
		c.Expire(ctx, e.StateKeys("bad")[0], time.Minute)
		for _, key := range []string{"str", "bad"} {
			if r := e.AllowN(key, time.Now(), 1); r.Err != nil || !r.Allowed {
				t.Errorf("%v %s: %+v", cfg.Algorithm, key, r)
			}
		}
		if st := e.ExactStats(); st.Errors != 2 || st.State != Healthy {
			t.Errorf("%v: stats %+v", cfg.Algorithm, st)
		}
		if v := c.Get(ctx, e.StateKeys("str")[0]).Val(); v != "x" {
			t.Errorf("foreign key changed to %q", v)
		}
	}
}

// TestExactNoScript: after SCRIPT FLUSH, the next decision reloads the
// script (EVALSHA, NOSCRIPT, EVAL) without an error.
func TestExactNoScript(t *testing.T) {
	s := redistest.StartServer(t)
	e := newExact(t, newClient(t, s.Addr), ExactConfig{Config: gcraCfg(3, time.Minute)})
	for i := range 3 {
		if i == 1 {
			if _, err := redistest.Do(s.Addr, "SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		if r := e.AllowN("k", time.Now(), 1); !r.Allowed || r.Remaining != 2-i {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestExactCloseIdempotent: Close is idempotent, stops the probe (goleak
// in TestMain checks no goroutine is left), later calls answer ErrClosed
// without panicking, and nothing reaches Redis after Close returns.
func TestExactCloseIdempotent(t *testing.T) {
	s := redistest.StartServer(t)
	c := newClient(t, s.Addr)
	e, err := NewExact(c, ExactConfig{Config: counterCfg(5, time.Second, 10), Prefix: "close:"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.Allow("k")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	m := redistest.StartMonitor(t, s.Addr)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if r := e.AllowN("k", time.Now(), 1); !errors.Is(r.Err, shardlimit.ErrClosed) || r.Allowed {
		t.Fatalf("after Close: %+v", r)
	}
	if e.Allow("k") || e.Peek("k", time.Now(), 1).Err == nil {
		t.Fatal("after Close: allowed or no error")
	}
	if err := e.Reset("k"); !errors.Is(err, shardlimit.ErrClosed) {
		t.Fatalf("Reset after Close: %v", err)
	}
	if err := e.SetLimit("k", 1); !errors.Is(err, shardlimit.ErrClosed) {
		t.Fatalf("SetLimit after Close: %v", err)
	}
	for _, cmd := range m.Sync(t) {
		for _, a := range cmd {
			if strings.Contains(a, "close:") || strings.EqualFold(a, "evalsha") {
				t.Fatalf("command after Close: %q", cmd)
			}
		}
	}
}

// TestExactDenialWritesNothing: a denied request and a peek write nothing
// (MONITOR shows the commands scripts run), and the state an admission
// wrote has a TTL.
func TestExactDenialWritesNothing(t *testing.T) {
	s := redistest.StartServer(t)
	c := newClient(t, s.Addr)
	ctx := ctxT(t, 5*time.Second)
	for _, cfg := range []shardlimit.Config{fixedCfg(1, time.Minute), counterCfg(1, time.Minute, 6), gcraCfg(1, time.Minute)} {
		e := newExact(t, c, ExactConfig{Config: cfg})
		e.callerTime = true
		now := at(time.Second)
		e.AllowN("k", now, 1)
		m := redistest.StartMonitor(t, s.Addr)
		for range 3 {
			if e.AllowN("k", now, 1).Allowed {
				t.Fatalf("%v: over limit", cfg.Algorithm)
			}
		}
		e.Peek("k", now, 1)
		e.Peek("fresh", now, 1)
		cmds := m.Sync(t)
		m.Stop()
		if len(cmds) < 4 {
			t.Fatalf("%v: MONITOR saw only %q", cfg.Algorithm, cmds)
		}
		for _, cmd := range cmds {
			switch strings.ToUpper(cmd[0]) {
			case "HSET", "HINCRBY", "SET", "PEXPIRE", "HDEL", "DEL":
				t.Fatalf("%v: a denial or peek wrote: %q", cfg.Algorithm, cmd)
			}
		}
		if ttl := c.PTTL(ctx, e.StateKeys("k")[0]).Val(); ttl <= 0 {
			t.Fatalf("%v: state key PTTL %v", cfg.Algorithm, ttl)
		}
		if c.Exists(ctx, e.StateKeys("fresh")[0]).Val() != 0 {
			t.Fatalf("%v: Peek created a key", cfg.Algorithm)
		}
	}
}
