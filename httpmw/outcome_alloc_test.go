//go:build !race

package httpmw

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestOutcomeAllocs checks the allocations of the allowed path with
// default fields: the 2 of every limited request (see TestAllocs) for a
// rule without settling in a middleware whose other rule settles; one
// more for a settled request (the writer that records the status) when
// the limiter settles a []byte key, and the key's string too when it
// settles only a string key (shardlimit.Limiter's Settle).
func TestOutcomeAllocs(t *testing.T) {
	rules := mwtest.MustRules(t, `{"rules": [
		{"name": "open", "path": "/open", "limit": 1000000000, "window": "1m"},
		{"name": "failed", "path": "/failed", "limit": 1000000000, "window": "1m", "count": "failed"}
	]}`)
	for _, tc := range []struct {
		bytes        bool
		open, failed float64
	}{{true, 2, 3}, {false, 2, 4}} {
		mw, err := New(Config{Options: httplimit.Options{Rules: rules, NewLimiter: mwtest.SettlingLimiter(tc.bytes)}})
		if err != nil {
			t.Fatal(err)
		}
		h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for path, want := range map[string]float64{"/open": tc.open, "/failed": tc.failed} {
			r := httptest.NewRequest("GET", path, nil)
			r.RemoteAddr = "192.0.2.1:40000"
			w := &nopWriter{h: http.Header{}}
			h.ServeHTTP(w, r)
			if n := testing.AllocsPerRun(1000, func() { clear(w.h); h.ServeHTTP(w, r) }); n != want {
				t.Errorf("SettleBytes %t, %s: %v allocs per request, want %v", tc.bytes, path, n, want)
			}
		}
		mw.Close()
	}
}
