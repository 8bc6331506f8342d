package mwengine

import (
	"net/http"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
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

// format returns the fields formatFields formats for d, checking that they
// come in Field order, once each.
func format(t *testing.T, e *Engine, d *Outcome) http.Header {
	t.Helper()
	fs := Fields{Buf: []byte("junk")[:0]}
	e.formatFields(&fs, d)
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

// TestPolicyNamesDefaultToRuleNames checks the IETF fields of rules
// without a policy name: each is named after its rule (a name outside
// printable ASCII made one by httplimit.PolicyNameOf, '"' and '\\'
// escaped in the structured-field string), not all "default", and that a
// configured name wins: the rule's own, else HeaderConfig.PolicyName.
func TestPolicyNamesDefaultToRuleNames(t *testing.T) {
	rules := `{"rules": [
		{"name": "foo", "path": "/foo", "limit": 5, "window": "1m"},
		{"name": "bar", "path": "/bar", "limit": 5, "window": "1m"},
		{"name": "caf\u00e9 \"x\"", "path": "/cafe", "limit": 5, "window": "1m"},
		{"name": "own", "path": "/own", "limit": 5, "window": "1m", "policy": "mine"},
		{"name": "baz", "path": "/baz", "limits": [{"limit": 3, "window": "1s"}, {"limit": 10, "window": "1m"}]}
	]}`
	for _, tc := range []struct {
		policyName string
		want       map[string]string // rule: RateLimit-Policy
	}{
		{"", map[string]string{
			"foo":             `"foo";q=5;w=60`,
			"bar":             `"bar";q=5;w=60`,
			"caf\u00e9 \"x\"": `"caf%C3%A9 \"x\"";q=5;w=60`,
			"own":             `"mine";q=5;w=60`,
			"baz":             `"baz-1s";q=3;w=1, "baz-1m";q=10;w=60`,
		}},
		{"api", map[string]string{
			"foo":             `"api";q=5;w=60`,
			"bar":             `"api";q=5;w=60`,
			"caf\u00e9 \"x\"": `"api";q=5;w=60`,
			"own":             `"mine";q=5;w=60`,
			"baz":             `"api-1s";q=3;w=1, "api-1m";q=10;w=60`,
		}},
	} {
		e := newTestEngine(t, httplimit.Options{
			Rules:   mustParse(t, rules),
			Headers: httplimit.HeaderConfig{IETF: true, PolicyName: tc.policyName},
		})
		for name, want := range tc.want {
			r := e.set.Load().rules[name]
			d := Outcome{r: r, Decision: httplimit.Decision{Action: httplimit.ActionAllow, Time: time.Unix(0, 0), Result: shardlimit.Result{
				Limit: r.rates[0].limit, Remaining: 1, ResetAfter: time.Second,
			}}}
			if got := format(t, e, &d).Get("Ratelimit-Policy"); got != want {
				t.Errorf("PolicyName %q, rule %q: RateLimit-Policy %s, want %s", tc.policyName, name, got, want)
			}
		}
	}
}

// TestFormatFields checks every field's format from a Result.
func TestFormatFields(t *testing.T) {
	e := newTestEngine(t, httplimit.Options{
		Rules:   mustParse(t, `{"rules": [{"name": "r", "limit": 5, "window": "1500ms", "policy": "a\"b\\c"}]}`),
		Headers: httplimit.HeaderConfig{IETF: true, Verbose: true, PolicyName: "ignored", ResetUnix: true},
	})
	r := e.set.Load().rules["r"]
	now := time.Unix(1_734_480_000, 250_000_000)
	d := Outcome{r: r, Decision: httplimit.Decision{Action: httplimit.ActionDeny, Time: now, Result: shardlimit.Result{
		Limit: 5, Remaining: 0, ResetAfter: 1250*time.Millisecond + 1, RetryAfter: 200 * time.Millisecond,
	}}}
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
	d.Action, d.Result.RetryAfter = httplimit.ActionDryRunDeny, time.Second
	h = format(t, e, &d)
	if _, ok := h["Retry-After"]; ok {
		t.Error("Retry-After written in dry-run")
	}
}

func TestDenyBody(t *testing.T) {
	for _, tc := range []struct {
		d    httplimit.Decision
		want string
	}{
		{httplimit.Decision{Window: time.Minute, Result: shardlimit.Result{Limit: 10, RetryAfter: 56100 * time.Millisecond}},
			"Too Many Requests: limit of 10 per 60 s reached; retry in 57 s.\n"},
		{httplimit.Decision{Window: 500 * time.Millisecond, Result: shardlimit.Result{Limit: 2, RetryAfter: time.Millisecond}},
			"Too Many Requests: limit of 2 per 500 ms reached; retry in 1 s.\n"},
		{httplimit.Decision{Window: 7, Cost: 9, Result: shardlimit.Result{Limit: 5, RetryAfter: shardlimit.Never}},
			"Too Many Requests: request cost 9 exceeds the limit of 5 per 7 ns.\n"},
		{httplimit.Decision{Window: time.Hour, Result: shardlimit.Result{Limit: 0, RetryAfter: shardlimit.Never}},
			"Too Many Requests: this client may make no requests here.\n"},
	} {
		if got := string(AppendDenyBody(nil, &Outcome{Decision: tc.d})); got != tc.want {
			t.Errorf("body %q, want %q", got, tc.want)
		}
	}
}

// TestHeaderSelection checks that every HeaderConfig writes the fields it
// names: the zero value the X-RateLimit trio and, on a 429, Retry-After;
// IETF and Verbose add theirs without dropping any; only the Omit fields
// remove.
func TestHeaderSelection(t *testing.T) {
	x := []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
	ietf := []string{"Ratelimit-Policy", "Ratelimit"}
	verbose := []string{"X-Ratelimit-Window-Ms", "X-Ratelimit-Strategy"}
	ra := []string{"Retry-After"}
	cat := func(ls ...[]string) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l...)
		}
		return out
	}
	for _, tc := range []struct {
		hc          httplimit.HeaderConfig
		allow, deny []string
	}{
		{httplimit.HeaderConfig{}, x, cat(x, ra)},
		{httplimit.HeaderConfig{IETF: true}, cat(x, ietf), cat(x, ietf, ra)},
		{httplimit.HeaderConfig{Verbose: true}, cat(x, verbose), cat(x, verbose, ra)},
		{httplimit.HeaderConfig{IETF: true, Verbose: true}, cat(x, ietf, verbose), cat(x, ietf, verbose, ra)},
		{httplimit.HeaderConfig{IETF: true, OmitXRateLimit: true}, ietf, cat(ietf, ra)},
		{httplimit.HeaderConfig{OmitRetryAfter: true}, x, x},
		{httplimit.HeaderConfig{OmitXRateLimit: true, OmitRetryAfter: true}, nil, nil},
	} {
		e := newTestEngine(t, httplimit.Options{
			Rules:   mustParse(t, `{"rules": [{"name": "r", "limit": 1, "window": "1m"}]}`),
			Headers: tc.hc,
		})
		for i, want := range [][]string{tc.allow, tc.deny} {
			d := decide(e, "192.0.2.1", "", "/", 0, 1)
			if d.Action != []httplimit.Action{httplimit.ActionAllow, httplimit.ActionDeny}[i] {
				t.Fatalf("%+v: request %d: %v", tc.hc, i+1, d.Action)
			}
			h := format(t, e, &d)
			for _, name := range want {
				if h.Get(name) == "" {
					t.Errorf("%+v, %v: %s missing", tc.hc, d.Action, name)
				}
			}
			if len(h) != len(want) {
				t.Errorf("%+v, %v: fields %v, want %q", tc.hc, d.Action, h, want)
			}
		}
	}
}

// TestReply checks the one mapping from an action to the answer.
func TestReply(t *testing.T) {
	e := newTestEngine(t, httplimit.Options{
		Rules: mustParse(t, `{"rules": [{"name": "r", "path": "/r", "limit": 1, "window": "1m"}]}`),
	})
	sc := e.GetScratch()
	defer e.PutScratch(sc)
	allow := decide(e, "192.0.2.1", "", "/r", 0, 1)
	deny := decide(e, "192.0.2.1", "", "/r", 0, 1)
	for _, tc := range []struct {
		name   string
		o      Outcome
		hook   bool
		want   Reply
		fields int
	}{
		{"no rule", decide(e, "192.0.2.1", "", "/other", 0, 1), false, Reply{Next: true}, 0},
		{"allow", allow, false, Reply{Next: true}, 3},
		{"deny", deny, false, Reply{Status: 429, Body: []byte("Too Many Requests: limit of 1 per 60 s reached; retry in 60 s.\n")}, 4},
		{"deny, hook", deny, true, Reply{Hook: true}, 4},
		{"bad cost", decide(e, "192.0.2.1", "", "/r", 0, -1), true, Reply{Status: 500, Body: []byte(BodyBadCost)}, 0},
		{"fail closed", Outcome{Decision: httplimit.Decision{Action: httplimit.ActionFailClosed}}, true, Reply{Status: 503, Body: []byte(BodyUnavailable)}, 0},
		{"fail open", Outcome{Decision: httplimit.Decision{Action: httplimit.ActionFailOpen}}, true, Reply{Next: true}, 0},
		{"no identity", Outcome{Decision: httplimit.Decision{Action: httplimit.ActionNoIdentity}}, true, Reply{Status: 400, Body: []byte(BodyNoIdentity)}, 0},
	} {
		got := e.Reply(sc, &tc.o, tc.hook)
		if got.Next != tc.want.Next || got.Hook != tc.want.Hook || got.Status != tc.want.Status || string(got.Body) != string(tc.want.Body) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
		if sc.Fields.Len() != tc.fields {
			t.Errorf("%s: %d fields, want %d", tc.name, sc.Fields.Len(), tc.fields)
		}
	}
}
