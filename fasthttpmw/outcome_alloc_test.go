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
// settled) none when the limiter settles a []byte key, and the one string
// of the key when it settles only a string key (shardlimit.Limiter's
// Settle).
func TestOutcomeAllocs(t *testing.T) {
	for _, tc := range []struct {
		bytes bool
		want  map[string]float64
	}{
		{true, map[string]float64{"/open": 0, "/failed": 0, "/cost": 0}},
		{false, map[string]float64{"/open": 0, "/failed": 1, "/cost": 1}},
	} {
		mw, err := New(Config{Options: httplimit.Options{Rules: mwtest.MustRules(t, outcomeAllocRules), NewLimiter: mwtest.SettlingLimiter(tc.bytes)}})
		if err != nil {
			t.Fatal(err)
		}
		h := mw.Wrap(func(ctx *fasthttp.RequestCtx) { ctx.Response.Header.Set("X-Cost", "3") })
		for path, want := range tc.want {
			ctx := newCtx(t, "192.0.2.1", path)
			if n := allocs(h, ctx); n != want {
				t.Errorf("SettleBytes %t, %s: %v allocs per request, want %v", tc.bytes, path, n, want)
			}
		}
		if st := mw.Stats().Settled; st.Refunded == 0 || st.Charged == 0 {
			t.Errorf("SettleBytes %t: nothing settled: %+v", tc.bytes, st)
		}
		mw.Close()
	}
}
