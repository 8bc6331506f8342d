package fasthttpmw_test

import (
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/fasthttpmw"
	"github.com/shardlimit/shardlimit/httplimit"
)

// Clients keyed by address: IPv6 ones by their /64, so two addresses of one
// network share a budget. The clock is fixed so the output is
// deterministic; a server leaves Options.Clock nil (a system clock).
func Example() {
	rules, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "api", "prefix": "/api", "algorithm": "sliding_log", "limit": 2, "window": "10s"}
	]}`))
	if err != nil {
		panic(err)
	}
	mw, err := fasthttpmw.New(fasthttpmw.Config{Options: httplimit.Options{
		Rules: rules,
		Clock: shardlimit.NewManualClock(time.Unix(1_734_480_000, 0)),
	}})
	if err != nil {
		panic(err)
	}
	defer mw.Close()
	h := mw.Wrap(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
	for _, peer := range []string{"2001:db8::1", "2001:db8::2", "2001:db8::3", "2001:db8:0:1::1"} {
		var req fasthttp.Request
		req.SetRequestURI("/api/items")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(peer), Port: 40000}, nil)
		h(&ctx)
		line := fmt.Sprint(peer, " ", ctx.Response.StatusCode(), " remaining=", string(ctx.Response.Header.Peek("X-RateLimit-Remaining")))
		if ra := ctx.Response.Header.Peek("Retry-After"); len(ra) > 0 {
			line += " retry-after=" + string(ra)
		}
		fmt.Println(line)
	}
	// Output:
	// 2001:db8::1 200 remaining=1
	// 2001:db8::2 200 remaining=0
	// 2001:db8::3 429 remaining=0 retry-after=10
	// 2001:db8:0:1::1 200 remaining=1
}
