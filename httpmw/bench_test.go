package httpmw

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// nopWriter is a ResponseWriter that keeps only its header, so the
// benchmarks measure the middleware rather than a recorder.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

func runBench(b *testing.B, h http.Handler, path string) {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = "192.0.2.1:40000"
	w := &nopWriter{h: http.Header{}}
	h.ServeHTTP(w, r)
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

func benchMW(b *testing.B) *Middleware {
	mw, err := New(Config{Options: httplimit.Options{Rules: mwtest.MustRules(b, `{"rules": [
		{"name": "open", "path": "/open", "limit": 1000000000, "window": "1h"},
		{"name": "shut", "path": "/shut", "limit": 1, "window": "1h"}
	]}`)}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mw.Close() })
	return mw
}

// BenchmarkBareHandler is the application alone: the baseline.
func BenchmarkBareHandler(b *testing.B) { runBench(b, http.HandlerFunc(okHandler), "/open") }

// BenchmarkAllowed is the allowed path (existing key, default headers).
func BenchmarkAllowed(b *testing.B) {
	runBench(b, benchMW(b).Wrap(http.HandlerFunc(okHandler)), "/open")
}

// BenchmarkDenied is the 429 path.
func BenchmarkDenied(b *testing.B) {
	runBench(b, benchMW(b).Wrap(http.HandlerFunc(okHandler)), "/shut")
}
