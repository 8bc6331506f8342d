package sync

import (
	"fmt"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
)

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
