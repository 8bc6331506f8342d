package mw

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/ulule/limiter/v3"
	ulfasthttp "github.com/ulule/limiter/v3/drivers/middleware/fasthttp"
	"github.com/ulule/limiter/v3/drivers/store/memory"
	"github.com/valyala/fasthttp"
)

// The limits: allowed never denies in a benchmark, denied admits one
// request per hour.
const (
	allowedLimit = 1_000_000_000
	deniedLimit  = 1
	window       = time.Hour
)

// ok is the handler behind every middleware.
func ok(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(fasthttp.StatusOK) }

// subject is one middleware under test.
type subject struct {
	name string
	// wrap returns the handler limited to limit requests per window, and a
	// function releasing it.
	wrap func(tb testing.TB, limit int) (fasthttp.RequestHandler, func())
}

// ourAlgorithms are the algorithms run through fasthttpmw. The sliding log
// is left out: its ring holds one timestamp per request admitted in the
// hour-long window, 2^24 at most, which a benchmark passes, and would deny.
var ourAlgorithms = []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.GCRA}

func subjects(withBare bool) []subject {
	var ss []subject
	if withBare {
		ss = append(ss, subject{"bare", func(testing.TB, int) (fasthttp.RequestHandler, func()) {
			return ok, func() {}
		}})
	}
	ss = append(ss, subject{"ulule", ulule})
	for _, alg := range ourAlgorithms {
		ss = append(ss, subject{"shardlimit_" + alg.String(), func(tb testing.TB, limit int) (fasthttp.RequestHandler, func()) {
			return ours(tb, alg, limit)
		}})
	}
	return ss
}

// ulule wraps ok in ulule/limiter's fasthttp middleware with its memory
// store and default key (the client IP).
func ulule(_ testing.TB, limit int) (fasthttp.RequestHandler, func()) {
	l := limiter.New(memory.NewStore(), limiter.Rate{Period: window, Limit: int64(limit)})
	return ulfasthttp.NewMiddleware(l).Handle(ok), func() {}
}

// ours wraps ok in fasthttpmw with one rule for every path, default
// headers (X-RateLimit-* and Retry-After) and the default key (the client
// IP), janitor disabled.
func ours(tb testing.TB, alg shardlimit.Algorithm, limit int) (fasthttp.RequestHandler, func()) {
	rules, err := httplimit.ParseRules(fmt.Appendf(nil,
		`{"rules":[{"name":"all","prefix":"/","algorithm":%q,"limit":%d,"window":%q}]}`,
		alg.String(), limit, window.String()))
	if err != nil {
		tb.Fatal(err)
	}
	m, err := fasthttpmw.New(fasthttpmw.Config{Options: httplimit.Options{
		Rules:   rules,
		Limiter: shardlimit.Config{JanitorInterval: -1},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	return m.Wrap(ok), func() { _ = m.Close() }
}

// newCtx returns a request context for GET /api/items from 192.0.2.1.
func newCtx() *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI("/api/items")
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}, nil)
	return ctx
}

// serve answers one request on ctx with h and returns the status.
func serve(h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx) int {
	ctx.Response.Reset()
	h(ctx)
	return ctx.Response.StatusCode()
}

// TestStatuses checks that each middleware admits on the allowed limit and
// answers 429 after the first request on the denied one, so the benchmarks
// measure the paths they are named after.
func TestStatuses(t *testing.T) {
	for _, s := range subjects(false) {
		t.Run(s.name, func(t *testing.T) {
			h, done := s.wrap(t, allowedLimit)
			defer done()
			ctx := newCtx()
			for i := range 100 {
				if got := serve(h, ctx); got != fasthttp.StatusOK {
					t.Fatalf("allowed: request %d got %d", i, got)
				}
			}
			if len(ctx.Response.Header.Peek("X-RateLimit-Remaining")) == 0 {
				t.Error("allowed: no X-RateLimit-Remaining")
			}
			h, done2 := s.wrap(t, deniedLimit)
			defer done2()
			if got := serve(h, ctx); got != fasthttp.StatusOK {
				t.Fatalf("denied: first request got %d", got)
			}
			if got := serve(h, ctx); got != fasthttp.StatusTooManyRequests {
				t.Fatalf("denied: second request got %d", got)
			}
		})
	}
}

// run benchmarks h on one client, checking every status.
func run(b *testing.B, h fasthttp.RequestHandler, want int) {
	start := time.Now()
	ctx := newCtx()
	serve(h, ctx) // the client exists; on the denied limit it is now over it
	b.ReportAllocs()
	bad := 0
	b.ResetTimer()
	for range b.N {
		if serve(h, ctx) != want {
			bad++
		}
	}
	b.StopTimer()
	if want == fasthttp.StatusTooManyRequests {
		// A window aligned to Unix time admits once more per boundary the
		// run crossed (about 1 run in 500 crosses the hour).
		bad -= min(bad, int(time.Now().UnixNano()/int64(window)-start.UnixNano()/int64(window)))
	}
	if bad > 0 {
		b.Errorf("%d of %d requests did not answer %d", bad, b.N, want)
	}
}

// BenchmarkFastHTTPAllowed: one client far below its limit; every request
// reaches the handler.
func BenchmarkFastHTTPAllowed(b *testing.B) {
	for _, s := range subjects(true) {
		b.Run(s.name, func(b *testing.B) {
			h, done := s.wrap(b, allowedLimit)
			defer done()
			run(b, h, fasthttp.StatusOK)
		})
	}
}

// BenchmarkFastHTTPDenied: one client over its limit; every request is
// answered 429.
func BenchmarkFastHTTPDenied(b *testing.B) {
	for _, s := range subjects(false) {
		b.Run(s.name, func(b *testing.B) {
			h, done := s.wrap(b, deniedLimit)
			defer done()
			run(b, h, fasthttp.StatusTooManyRequests)
		})
	}
}

// BenchmarkFastHTTPAllowedParallel: BenchmarkFastHTTPAllowed with
// GOMAXPROCS goroutines, each with its own context, all from one client.
func BenchmarkFastHTTPAllowedParallel(b *testing.B) {
	for _, s := range subjects(true) {
		b.Run(s.name, func(b *testing.B) {
			h, done := s.wrap(b, allowedLimit)
			defer done()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := newCtx()
				for pb.Next() {
					if serve(h, ctx) != fasthttp.StatusOK {
						b.Error("request not admitted")
						return
					}
				}
			})
		})
	}
}
