//go:build !race

package fasthttpmw

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// newCtx returns a RequestCtx for GET path from peer ip, as a server would
// hand it to a handler, with request headers hdr (name/value pairs).
func newCtx(t testing.TB, ip, path string, hdr ...string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI(path)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}, nil)
	return &ctx
}

// allocs returns the allocations of one request on a reused ctx, after a
// warm-up request that stores the key.
func allocs(h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx) float64 {
	h(ctx)
	return testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		h(ctx)
	})
}

// TestMiddlewareAllocs checks that, on a reused
// fasthttp.RequestCtx with an existing key, the allowed path allocates
// nothing (excluding the wrapped handler, a no-op here) for peer 192.0.2.1
// and for peer 2001:db8::1 (keyed by its /64), with every header set on; the
// 429 path allocates nothing either (target 0, at most 2 allowed). Rules
// of several limits (four windows, and two on a sliding log; a client with
// limits of its own) allocate nothing either.
func TestMiddlewareAllocs(t *testing.T) {
	rules := allocRules(t)
	all := httplimit.HeaderConfig{IETF: true, Verbose: true}
	for _, tc := range []struct {
		name string
		opts httplimit.Options
		hdr  []string
	}{
		{"system clock", httplimit.Options{Headers: all}, nil},
		{"manual clock", httplimit.Options{Headers: all, Clock: shardlimit.NewManualClock(mwtest.T0)}, nil},
		{"identity header", httplimit.Options{Headers: all, Keys: httplimit.KeyConfig{Header: "X-Client-ID", UnknownIdentity: httplimit.UnknownIdentityOwnKey}},
			[]string{"X-Client-ID", "client-1"}},
		{"unlisted identity", httplimit.Options{Headers: all, Keys: httplimit.KeyConfig{Header: "X-Client-ID"}}, []string{"X-Client-ID", "client-1"}},
		{"trusted proxy", httplimit.Options{Headers: all, Keys: httplimit.KeyConfig{TrustedProxies: []string{"192.0.2.0/24", "2001:db8::/32"}}},
			[]string{"X-Forwarded-For", "198.51.100.7, 2001:db8::99"}},
		{"trusted proxy, X-Real-IP", httplimit.Options{Headers: all, Keys: httplimit.KeyConfig{TrustedProxies: []string{"192.0.2.0/24", "2001:db8::/32"}, ForwardedHeader: httplimit.XRealIP}},
			[]string{"X-Real-IP", "2001:db8:1::7"}},
		{"default headers", httplimit.Options{}, nil},
	} {
		tc.opts.Rules = rules
		mw, err := New(Config{Options: tc.opts})
		if err != nil {
			t.Fatal(err)
		}
		h := mw.Wrap(func(*fasthttp.RequestCtx) {})
		for _, ip := range []string{"192.0.2.1", "2001:db8::1"} {
			for _, path := range []string{"/open", "/log", "/counter", "/multi", "/multi-log"} {
				ctx := newCtx(t, ip, path, tc.hdr...)
				if n := allocs(h, ctx); n != 0 {
					t.Errorf("%s, peer %s, %s allowed: %v allocs per request, want 0", tc.name, ip, path, n)
				}
				if ctx.Response.StatusCode() != 200 || len(ctx.Response.Header.Peek("X-RateLimit-Remaining")) == 0 && tc.opts.Headers != (httplimit.HeaderConfig{OmitXRateLimit: true}) {
					t.Errorf("%s, %s %s: status %d, headers %q", tc.name, ip, path, ctx.Response.StatusCode(), ctx.Response.Header.Header())
				}
			}
			ctx := newCtx(t, ip, "/shut", tc.hdr...)
			n := allocs(h, ctx)
			if ctx.Response.StatusCode() != 429 {
				t.Fatalf("%s, peer %s: status %d, want 429", tc.name, ip, ctx.Response.StatusCode())
			}
			if n != 0 {
				t.Errorf("%s, peer %s denied: %v allocs per request, want 0 (at most 2)", tc.name, ip, n)
			}
		}
		mw.Close()
	}
}

// allocRules are the rules of the allocation tests: rules of one limit
// under each algorithm, one that denies, and rules of several limits (four
// windows, and two on a sliding log; a client with limits of its own).
func allocRules(t *testing.T) *httplimit.Rules {
	t.Helper()
	return mwtest.MustRules(t, `{"rules": [
		{"name": "open", "path": "/open", "limit": 1000000000, "window": "1m"},
		{"name": "log", "path": "/log", "algorithm": "sliding_log", "limit": 1000000, "window": "1m"},
		{"name": "counter", "path": "/counter", "algorithm": "sliding_counter", "limit": 1000000000, "window": "1m"},
		{"name": "shut", "path": "/shut", "limit": 1, "window": "1h"},
		{"name": "multi", "path": "/multi", "limits": [{"limit": 1000000000, "window": "1h"}, {"limit": 1000000000, "window": "1m"},
			{"limit": 1000000000, "window": "1s"}, {"limit": 1000000000, "window": "24h"}]},
		{"name": "multi-log", "path": "/multi-log", "algorithm": "sliding_log", "limits": [{"limit": 1000000, "window": "1m"}, {"limit": 100000, "window": "1s"}]}
	], "overrides": [{"rule": "multi", "ip": "192.0.2.1", "limits": [{"limit": 999999999, "window": "1h"}]}]}`)
}

// TestKeyFuncAllocs checks that key functions, appending to dst or
// returning request memory, allocate nothing on the allowed path.
func TestKeyFuncAllocs(t *testing.T) {
	rules := allocRules(t)
	for name, kf := range map[string]func(*fasthttp.RequestCtx, []byte) []byte{
		"append": func(ctx *fasthttp.RequestCtx, dst []byte) []byte {
			return append(dst, ctx.Request.Header.Peek("X-Api-Key")...)
		},
		"alias": func(ctx *fasthttp.RequestCtx, _ []byte) []byte { return ctx.Request.Header.Peek("X-Api-Key") },
	} {
		mw, err := New(Config{Options: httplimit.Options{Rules: rules, Keys: httplimit.KeyConfig{UnknownIdentity: httplimit.UnknownIdentityOwnKey}}, KeyFunc: kf})
		if err != nil {
			t.Fatal(err)
		}
		ctx := newCtx(t, "192.0.2.1", "/open", "X-Api-Key", "key-0123456789")
		if n := allocs(mw.Wrap(func(*fasthttp.RequestCtx) {}), ctx); n != 0 {
			t.Errorf("key function %s: %v allocs per request, want 0", name, n)
		}
		mw.Close()
	}
}

// TestWrappedHandlerAllocs checks that the allowed path adds nothing to a
// handler that allocates itself.
func TestWrappedHandlerAllocs(t *testing.T) {
	rules := allocRules(t)
	mw, err := New(Config{Options: httplimit.Options{Rules: rules, Clock: shardlimit.NewManualClock(mwtest.T0.Add(time.Second))}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	bare := func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }
	if a, b := allocs(bare, newCtx(t, "192.0.2.1", "/open")), allocs(mw.Wrap(bare), newCtx(t, "192.0.2.1", "/open")); a != b {
		t.Errorf("bare handler %v allocs, wrapped %v", a, b)
	}
}
