package fasthttpmw

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// benchCtx is newCtx for benchmarks.
func benchCtx(ip, path string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI(path)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}, nil)
	return &ctx
}

// benchHandler is the application: it writes a short body.
func benchHandler(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }

func benchMW(b *testing.B, headers httplimit.HeaderConfig) *Middleware {
	rules := mwtest.MustRules(b, `{"rules": [
		{"name": "open", "path": "/open", "limit": 1000000000, "window": "1h"},
		{"name": "shut", "path": "/shut", "limit": 1, "window": "1h"},
		{"name": "two", "path": "/two", "limits": [{"limit": 1000000000, "window": "1m"}, {"limit": 1000000000, "window": "1h"}]}
	]}`)
	mw, err := New(Config{Options: httplimit.Options{Rules: rules, Headers: headers}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mw.Close() })
	return mw
}

func runBench(b *testing.B, h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx) {
	h(ctx)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(ctx)
	}
}

// BenchmarkBareHandler is the application alone: the baseline.
func BenchmarkBareHandler(b *testing.B) {
	runBench(b, benchHandler, benchCtx("192.0.2.1", "/open"))
}

// BenchmarkAllowed is the allowed path (existing key, default headers).
func BenchmarkAllowed(b *testing.B) {
	for _, ip := range []string{"192.0.2.1", "2001:db8::1"} {
		b.Run(ip, func(b *testing.B) {
			runBench(b, benchMW(b, httplimit.HeaderConfig{}).Wrap(benchHandler), benchCtx(ip, "/open"))
		})
	}
	b.Run("all-headers", func(b *testing.B) {
		runBench(b, benchMW(b, httplimit.HeaderConfig{IETF: true, Verbose: true}).Wrap(benchHandler), benchCtx("192.0.2.1", "/open"))
	})
	// A rule of two limits (a minute and an hour).
	b.Run("two-limits", func(b *testing.B) {
		runBench(b, benchMW(b, httplimit.HeaderConfig{}).Wrap(benchHandler), benchCtx("192.0.2.1", "/two"))
	})
	b.Run("two-limits-all-headers", func(b *testing.B) {
		runBench(b, benchMW(b, httplimit.HeaderConfig{IETF: true, Verbose: true}).Wrap(benchHandler), benchCtx("192.0.2.1", "/two"))
	})
}

// BenchmarkDenied is the 429 path (existing key over its limit).
func BenchmarkDenied(b *testing.B) {
	runBench(b, benchMW(b, httplimit.HeaderConfig{}).Wrap(benchHandler), benchCtx("192.0.2.1", "/shut"))
}

// BenchmarkAllowedParallel is the allowed path from many goroutines, each
// with its own ctx and client.
func BenchmarkAllowedParallel(b *testing.B) {
	h := benchMW(b, httplimit.HeaderConfig{}).Wrap(benchHandler)
	b.ReportAllocs()
	var n atomic.Int32
	b.RunParallel(func(pb *testing.PB) {
		ctx := benchCtx(net.IPv4(192, 0, 2, byte(n.Add(1))).String(), "/open")
		for pb.Next() {
			ctx.Response.Reset()
			h(ctx)
		}
	})
}
