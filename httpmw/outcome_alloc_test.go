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
// rule without settling in a middleware whose other rule settles; two
// more for a settled request: the writer that records the status, and
// the key's string that shardlimit.Limiter's Settle takes.
func TestOutcomeAllocs(t *testing.T) {
	rules := mwtest.MustRules(t, `{"rules": [
		{"name": "open", "path": "/open", "limit": 1000000000, "window": "1m"},
		{"name": "failed", "path": "/failed", "limit": 1000000000, "window": "1m", "count": "failed"}
	]}`)
	mw, err := New(Config{Options: httplimit.Options{Rules: rules}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for path, want := range map[string]float64{"/open": 2, "/failed": 4} {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.1:40000"
		w := &nopWriter{h: http.Header{}}
		h.ServeHTTP(w, r)
		if n := testing.AllocsPerRun(1000, func() { clear(w.h); h.ServeHTTP(w, r) }); n != want {
			t.Errorf("%s: %v allocs per request, want %v", path, n, want)
		}
	}
	if st := mw.Stats().Settled; st.Refunded == 0 {
		t.Errorf("nothing settled: %+v", st)
	}
}
