package fasthttpmw

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestStaleRequestTimesDoNotMultiplyTheLimit runs one client, limited to
// 10/s by the sliding log, through a real server behind a slow middleware
// (an auth lookup of 0-30 ms) with 16 concurrent connections for 3 s.
// fasthttp reads ctx.Time() before that middleware runs, so instants taken
// from it reach the limiter up to 30 ms out of order; the core took steps
// back beyond its jitter tolerance (10 ms then) as clock steps and moved the
// key's state back, usage expired early, and about 300 requests got
// through. Decisions now read the middleware's clock when they are made,
// and the core decides a stale instant at the key's latest: at most four
// windows' worth (the admitted instants span a little over 3 s) may pass.
// A load test, skipped with -short.
func TestStaleRequestTimesDoNotMultiplyTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("load test; skipped with -short")
	}
	rules := &httplimit.Rules{Rules: []httplimit.Rule{{Name: "r", Path: "/x", Algorithm: shardlimit.SlidingLog, Limit: 10, Window: time.Second}}}
	mw, err := New(Config{Options: httplimit.Options{Rules: rules}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	limited := mw.Wrap(okHandler)
	slowAuth := func(ctx *fasthttp.RequestCtx) {
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		limited(ctx)
	}
	ln, _ := mwtest.Listen(t, false)
	// A short MaxIdleWorkerDuration lets the worker pool notice Shutdown
	// before goleak looks (see harness_test.go).
	srv := &fasthttp.Server{Handler: slowAuth, MaxIdleWorkerDuration: 50 * time.Millisecond}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	const conns, d = 16, 3 * time.Second
	c := mwtest.NewClient(t, "http://"+ln.Addr().String(), conns)
	var ok, other atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for range conns {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				r, err := c.Do("GET", "/x")
				switch {
				case err == nil && r.Status == fasthttp.StatusOK:
					ok.Add(1)
				case err != nil || r.Status != fasthttp.StatusTooManyRequests:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d admitted, %d denied or failed", ok.Load(), other.Load())
	if n := ok.Load(); n > 40 || n < 10 {
		t.Errorf("%d requests admitted in %v for one client limited to 10/s, want 10 to 40", n, d)
	}
	if n := other.Load(); n > 0 {
		t.Errorf("%d requests failed or got neither 200 nor 429", n)
	}
}
