//go:build !race

package fasthttpmw

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestBanAndInFlightAllocs checks that the allowed path of a rule with a ban and
// a concurrency limit (a ban in force elsewhere, so the ban table is
// looked up; a slot taken and given back) allocates nothing for a known
// client.
func TestBanAndInFlightAllocs(t *testing.T) {
	mw, err := New(Config{Options: httplimit.Options{Rules: mwtest.MustRules(t, `{"rules": [{"name": "a", "prefix": "/", "limit": 1000000000, "window": "1h",
		"ban": {"after": 3, "within": "1m", "for": "1m"}, "concurrency": {"limit": 10}}]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	if err := mw.SetBan("a", "ip:192.0.2.9", 60e9); err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(func(*fasthttp.RequestCtx) {})
	ctx := newCtx(t, "192.0.2.1", "/x")
	if n := allocs(h, ctx); n != 0 || ctx.Response.StatusCode() != 200 {
		t.Errorf("%v allocs per request (status %d), want 0", n, ctx.Response.StatusCode())
	}
	if n := mw.InFlight("a", "ip:192.0.2.1"); n != 0 {
		t.Errorf("%d in flight after the requests", n)
	}
}
