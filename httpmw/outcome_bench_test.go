package httpmw

import (
	"net/http"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// BenchmarkAllowedOutcome is the allowed path (existing key, default
// headers) of a rule that settles after the handler: "plain" a rule
// without settling (the baseline), "count-failed" a success refunded,
// "cost-header" a reported cost settled.
func BenchmarkAllowedOutcome(b *testing.B) {
	mw, err := New(Config{Options: httplimit.Options{Rules: mwtest.MustRules(b, `{"rules": [
			{"name": "plain", "path": "/plain", "limit": 1000000000, "window": "1h"},
			{"name": "failed", "path": "/failed", "limit": 1000000000, "window": "1h", "count": "failed"},
			{"name": "cost", "path": "/cost", "limit": 1000000000, "window": "1h", "cost_header": "X-Cost"}
		]}`)}})
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Cost", "2")
		okHandler(w, nil)
	}))
	for _, p := range []struct{ name, path string }{{"plain", "/plain"}, {"count-failed", "/failed"}, {"cost-header", "/cost"}} {
		b.Run(p.name, func(b *testing.B) { runBench(b, h, p.path) })
	}
	mw.Close()
}
