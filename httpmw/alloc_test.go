//go:build !race

package httpmw

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// TestAllocs checks what the middleware allocates per request with an
// existing key: net/http header values must be strings in a []string, so
// the fields cost one string holding every value and one array backing
// every []string, however many fields are written; the 429 adds nothing
// (its Content-Type and nosniff share that array, its body is pooled), so
// without fields it allocates only that array. A rule of several limits
// (/multi) costs what a rule of one does.
func TestAllocs(t *testing.T) {
	rules := mwtest.MustRules(t, `{"rules": [
		{"name": "open", "path": "/open", "limit": 1000000000, "window": "1m"},
		{"name": "shut", "path": "/shut", "limit": 1, "window": "1h"},
		{"name": "multi", "path": "/multi", "limits": [{"limit": 1000000000, "window": "1h"}, {"limit": 1000000000, "window": "1m"},
			{"limit": 1000000000, "window": "1s"}, {"limit": 1000000000, "window": "24h"}]}
	], "overrides": [{"rule": "multi", "ip": "192.0.2.1", "limits": [{"limit": 999999999, "window": "1h"}]}]}`)
	all := httplimit.HeaderConfig{IETF: true, Verbose: true}
	for _, tc := range []struct {
		name    string
		headers httplimit.HeaderConfig
		want    [2]float64 // allowed, denied
	}{
		{"default headers", httplimit.HeaderConfig{}, [2]float64{2, 2}},
		{"all headers", all, [2]float64{2, 2}},
		{"no headers", httplimit.HeaderConfig{OmitXRateLimit: true, OmitRetryAfter: true}, [2]float64{0, 1}},
	} {
		mw, err := New(Config{Options: httplimit.Options{Rules: rules, Headers: tc.headers}})
		if err != nil {
			t.Fatal(err)
		}
		h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for i, path := range []string{"/open", "/shut", "/multi"} {
			want := tc.want[i%2] // /multi is allowed, as /open
			r := httptest.NewRequest("GET", path, nil)
			r.RemoteAddr = "192.0.2.1:40000"
			w := &nopWriter{h: http.Header{}}
			h.ServeHTTP(w, r) // stores the key; puts /shut over its limit
			n := testing.AllocsPerRun(1000, func() {
				clear(w.h)
				h.ServeHTTP(w, r)
			})
			if n != want {
				t.Errorf("%s, %s: %v allocs per request, want %v", tc.name, path, n, want)
			}
			if path == "/shut" && (w.h.Get("Content-Type") != "text/plain; charset=utf-8" || w.h.Get("X-Content-Type-Options") != "nosniff") {
				t.Errorf("%s, 429 fields %v", tc.name, w.h)
			}
		}
		mw.Close()
	}
}
