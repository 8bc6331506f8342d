package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

func TestCeilSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0}, {0, 0}, {1, 1}, {time.Second - 1, 1}, {time.Second, 1}, {time.Second + 1, 2},
		{59750 * time.Millisecond, 60}, {shardlimit.MaxWindow, int64(shardlimit.MaxWindow / time.Second)},
		{time.Duration(1<<63 - 1), 9223372037},
	} {
		if got := CeilSeconds(tc.d); got != tc.want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	for _, tc := range []struct {
		d    time.Duration
		want int64
		ok   bool
	}{
		{1, 1, true}, {500 * time.Millisecond, 1, true}, {29750 * time.Millisecond, 30, true},
		{60 * time.Second, 60, true}, {shardlimit.Never, 0, false},
	} {
		if got, ok := RetryAfterSeconds(tc.d); got != tc.want || ok != tc.ok {
			t.Errorf("RetryAfterSeconds(%v) = %d, %v", tc.d, got, ok)
		}
	}
}

type mapWriter http.Header

func (w mapWriter) SetHeader(f Field, v []byte) { http.Header(w).Set(FieldNames[f], string(v)) }

// TestWriteHeaders checks every field's format from a Result.
func TestWriteHeaders(t *testing.T) {
	e := newTestEngine(t, Options{
		Rules:      mustParse(t, `{"rules": [{"name": "r", "limit": 5, "window": "1500ms", "policy": "a\"b\\c"}]}`),
		Headers:    HeaderXRateLimit | HeaderIETF | HeaderVerbose | HeaderRetryAfter,
		PolicyName: "ignored",
		ResetUnix:  true,
	})
	r := e.set.Load().rules["r"]
	now := time.Unix(1_734_480_000, 250_000_000)
	d := Decision{r: r, now: now, action: ActionDeny, Result: shardlimit.Result{
		Limit: 5, Remaining: 0, ResetAfter: 1250*time.Millisecond + 1, RetryAfter: 200 * time.Millisecond,
	}}
	h := http.Header{}
	e.WriteHeaders(mapWriter(h), &d, nil)
	want := map[string]string{
		"X-Ratelimit-Limit":     "5",
		"X-Ratelimit-Remaining": "0",
		"X-Ratelimit-Reset":     "1734480002", // 1,734,480,001.500000001 rounded up
		"Ratelimit-Policy":      `"a\"b\\c";q=5;w=2`,
		"Ratelimit":             `"a\"b\\c";r=0;t=2`,
		"X-Ratelimit-Window-Ms": "1500",
		"X-Ratelimit-Strategy":  "fixed_window",
		"Retry-After":           "1",
	}
	for k, v := range want {
		if h.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, h.Get(k), v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("fields %v", h)
	}

	d.Result.RetryAfter = shardlimit.Never
	h = http.Header{}
	e.WriteHeaders(mapWriter(h), &d, nil)
	if _, ok := h["Retry-After"]; ok {
		t.Error("Retry-After written for Never")
	}
	d.action, d.Result.RetryAfter = ActionShadowDeny, time.Second
	h = http.Header{}
	e.WriteHeaders(mapWriter(h), &d, nil)
	if _, ok := h["Retry-After"]; ok {
		t.Error("Retry-After written in dry-run")
	}
}

func TestDenyBody(t *testing.T) {
	for _, tc := range []struct {
		d    Decision
		want string
	}{
		{Decision{Window: time.Minute, Result: shardlimit.Result{Limit: 10, RetryAfter: 56100 * time.Millisecond}},
			"Too Many Requests: limit of 10 per 60 s reached; retry in 57 s.\n"},
		{Decision{Window: 500 * time.Millisecond, Result: shardlimit.Result{Limit: 2, RetryAfter: time.Millisecond}},
			"Too Many Requests: limit of 2 per 500 ms reached; retry in 1 s.\n"},
		{Decision{Window: 7, Cost: 9, Result: shardlimit.Result{Limit: 5, RetryAfter: shardlimit.Never}},
			"Too Many Requests: request cost 9 exceeds the limit of 5 per 7 ns.\n"},
		{Decision{Window: time.Hour, Result: shardlimit.Result{Limit: 0, RetryAfter: shardlimit.Never}},
			"Too Many Requests: this client may make no requests here.\n"},
	} {
		if got := string(AppendDenyBody(nil, &tc.d)); got != tc.want {
			t.Errorf("body %q, want %q", got, tc.want)
		}
	}
}
