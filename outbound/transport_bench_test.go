package outbound

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// cannedTransport answers every request with one response, without a
// network: the benchmarks measure what Transport adds.
type cannedTransport struct{ resp *http.Response }

func (c cannedTransport) RoundTrip(*http.Request) (*http.Response, error) { return c.resp, nil }

// allowedPath returns a Transport whose requests are always admitted (a
// GCRA of MaxLimit per hour on the system clock), over a canned base,
// and a request to send through it.
func allowedPath(tb testing.TB, failFast bool) (http.RoundTripper, http.RoundTripper, *http.Request) {
	tb.Helper()
	lim, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: shardlimit.MaxLimit, Window: time.Hour, JanitorInterval: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lim.Close() })
	p, err := New(Config{Limiter: lim, FailFast: failFast})
	if err != nil {
		tb.Fatal(err)
	}
	base := cannedTransport{&http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(""))}}
	tr, err := NewTransport(TransportConfig{Pacer: p, Base: base})
	if err != nil {
		tb.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), "GET", "https://api.example.com/v1/items", nil)
	if err != nil {
		tb.Fatal(err)
	}
	return base, tr, req
}

// BenchmarkTransport measures the allowed path of Transport (key by host,
// hold lookup, the limiter's decision) against the bare base it wraps.
// With no hold stored, the hold lookup is one atomic load.
func BenchmarkTransport(b *testing.B) {
	for _, bc := range []struct {
		name     string
		failFast bool
		bare     bool
	}{{"bare", false, true}, {"wait", false, false}, {"failfast", true, false}} {
		b.Run(bc.name, func(b *testing.B) {
			base, tr, req := allowedPath(b, bc.failFast)
			if bc.bare {
				tr = base
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil || resp.StatusCode != 200 {
					b.Fatal(resp, err)
				}
			}
		})
	}
}

// BenchmarkTransportHeld measures the allowed path while other keys are
// held (the hold table is looked up under its read lock).
func BenchmarkTransportHeld(b *testing.B) {
	_, tr, req := allowedPath(b, false)
	p := tr.(*Transport).pacer
	for i := range 100 {
		_ = p.HoldFor("other"+strings.Repeat("x", i), time.Hour)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.RoundTrip(req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransportLoopback sends real requests to a server on
// 127.0.0.1, bare and through a waiting Transport: what the pacing adds
// beside a round trip.
func BenchmarkTransportLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	for _, paced := range []bool{false, true} {
		name := "bare"
		if paced {
			name = "wait"
		}
		b.Run(name, func(b *testing.B) {
			_, tr, _ := allowedPath(b, false)
			var rt http.RoundTripper = srv.Client().Transport
			if paced {
				tr.(*Transport).base = rt
				rt = tr
			}
			req, err := http.NewRequestWithContext(context.Background(), "GET", srv.URL, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
