package sync

import (
	"context"
	"errors"
	"math"
	"slices"
	stdsync "sync"
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
