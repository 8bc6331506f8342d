package httplimit

import (
	"math"
	"net/http"
	"strconv"
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

// format returns the fields FormatFields formats for d, checking that they
// come in Field order, once each.
func format(t *testing.T, e *Engine, d *Decision) http.Header {
	t.Helper()
	fs := Fields{Buf: []byte("junk")[:0]}
	e.FormatFields(&fs, d)
	h := http.Header{}
	for i := range fs.Len() {
		if i > 0 && fs.Field(i) <= fs.Field(i-1) {
			t.Errorf("field %d (%s) after %s", i, FieldNames[fs.Field(i)], FieldNames[fs.Field(i-1)])
		}
		h.Set(FieldNames[fs.Field(i)], string(fs.Value(i)))
	}
	if fs.Len() > 0 && fs.End(fs.Len()-1) != len(fs.Buf) {
		t.Errorf("values end at %d, Buf is %d long", fs.End(fs.Len()-1), len(fs.Buf))
	}
	return h
}

// TestFormatFields checks every field's format from a Result.
func TestFormatFields(t *testing.T) {
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
	h := format(t, e, &d)
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

	// A key with a limit of its own (an override): the rule's preformatted
	// limit does not apply.
	d.Result.Limit, d.Result.Remaining = 1_000_000, 999_999
	h = format(t, e, &d)
	for k, v := range map[string]string{
		"X-Ratelimit-Limit":     "1000000",
		"X-Ratelimit-Remaining": "999999",
		"Ratelimit-Policy":      `"a\"b\\c";q=1000000;w=2`,
		"Ratelimit":             `"a\"b\\c";r=999999;t=2`,
	} {
		if h.Get(k) != v {
			t.Errorf("override: %s = %q, want %q", k, h.Get(k), v)
		}
	}

	d.Result.RetryAfter = shardlimit.Never
	h = format(t, e, &d)
	if _, ok := h["Retry-After"]; ok {
		t.Error("Retry-After written for Never")
	}
	d.action, d.Result.RetryAfter = ActionShadowDeny, time.Second
	h = format(t, e, &d)
	if _, ok := h["Retry-After"]; ok {
		t.Error("Retry-After written in dry-run")
	}
}

// TestAppendInt checks appendInt against strconv.AppendInt: around every
// power of ten, at the ends of the range, and on a run of small values.
func TestAppendInt(t *testing.T) {
	vals := []int64{math.MinInt64, -1234567, -1, math.MaxInt64, math.MaxInt32, 1<<30 - 1}
	for p := int64(1); p > 0 && p <= math.MaxInt64/10; p *= 10 {
		vals = append(vals, p-1, p, p+1, 9*p, 10*p-1)
	}
	for v := range int64(100_000) {
		vals = append(vals, v)
	}
	for _, v := range vals {
		prefix := []byte("x=")
		got := appendInt(prefix, v)
		if want := strconv.AppendInt([]byte("x="), v, 10); string(got) != string(want) {
			t.Fatalf("appendInt(%d) = %q, want %q", v, got, want)
		}
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
