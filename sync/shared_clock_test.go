package sync

import (
	"fmt"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestRetryAfterOnRedisClockShared checks Shared's Retry-After in real time, with
// two nodes (real clock, W = 2 s, limit 2): a denial whose count includes
// the other node's units promises a Retry-After after which the same
// request is admitted, in 100 of 100 trials, for each algorithm. The nodes
// flush when the test says (Flush; the interval is a minute), so what each
// knows of the other does not depend on the machine's speed; sleeping
// longer than Retry-After, as a loaded machine does, can only help.
func TestRetryAfterOnRedisClockShared(t *testing.T) {
	c := sharedClient(t)
	var wg stdsync.WaitGroup
	var failures atomic.Int64
	var msgs stdsync.Map
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.SlidingLog} {
		cfg := SharedConfig{
			Config:        shardlimit.Config{Algorithm: alg, Limit: 2, Window: 2 * time.Second, Clock: shardlimit.SystemClock()},
			Prefix:        redistest.Prefix(t) + alg.String() + ":",
			FlushInterval: time.Minute,
			FlushTimeout:  10 * time.Second,
		}
		a, b := newShared(t, c, cfg), newShared(t, c, cfg)
		maxWait := cfg.Window // a unit leaves the log or fixed window by then
		if alg == shardlimit.SlidingCounter {
			maxWait += cfg.Window / shardlimit.DefaultBuckets // and the counter's bucket as a whole
		}
		for trial := range 100 {
			wg.Go(func() {
				key := fmt.Sprintf("trial%d", trial)
				fail := func(format string, args ...any) {
					failures.Add(1)
					msgs.Store(alg.String()+key, fmt.Sprintf("%v %s: ", alg, key)+fmt.Sprintf(format, args...))
				}
				flush := func(s *Shared) bool {
					if err := s.Flush(ctxT(t, 20*time.Second)); err != nil {
						fail("Flush: %v", err)
						return false
					}
					return true
				}
				if r := a.AllowN(key, time.Now(), 1); !r.Allowed || !flush(a) {
					fail("a's first unit: %+v", r)
					return
				}
				var r shardlimit.Result
				for start := time.Now(); time.Since(start) < time.Minute; {
					// b's first unit is decided before b has read a's; its
					// flush sends it and reads a's, so the next is denied,
					// unless a window ended between the calls: then the
					// units of the new window meet the limit instead, as
					// soon as two calls fall in one window (however slow
					// the machine, within the minute).
					if r = b.AllowN(key, time.Now(), 1); !r.Allowed || !flush(b) {
						break
					}
				}
				if r.Allowed || r.Err != nil || r.RetryAfter <= 0 || r.RetryAfter > maxWait {
					fail("no denial with a RetryAfter in (0, %v]: %+v", maxWait, r)
					return
				}
				time.Sleep(r.RetryAfter)
				if r2 := b.AllowN(key, time.Now(), 1); !r2.Allowed {
					fail("denied again after sleeping RetryAfter %v: %+v", r.RetryAfter, r2)
				}
			})
		}
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		msgs.Range(func(_, v any) bool { t.Error(v); return true })
		t.Fatalf("%d of 300 trials failed", n)
	}
}
