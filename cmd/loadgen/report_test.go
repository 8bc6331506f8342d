package main

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestReadFields checks reading the limit and window from each header
// set the middleware can write.
func TestReadFields(t *testing.T) {
	for _, c := range []struct {
		name    string
		headers map[string]string
		want    fields
	}{
		{"verbose", map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Window-Ms": "60000", "RateLimit-Policy": `"p";q=10;w=60`,
			"X-RateLimit-Strategy": "sliding_log",
		}, fields{10, time.Minute, fromWindowMs, "sliding_log"}},
		{"ms precision wins", map[string]string{
			"X-RateLimit-Limit": "3", "X-RateLimit-Window-Ms": "1500", "RateLimit-Policy": `"p";q=3;w=2`,
		}, fields{3, 1500 * time.Millisecond, fromWindowMs, ""}},
		{"IETF only", map[string]string{"RateLimit-Policy": `"client-1-foo";q=20;w=60, "other";q=1;w=1`},
			fields{20, time.Minute, fromPolicy, ""}},
		{"IETF, several limits: the one RateLimit names", map[string]string{
			"RateLimit-Policy": `"baz-1s";q=3;w=1, "baz-1m";q=10;w=60`, "RateLimit": `"baz-1m";r=0;t=57`},
			fields{10, time.Minute, fromPolicy, ""}},
		{"IETF, several limits, RateLimit names none of them", map[string]string{
			"RateLimit-Policy": `"baz-1s";q=3;w=1, "baz-1m";q=10;w=60`, "RateLimit": `"x";r=0;t=57`},
			fields{3, time.Second, fromPolicy, ""}},
		{"IETF params in any order with spaces", map[string]string{"X-RateLimit-Limit": "7", "RateLimit-Policy": `"p"; w=5; q=9`},
			fields{7, 5 * time.Second, fromPolicy, ""}},
		{"trio only", map[string]string{"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4"},
			fields{5, 0, "", ""}},
		{"malformed", map[string]string{"X-RateLimit-Limit": "-5", "X-RateLimit-Window-Ms": "x", "RateLimit-Policy": `"p";q=;w=0`},
			fields{}},
		{"none", nil, fields{}},
	} {
		var h fasthttp.ResponseHeader
		for k, v := range c.headers {
			h.Set(k, v)
		}
		if got := readFields(&h); got != c.want {
			t.Errorf("%s: readFields = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// refFixed is the obvious O(n) reference of maxFixed.
func refFixed(spans []span, base, w int64) int64 {
	var best int64
	for _, a := range spans {
		id := (base + a.sent) / w
		var n int64
		for _, s := range spans {
			if (base+s.sent)/w == id && (base+s.answered)/w == id {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// refSliding is the obvious O(n^2) reference of maxSliding: every window
// [a, a+w) starting at a span's send.
func refSliding(spans []span, w int64) int64 {
	var best int64
	for _, a := range spans {
		var n int64
		for _, s := range spans {
			if s.sent >= a.sent && s.answered < a.sent+w {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// TestWindowMaxima checks the window counts on chosen cases and against
// the reference functions on random spans.
func TestWindowMaxima(t *testing.T) {
	const w = 1000
	for _, c := range []struct {
		name           string
		base           int64
		spans          []span
		fixed, sliding int64
	}{
		{"none", 0, nil, 0, 0},
		{"one window", 0, []span{{0, 1}, {100, 101}, {999, 999}}, 3, 3},
		{"answer after the window", 0, []span{{0, 1}, {998, 1000}}, 1, 1},
		{"boundary burst", 0, []span{{900, 901}, {950, 951}, {1000, 1001}, {1050, 1051}}, 2, 4},
		{"aligned to base", 500, []span{{0, 1}, {400, 401}, {600, 601}}, 2, 3},
		{"sliding out", 0, []span{{0, 1}, {500, 501}, {1000, 1001}, {1500, 1501}}, 2, 2},
	} {
		if got := maxFixed(c.spans, c.base, w); got != c.fixed {
			t.Errorf("%s: maxFixed = %d, want %d", c.name, got, c.fixed)
		}
		if got := maxSliding(c.spans, w); got != c.sliding {
			t.Errorf("%s: maxSliding = %d, want %d", c.name, got, c.sliding)
		}
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		n := rng.IntN(60)
		spans := make([]span, n)
		for j := range spans {
			s := rng.Int64N(5000)
			spans[j] = span{s, s + rng.Int64N(300)}
		}
		w := 1 + rng.Int64N(2000)
		base := rng.Int64N(1e6)
		if got, want := maxFixed(spans, base, w), refFixed(spans, base, w); got != want {
			t.Fatalf("case %d: maxFixed = %d, reference %d (w %d, base %d, spans %v)", i, got, want, w, base, spans)
		}
		if got, want := maxSliding(spans, w), refSliding(spans, w); got != want {
			t.Fatalf("case %d: maxSliding = %d, reference %d (w %d, spans %v)", i, got, want, w, spans)
		}
	}
}

// TestPercentiles checks the nearest-rank percentiles.
func TestPercentiles(t *testing.T) {
	lat := make([]int64, 100)
	for i := range lat {
		lat[i] = int64(100-i) * 1e6 // 100 ms down to 1 ms
	}
	got := percentiles(lat)
	want := Latency{N: 100, P50: 50, P90: 90, P99: 99, Max: 100}
	if got != want {
		t.Errorf("percentiles = %+v, want %+v", got, want)
	}
	if got := percentiles(nil); got != (Latency{}) {
		t.Errorf("percentiles(nil) = %+v", got)
	}
	if got := percentiles([]int64{3e6}); got != (Latency{1, 3, 3, 3, 3}) {
		t.Errorf("percentiles of one = %+v", got)
	}
}

// TestWriteText checks the text report's columns and notes.
func TestWriteText(t *testing.T) {
	r := &Report{
		URL: "http://127.0.0.1:8080", DurationS: 10, ElapsedS: 10.01, Concurrency: 64,
		Streams: []StreamReport{
			{Stream: Stream{"client-1", "/foo", 5}, Counts: Counts{Planned: 50, Sent: 50, Admitted: 20, Denied: 30},
				Limit: 10, WindowMs: 60000, Strategy: "fixed_window",
				MaxFixed: &WindowMax{10, 1}, MaxSliding: &WindowMax{20, 2}, Latency: Latency{50, 0.2, 0.3, 0.4, 0.5}},
			{Stream: Stream{"anon", "/healthz", 10}, Counts: Counts{Planned: 100, Sent: 90, Admitted: 90, Late: 3, Missed: 10}},
			{Stream: Stream{"client-2", "/bar", 1}, Counts: Counts{Planned: 10, Sent: 10, Denied: 10}, Limit: 10},
		},
		Total: Counts{Planned: 160, Sent: 150, Admitted: 110, Denied: 40, Late: 3, Missed: 10},
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"http://127.0.0.1:8080 for 10s",
		"client-1  /foo",
		"10/1m  fixed_window",
		"10 (1.00x)",
		"20 (2.00x)",
		"0.20ms",
		"3 sends left more than 10ms late and 10 never left",
		"client-2 /bar: no request admitted",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "interrupted") {
		t.Errorf("report says interrupted:\n%s", out)
	}
}
