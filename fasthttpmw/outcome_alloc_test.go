//go:build !race

package fasthttpmw

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// outcomeAllocRules are a rule without settling beside rules that settle.
const outcomeAllocRules = `{"rules": [
	{"name": "open", "path": "/open", "limit": 1000000000, "window": "1m"},
	{"name": "failed", "path": "/failed", "limit": 1000000000, "window": "1m", "count": "failed"},
	{"name": "cost", "path": "/cost", "limit": 1000000000, "window": "1m", "cost_header": "X-Cost"}
]}`

// TestOutcomeAllocs checks the allocations of the allowed path: none for
// a rule without settling in a middleware whose other rules settle; for
// a settled request (a success refunded under "failed", a reported cost
// settled) the one string of the key that shardlimit.Limiter's Settle
// takes.
func TestOutcomeAllocs(t *testing.T) {
	mw, err := New(Config{Options: httplimit.Options{Rules: mwtest.MustRules(t, outcomeAllocRules)}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	h := mw.Wrap(func(ctx *fasthttp.RequestCtx) { ctx.Response.Header.Set("X-Cost", "3") })
	for path, want := range map[string]float64{"/open": 0, "/failed": 1, "/cost": 1} {
		ctx := newCtx(t, "192.0.2.1", path)
		if n := allocs(h, ctx); n != want {
			t.Errorf("%s: %v allocs per request, want %v", path, n, want)
		}
	}
	if st := mw.Stats().Settled; st.Refunded == 0 || st.Charged == 0 {
		t.Errorf("nothing settled: %+v", st)
	}
}
