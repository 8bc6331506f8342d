package sync

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// How Exact decides a key's rates (Config.Rates): one script call decides
// every rate, all or nothing, reports the binding rate and waits for the
// first instant every rate admits; limits per rate; each rate's state
// named by its window. The tests of one rate and several alike
// (TestExactMatchesCore, TestConcurrentExact) are in exact_test.go.

func rate(limit int, w time.Duration) shardlimit.Rate {
	return shardlimit.Rate{Limit: limit, Window: w}
}

// ratesCfg returns a Config of alg with rates (buckets: SlidingCounter's,
// 0 for the default).
func ratesCfg(alg shardlimit.Algorithm, buckets int, rates ...shardlimit.Rate) shardlimit.Config {
	return shardlimit.Config{Algorithm: alg, Buckets: buckets, Rates: rates}
}

// rstep is one call of a several-rates case: at T0+at, cost n; the
// expected decision, the binding rate's Limit, Window and Remaining, and,
// when denied, the exact RetryAfter (shardlimit.Never included).
type rstep struct {
	at      time.Duration
	n       int
	allowed bool
	limit   int
	window  time.Duration
	rem     int
	retry   time.Duration
}

const ms = time.Millisecond

// runRateSteps applies steps in order to key of a limiter of cfg deciding
// at the instants given, and checks besides each step's numbers:
//
//   - the in-process limiter of the same Config decides every step alike
//     (its durations rounded up to Redis TIME's microsecond), ResetAfter
//     included;
//   - all or nothing, in Redis: a denial leaves every rate's state key as it
//     was, field for field, and an admission changes every one of them and
//     leaves it with a TTL;
//   - RetryAfter is the first instant at which every rate admits: the same
//     request is admitted at now+RetryAfter and denied a microsecond
//     before (peeks, which write nothing).
func runRateSteps(t *testing.T, cfg shardlimit.Config, steps []rstep) {
	t.Helper()
	e := replay(t, cfg)
	core := coreTwin(t, cfg)
	c := sharedClient(t)
	ctx := ctxT(t, 10*time.Second)
	const key = "k"
	keys := e.StateKeys(key)
	if len(keys) != len(cfg.Rates) {
		t.Fatalf("%d state keys for %d rates", len(keys), len(cfg.Rates))
	}
	snapshot := func() []map[string]string {
		out := make([]map[string]string, len(keys))
		for i, k := range keys {
			out[i] = c.HGetAll(ctx, k).Val()
		}
		return out
	}
	for i, s := range steps {
		now := at(s.at)
		before := snapshot()
		got := e.AllowN(key, now, s.n)
		after := snapshot()
		want := core.AllowN(key, now, s.n)
		want.RetryAfter, want.ResetAfter = ceilMicro(want.RetryAfter), ceilMicro(want.ResetAfter)
		if got != want {
			t.Fatalf("step %d (t=%v n=%d): exact %+v, core %+v", i, s.at, s.n, got, want)
		}
		table := shardlimit.Result{Allowed: s.allowed, Limit: s.limit, Window: s.window, Remaining: s.rem, ResetAfter: got.ResetAfter}
		if !s.allowed {
			table.RetryAfter = s.retry
		}
		if got != table {
			t.Fatalf("step %d (t=%v n=%d): got %+v, want %+v", i, s.at, s.n, got, table)
		}
		for k := range keys {
			same := maps.Equal(before[k], after[k])
			switch {
			case got.Allowed && s.n > 0 && same:
				t.Fatalf("step %d: an admission left rate %d's state %v unchanged", i, k, after[k])
			case (!got.Allowed || s.n == 0) && !same:
				t.Fatalf("step %d: a denial or peek changed rate %d's state from %v to %v", i, k, before[k], after[k])
			case got.Allowed && s.n > 0 && c.PTTL(ctx, keys[k]).Val() <= 0:
				t.Fatalf("step %d: rate %d's state has no TTL", i, k)
			}
		}
		if !got.Allowed && got.RetryAfter != shardlimit.Never {
			if p := e.Peek(key, now.Add(got.RetryAfter), s.n); !p.Allowed {
				t.Fatalf("step %d: denied at now+RetryAfter (%v): %+v", i, got.RetryAfter, p)
			}
			if p := e.Peek(key, now.Add(got.RetryAfter-time.Microsecond), s.n); p.Allowed {
				t.Fatalf("step %d: admitted 1us before now+RetryAfter (%v): %+v", i, got.RetryAfter, p)
			}
		}
	}
	if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestExactFixedWindowDecidesEveryRate(t *testing.T) {
	s, m := time.Second, time.Minute
	t.Run("two", func(t *testing.T) {
		// 3 per second and 5 per 10 seconds.
		runRateSteps(t, ratesCfg(shardlimit.FixedWindow, 0, rate(3, s), rate(5, 10*s)), []rstep{
			{0, 1, true, 3, s, 2, 0},
			{0, 1, true, 3, s, 1, 0},
			{0, 1, true, 3, s, 0, 0},
			{500 * ms, 1, false, 3, s, 0, 500 * ms},        // the second is spent
			{s, 1, true, 5, 10 * s, 1, 0},                  // 2 left this second, 1 in ten
			{s, 1, true, 5, 10 * s, 0, 0},                  // 1 left this second, 0 in ten
			{1500 * ms, 1, false, 5, 10 * s, 0, 8500 * ms}, // the second admits, ten do not
			{2 * s, 2, false, 5, 10 * s, 0, 8 * s},         // a fresh second admits, ten do not
			{10 * s, 3, true, 3, s, 0, 0},                  // 2 left in ten
			{10200 * ms, 1, false, 3, s, 0, 800 * ms},      // ten admit, the second does not
			{10200 * ms, 3, false, 3, s, 0, 9800 * ms},     // both deny: the later wait is ten's
			{20 * s, 3, true, 3, s, 0, 0},
			{20 * s, 4, false, 3, s, 0, shardlimit.Never}, // more than a second's limit
			{20 * s, 0, true, 3, s, 0, 0},
		})
	})
	t.Run("three", func(t *testing.T) {
		// 4 per minute, 2 per second and 3 per 10 seconds, in that order.
		runRateSteps(t, ratesCfg(shardlimit.FixedWindow, 0, rate(4, m), rate(2, s), rate(3, 10*s)), []rstep{
			{0, 2, true, 2, s, 0, 0},
			{s, 1, true, 3, 10 * s, 0, 0},
			{2 * s, 1, false, 3, 10 * s, 0, 8 * s},
			{10 * s, 1, true, 4, m, 0, 0},
			{10 * s, 1, false, 4, m, 0, 50 * s},
			{m, 2, true, 2, s, 0, 0},
			{m + 500*ms, 3, false, 2, s, 0, shardlimit.Never},
		})
	})
}

func TestExactSlidingCounterDecidesEveryRate(t *testing.T) {
	s := time.Second
	// 4 per 10 seconds and 2 per second, one bucket each: the previous
	// window weighs by its remaining overlap.
	runRateSteps(t, ratesCfg(shardlimit.SlidingCounter, 1, rate(4, 10*s), rate(2, s)), []rstep{
		{0, 1, true, 2, s, 1, 0},
		{0, 1, true, 2, s, 0, 0},
		{500 * ms, 1, false, 2, s, 0, s},            // 2 in the second; half of them still weigh at 1.5 s
		{1500 * ms, 1, true, 2, s, 0, 0},            // second: 1 weighted + 1; ten: 3
		{2 * s, 1, true, 4, 10 * s, 0, 0},           // both at their limit: the longer window binds
		{2500 * ms, 1, false, 4, 10 * s, 0, 10 * s}, // the second waits 0.5 s, ten wait 10 s
		{12500 * ms, 1, true, 4, 10 * s, 0, 0},      // ten: 4 weighted by 3/4 = 3, + 1
		{12500 * ms, 3, false, 4, 10 * s, 0, shardlimit.Never},
	})
}

func TestExactGCRADecidesEveryRate(t *testing.T) {
	s := time.Second
	// 2 per second (one every 500 ms) and 3 per 10 seconds (one every
	// 3.333... s).
	runRateSteps(t, ratesCfg(shardlimit.GCRA, 0, rate(2, s), rate(3, 10*s)), []rstep{
		{0, 1, true, 2, s, 1, 0},
		{0, 1, true, 2, s, 0, 0},
		{250 * ms, 1, false, 2, s, 0, 250 * ms},
		{500 * ms, 1, true, 3, 10 * s, 0, 0},
		{s, 1, false, 3, 10 * s, 0, 2_333_334 * time.Microsecond}, // the second admits; ten's TAT + 3.333 s - 10 s, rounded up
		{3_333_334 * time.Microsecond, 1, true, 3, 10 * s, 0, 0},
		{4 * s, 3, false, 3, 10 * s, 0, shardlimit.Never},
	})
}

// matchCore replays a random schedule of steps calls on three keys against
// Exact (at the instants given) and the in-process limiter of cfg: every
// decision, Limit, Window and Remaining agree exactly, and every duration
// is the core's rounded up to the microsecond. Key k2 has limits of its
// own, half the defaults.
func matchCore(t *testing.T, cfg shardlimit.Config, steps int, seed uint64) {
	t.Helper()
	e := replayNoExpiry(t, cfg)
	core := coreTwin(t, cfg)
	rates := ratesOf(cfg)
	short, long := rates[0].Window, rates[0].Window
	lo, hi := rates[0].Limit, rates[0].Limit
	own := make([]int, len(rates))
	for i, r := range rates {
		short, long = min(short, r.Window), max(long, r.Window)
		lo, hi = min(lo, r.Limit), max(hi, r.Limit)
		own[i] = max(1, r.Limit/2)
	}
	if err := e.SetLimits("k2", own...); err != nil {
		t.Fatal(err)
	}
	if err := core.SetLimits("k2", own...); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, seed))
	w := int64(short / time.Microsecond)
	now := T0.Add(time.Duration(rng.Int64N(w)) * time.Microsecond)
	var retryAt [3]time.Time
	for i := range steps {
		k := rng.IntN(3)
		switch p := rng.IntN(10); {
		case p < 4:
			now = now.Add(time.Duration(rng.Int64N(w/5+1)) * time.Microsecond)
		case p < 5:
			now = now.Add(time.Duration(rng.Int64N(3*w)) * time.Microsecond)
		case p < 6 && len(rates) > 1:
			now = now.Add(time.Duration(rng.Int64N(int64(long/time.Microsecond))) * time.Microsecond)
		case p < 8 && retryAt[k].After(now):
			now = retryAt[k] // exactly when the core said it would admit
		}
		n := []int{0, 1, 1, 1, 2, lo, lo + 1, hi, hi + 1}[rng.IntN(9)]
		key := fmt.Sprintf("k%d", k)
		var got, want shardlimit.Result
		if rng.IntN(5) == 0 {
			got, want = e.Peek(key, now, n), core.Peek(key, now, n)
		} else {
			got, want = e.AllowN(key, now, n), core.AllowN(key, now, n)
		}
		if !want.Allowed && want.RetryAfter != shardlimit.Never {
			retryAt[k] = now.Add(ceilMicro(want.RetryAfter))
		}
		want.RetryAfter = ceilMicro(want.RetryAfter)
		want.ResetAfter = ceilMicro(want.ResetAfter)
		if got != want {
			t.Fatalf("step %d: %s at T0+%v n=%d: exact %+v, core %+v", i, key, now.Sub(T0), n, got, want)
		}
	}
	if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestExactDecidesEveryRateInOneScriptCall: MONITOR on a private Redis shows exactly one
// EVALSHA per decision, admitted, denied or peeked, carrying every rate's
// state key, all in the key's hash slot; nothing else is sent (the other
// commands are those the scripts run).
func TestExactDecidesEveryRateInOneScriptCall(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr)
	s := time.Second
	for name, cfg := range map[string]shardlimit.Config{
		"fixed":   ratesCfg(shardlimit.FixedWindow, 0, rate(3, s), rate(5, time.Minute)),
		"counter": ratesCfg(shardlimit.SlidingCounter, 5, rate(3, s), rate(5, 10*s), rate(8, time.Minute), rate(20, time.Hour)),
		"gcra":    ratesCfg(shardlimit.GCRA, 0, rate(3, s), rate(5, time.Minute), rate(9, time.Hour)),
	} {
		t.Run(name, func(t *testing.T) {
			e := newExact(t, c, ExactConfig{Config: cfg, EvictionCheck: -1})
			e.callerTime = true
			e.AllowN("warm", T0, 1) // loads the script
			m := redistest.StartMonitor(t, srv.Addr)
			const decisions = 30
			for i := range decisions {
				key, now := fmt.Sprintf("user:%d", i%3), at(time.Duration(i)*100*ms)
				if i%5 == 4 {
					e.Peek(key, now, 1)
				} else {
					e.AllowN(key, now, 1+i%2)
				}
			}
			cmds := m.Sync(t)
			m.Stop()
			scripts, other := 0, map[string]int{}
			for _, cmd := range cmds {
				switch name := strings.ToUpper(cmd[0]); name {
				case "EVALSHA", "EVAL":
					if name == "EVAL" {
						t.Errorf("EVAL after the script was loaded: %q", cmd[:3])
					}
					scripts++
					nk, err := strconv.Atoi(cmd[2])
					if err != nil || nk != len(cfg.Rates) || 3+nk > len(cmd) {
						t.Fatalf("script call with %q keys for %d rates: %q", cmd[2], len(cfg.Rates), cmd)
					}
					keys := cmd[3 : 3+nk]
					user := keys[0][strings.IndexByte(keys[0], '{')+1 : strings.IndexByte(keys[0], '}')]
					want := e.StateKeys(user)
					for i, k := range keys {
						if k != want[i] || keySlot(k) != keySlot(keys[0]) {
							t.Fatalf("script call keys %q, want %q in one slot", keys, want)
						}
					}
				case "HMGET", "HGETALL", "HSET", "HINCRBY", "HDEL", "PEXPIRE", "TIME":
					other[name]++ // run by the scripts (TIME: a new state's birth)
				default:
					t.Errorf("unexpected command %q", cmd)
				}
			}
			// Decisions the deny cache answered (one unit of a key the
			// store denied, before the instant it named) send nothing.
			st := e.ExactStats()
			if scripts != decisions-int(st.DenyCacheHits) {
				t.Errorf("MONITOR saw %d script calls for %d decisions, %d by the deny cache (others: %v)", scripts, decisions, st.DenyCacheHits, other)
			}
			if st.Errors != 0 || st.Calls != uint64(scripts)+1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestExactLimitsPerRate: SetLimits and SetDefaultLimits take one limit per
// rate in the order of Config.Rates, the one-limit forms are refused, own
// limits decide until ClearLimit, and Config reports the defaults in
// force.
func TestExactLimitsPerRate(t *testing.T) {
	s := time.Second
	cfg := ratesCfg(shardlimit.FixedWindow, 0, rate(10, time.Minute), rate(3, s))
	e := replay(t, cfg)
	for _, bad := range [][]int{nil, {1}, {1, 2, 3}, {1, -1}, {shardlimit.MaxLimit + 1, 1}} {
		if err := e.SetLimits("k", bad...); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("SetLimits(%v) = %v", bad, err)
		}
		if err := e.SetDefaultLimits(bad...); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("SetDefaultLimits(%v) = %v", bad, err)
		}
	}
	if err := e.SetLimit("k", 1); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("SetLimit on two rates = %v", err)
	}
	if err := e.SetDefaultLimit(1); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("SetDefaultLimit on two rates = %v", err)
	}
	if err := e.SetLimits("", 1, 1); !errors.Is(err, shardlimit.ErrInvalidKey) {
		t.Errorf("SetLimits with an empty key = %v", err)
	}
	// Own limits: 2 per minute, 5 per second; the minute binds.
	if err := e.SetLimits("own", 2, 5); err != nil {
		t.Fatal(err)
	}
	if r := e.AllowN("own", T0, 2); !r.Allowed || r.Limit != 2 || r.Window != time.Minute || r.Remaining != 0 {
		t.Fatalf("own limits: %+v", r)
	}
	if r := e.AllowN("own", at(s), 1); r.Allowed || r.RetryAfter != 59*s {
		t.Fatalf("own limits, minute spent: %+v", r)
	}
	// 0 blocks: Never, whatever the other rate says.
	if err := e.SetLimits("banned", 10, 0); err != nil {
		t.Fatal(err)
	}
	if r := e.AllowN("banned", T0, 1); r.Allowed || r.RetryAfter != shardlimit.Never || r.Limit != 0 || r.Window != s {
		t.Fatalf("a limit of 0: %+v", r)
	}
	if err := e.ClearLimit("own"); err != nil {
		t.Fatal(err)
	}
	if r := e.AllowN("own", at(s), 1); !r.Allowed || r.Limit != 3 || r.Remaining != 2 || r.Window != s {
		t.Fatalf("after ClearLimit: %+v", r)
	}
	// Defaults: 4 per minute, 1 per second.
	if err := e.SetDefaultLimits(4, 1); err != nil {
		t.Fatal(err)
	}
	if r := e.AllowN("d", T0, 1); !r.Allowed || r.Limit != 1 || r.Window != s || r.Remaining != 0 {
		t.Fatalf("new defaults: %+v", r)
	}
	got := e.Config()
	if got.Limit != 0 || got.Window != 0 || len(got.Rates) != 2 || got.Rates[0] != rate(4, time.Minute) || got.Rates[1] != rate(1, s) {
		t.Fatalf("Config() = %+v", got)
	}
	got.Rates[0].Limit = 99 // a copy
	if r := e.Config().Rates[0]; r.Limit != 4 {
		t.Fatalf("Config().Rates aliases the limiter's: %+v", r)
	}
	if fb := e.fallback.Config(); len(fb.Rates) != 2 || fb.Rates[0] != rate(4, time.Minute) || fb.Rates[1] != rate(1, s) {
		t.Fatalf("the fallback's Config() = %+v", fb)
	}
	if st := e.ExactStats(); st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestExactWindowChangeStartsFresh: each rate's state is named by its
// window (and bucket), so a limiter whose window or bucket count changed
// never reads the old one's state as its own: it starts fresh, without an
// error, instead of misreading a 1-second window's id as a far later
// hour's (which once blocked such a key for centuries).
func TestExactWindowChangeStartsFresh(t *testing.T) {
	c := sharedClient(t)
	s := time.Second
	for name, pair := range map[string][2]shardlimit.Config{
		"fixed":   {fixedCfg(2, s), fixedCfg(2, time.Hour)},
		"buckets": {counterCfg(2, 10*s, 10), counterCfg(2, 10*s, 2)},
		"gcra":    {gcraCfg(2, time.Hour), gcraCfg(2, s)},
	} {
		t.Run(name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			old := newExact(t, c, ExactConfig{Config: pair[0], Prefix: prefix})
			old.callerTime = true
			if r := old.AllowN("k", T0, 2); !r.Allowed {
				t.Fatalf("old: %+v", r)
			}
			e := newExact(t, c, ExactConfig{Config: pair[1], Prefix: prefix})
			e.callerTime = true
			if r := e.AllowN("k", at(5*s), 2); !r.Allowed || r.Remaining != 0 {
				t.Fatalf("new: %+v, stats %+v", r, e.ExactStats())
			}
			if st := e.ExactStats(); st.Errors != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestExactConcurrentBurstsDecideEveryRateAtomically: 64 goroutines spend one key of two rates in
// bursts at fixed instants. Each script decides all rates atomically, so
// every burst admits exactly what one caller calling in sequence would
// (the in-process limiter says how many), and for the fixed window the
// counters in Redis hold exactly the units admitted in each window.
func TestExactConcurrentBurstsDecideEveryRateAtomically(t *testing.T) {
	s := time.Second
	for name, cfg := range map[string]shardlimit.Config{
		"fixed":   ratesCfg(shardlimit.FixedWindow, 0, rate(100, time.Minute), rate(30, s)),
		"counter": ratesCfg(shardlimit.SlidingCounter, 5, rate(100, time.Minute), rate(30, s)),
		"gcra":    ratesCfg(shardlimit.GCRA, 0, rate(100, time.Minute), rate(30, s)),
	} {
		t.Run(name, func(t *testing.T) {
			e := replayNoExpiry(t, cfg)
			core := coreTwin(t, cfg)
			const goroutines, calls = 64, 5
			total := 0
			for burst := range 4 {
				now := at(time.Duration(burst) * s)
				want := 0
				for range goroutines * calls {
					if core.AllowN("hot", now, 1).Allowed {
						want++
					}
				}
				var admitted atomic.Int64
				var wg stdsync.WaitGroup
				start := make(chan struct{})
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						for range calls {
							r := e.AllowN("hot", now, 1)
							if r.Err != nil {
								t.Error(r.Err)
							}
							if r.Allowed {
								admitted.Add(1)
							}
						}
					}()
				}
				close(start)
				wg.Wait()
				if got := int(admitted.Load()); got != want {
					t.Fatalf("burst %d: %d admitted, want %d", burst, got, want)
				}
				total += want
				if cfg.Algorithm != shardlimit.FixedWindow {
					continue
				}
				c, ctx := sharedClient(t), ctxT(t, 5*time.Second)
				keys := e.StateKeys("hot")
				if got, _ := c.HGet(ctx, keys[0], "c").Int(); got != total {
					t.Fatalf("burst %d: the minute's counter holds %d, want %d", burst, got, total)
				}
				if got, _ := c.HGet(ctx, keys[1], "c").Int(); got != want {
					t.Fatalf("burst %d: the second's counter holds %d, want %d", burst, got, want)
				}
			}
			// The fixed window: the minute's limit, reached in the fourth
			// second (the others' totals are the core's, checked above).
			if cfg.Algorithm == shardlimit.FixedWindow && total != 100 {
				t.Fatalf("%d admitted in the minute, want 100", total)
			}
			// Replies that cross (computed before a grant whose reply came
			// back first) are never taken for a loss.
			if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 || st.Losses != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestExactClockStepBackKeepsEveryRate: with several rates, the server clock (here:
// the instants passed) stepping back keeps every rate's units counted, as
// with one rate: nothing above either limit, no error, a positive wait
// at most the step longer than the longest window.
func TestExactClockStepBackKeepsEveryRate(t *testing.T) {
	s := time.Second
	for name, cfg := range map[string]shardlimit.Config{
		"fixed":   ratesCfg(shardlimit.FixedWindow, 0, rate(5, 10*s), rate(4, s)),
		"counter": ratesCfg(shardlimit.SlidingCounter, 10, rate(5, 10*s), rate(4, s)),
		"gcra":    ratesCfg(shardlimit.GCRA, 0, rate(5, 10*s), rate(4, s)),
	} {
		t.Run(name, func(t *testing.T) {
			e := replay(t, cfg)
			if r := e.AllowN("k", at(100*s), 3); !r.Allowed {
				t.Fatalf("before the step: %+v", r)
			}
			got := 0
			for range 5 {
				r := e.AllowN("k", at(95*s), 1)
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if r.Allowed {
					got++
				} else if r.RetryAfter <= 0 || r.RetryAfter > 15*s {
					t.Fatalf("after the step: %+v", r)
				}
			}
			if got > 1 {
				t.Fatalf("after stepping back 5s: %d admitted, want at most 1 (3 of 4 already used)", got)
			}
			if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// coreTwin returns the in-process limiter of cfg, without a janitor,
// closed when the test ends: what Exact must decide alike.
func coreTwin(t *testing.T, cfg shardlimit.Config) shardlimit.Limiter {
	t.Helper()
	cfg.JanitorInterval = -1
	core, err := shardlimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.Close() })
	return core
}
