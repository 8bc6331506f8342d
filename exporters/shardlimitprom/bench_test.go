package shardlimitprom_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/exporters/shardlimitprom"
	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/metrics"
)

// scraper gathers reg on another goroutine until the returned function is
// called, which reports the scrapes per second to b: in a loop as fast as
// it can (every 0), or once per every. A nil reg scrapes nothing.
func scraper(b *testing.B, reg *prometheus.Registry, every time.Duration) func() {
	if reg == nil {
		return func() {}
	}
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var tick <-chan time.Time
		if every > 0 {
			t := time.NewTicker(every)
			defer t.Stop()
			tick = t.C
		}
		for {
			if tick != nil {
				select {
				case <-stop:
					return
				case <-tick:
				}
			} else {
				select {
				case <-stop:
					return
				default:
				}
			}
			if _, err := reg.Gather(); err != nil {
				b.Error(err)
				return
			}
			n.Add(1)
		}
	})
	start := time.Now()
	return func() {
		close(stop)
		wg.Wait()
		b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "scrapes/s")
	}
}

// sources are what a benchmark decides on, and a registry with a
// collector of them.
type sources struct {
	lim shardlimit.Limiter
	mw  *fasthttpmw.Middleware
	reg *prometheus.Registry
}

// newSources returns a limiter (fixed window, a limit nothing reaches) and
// a fasthttp middleware (see benchMiddleware), with a registry holding a
// collector of both.
func newSources(b *testing.B) *sources {
	lim, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: shardlimit.MaxLimit, Window: time.Hour, JanitorInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lim.Close() })
	mw := benchMiddleware(b)
	reg := prometheus.NewRegistry()
	reg.MustRegister(shardlimitprom.NewCollector(metrics.Limiter("core", lim), metrics.Middleware(mw)))
	return &sources{lim, mw, reg}
}

// BenchmarkScrape is the A/B of the collector: the decision hot paths with
// no scrape (scrape=off); while another goroutine gathers a registry with
// a collector of the very limiter and middleware decided on, every 100 ms
// (scrape=100ms, 150 times Prometheus's default rate) or in a loop as fast
// as it can (scrape=loop); and, as a control, in a loop
// over a collector of another limiter and middleware of the same shape
// (scrape=loop-other), which shares no lock or counter with the decisions:
// what the loop costs beyond the control is the reads' interference, the
// rest is the scraper's CPU and garbage on a machine of two cores. Compare
// with
//
//	go test -run '^$' -bench Scrape -count 8 | tee ab.txt
//	benchstat -col /scrape ab.txt
//
// path=core is a limiter's AllowAt on a stored key; path=middleware is
// fasthttpmw's allowed path on a stored key with a reused RequestCtx, as in
// fasthttpmw's own benchmarks. B/op and allocs/op count the whole
// process's allocations, the scraper's included: the decisions allocate
// nothing.
func BenchmarkScrape(b *testing.B) {
	for _, mode := range []string{"off", "100ms", "loop", "loop-other"} {
		// scrape returns the registry to gather and how often.
		scrape := func(b *testing.B, own *sources) (*prometheus.Registry, time.Duration) {
			switch mode {
			case "100ms":
				return own.reg, 100 * time.Millisecond
			case "loop":
				return own.reg, 0
			case "loop-other":
				return newSources(b).reg, 0
			}
			return nil, 0
		}
		b.Run("path=core/scrape="+mode, func(b *testing.B) {
			s := newSources(b)
			now := time.Now()
			s.lim.AllowAt("192.0.2.1", now)
			reg, every := scrape(b, s)
			done := scraper(b, reg, every)
			b.ReportAllocs()
			for b.Loop() {
				s.lim.AllowAt("192.0.2.1", now)
			}
			done()
		})
		b.Run("path=middleware/scrape="+mode, func(b *testing.B) {
			s := newSources(b)
			h := s.mw.Wrap(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
			var req fasthttp.Request
			req.SetRequestURI("/open")
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 40000}, nil)
			h(&ctx)
			reg, every := scrape(b, s)
			done := scraper(b, reg, every)
			b.ReportAllocs()
			for b.Loop() {
				ctx.Response.Reset()
				h(&ctx)
			}
			done()
			if ctx.Response.StatusCode() != 200 {
				b.Fatalf("status %d", ctx.Response.StatusCode())
			}
		})
	}
}

// benchMiddleware returns a fasthttp middleware with an open rule and a
// shut one.
func benchMiddleware(b *testing.B) *fasthttpmw.Middleware {
	rules, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "open", "path": "/open", "limit": 1000000000, "window": "1h"},
		{"name": "shut", "path": "/shut", "limit": 1, "window": "1h"}
	]}`))
	if err != nil {
		b.Fatal(err)
	}
	mw, err := fasthttpmw.New(fasthttpmw.Config{Options: httplimit.Options{Rules: rules}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mw.Close() })
	return mw
}
