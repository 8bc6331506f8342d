package httpmw

import (
	"net/http"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// BenchmarkAllowedOutcome is the allowed path (existing key, default
// headers) of a rule that settles after the handler, on limiters of
// mwtest.SettlingLimiter: "plain" a rule without settling (the baseline,
// through the same limiter factory), "count-failed" a success refunded,
// "cost-header" a reported cost settled; "-bytes" with a limiter that
// settles a []byte key.
func BenchmarkAllowedOutcome(b *testing.B) {
	for _, bytes := range []bool{false, true} {
		mw, err := New(Config{Options: httplimit.Options{Rules: mwtest.MustRules(b, `{"rules": [
			{"name": "plain", "path": "/plain", "limit": 1000000000, "window": "1h"},
			{"name": "failed", "path": "/failed", "limit": 1000000000, "window": "1h", "count": "failed"},
			{"name": "cost", "path": "/cost", "limit": 1000000000, "window": "1h", "cost_header": "X-Cost"}
		]}`), NewLimiter: mwtest.SettlingLimiter(bytes)}})
		if err != nil {
			b.Fatal(err)
		}
		h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cost", "2")
			okHandler(w, nil)
		}))
		suffix := ""
		if bytes {
			suffix = "-bytes"
		}
		for _, p := range []struct{ name, path string }{{"plain", "/plain"}, {"count-failed", "/failed"}, {"cost-header", "/cost"}} {
			b.Run(p.name+suffix, func(b *testing.B) { runBench(b, h, p.path) })
		}
		mw.Close()
	}
}
