package httplimit

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// TestSeedRulesFile checks that the demo's rule file expresses the seed
// configuration as is.
func TestSeedRulesFile(t *testing.T) {
	r, err := LoadRules("../cmd/shardlimit-demo/rules.json")
	if err != nil {
		t.Fatal(err)
	}
	type lim struct {
		alg    shardlimit.Algorithm
		limit  int
		window time.Duration
	}
	got := map[string]lim{}
	add := func(tier string, rules []Rule) {
		for _, ru := range rules {
			for _, rt := range ru.Rates() {
				mode := ""
				if ru.Shadow {
					mode = " shadow"
				}
				got[tier+" "+ru.Path+" "+rt.Window.String()+mode] = lim{ru.Algorithm, rt.Limit, rt.Window}
			}
		}
	}
	add("", r.Rules)
	for _, tr := range r.Tiers {
		if len(tr.Clients) != 1 {
			t.Fatalf("tier %q clients %q", tr.Name, tr.Clients)
		}
		add(tr.Clients[0], tr.Rules)
	}
	want := map[string]lim{
		"client-1 /foo 1m0s": {shardlimit.FixedWindow, 10, time.Minute},
		"client-1 /bar 1m0s": {shardlimit.SlidingLog, 5, time.Minute},
		"client-2 /foo 1m0s": {shardlimit.FixedWindow, 20, time.Minute},
		"client-2 /bar 1m0s": {shardlimit.SlidingLog, 10, time.Minute},
		" /foo 1m0s":         {shardlimit.FixedWindow, 5, time.Minute},
		" /bar 1m0s":         {shardlimit.SlidingLog, 2, time.Minute},
		// /baz, for every client: 3 a second and 10 a minute.
		" /baz 1s":   {shardlimit.FixedWindow, 3, time.Second},
		" /baz 1m0s": {shardlimit.FixedWindow, 10, time.Minute},
		// /smooth, for every client: GCRA, 6 a minute.
		" /smooth 1m0s": {shardlimit.GCRA, 6, time.Minute},
		// /baz in shadow: 5 a minute, counted beside the enforced rule.
		" /baz 1m0s shadow": {shardlimit.FixedWindow, 5, time.Minute},
		// /login bans, /report caps requests in flight (checked below).
		" /login 1m0s":  {shardlimit.FixedWindow, 3, time.Minute},
		" /report 1m0s": {shardlimit.FixedWindow, 60, time.Minute},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("seed rules %v, want %v", got, want)
	}
	if !reflect.DeepEqual(r.Exempt, ClientList{Networks: []string{"127.0.0.2"}}) ||
		!reflect.DeepEqual(r.Deny, ClientList{Clients: []string{"blocked-client"}, Networks: []string{"127.0.0.3"}}) {
		t.Errorf("seed lists: exempt %+v, deny %+v; want 127.0.0.2 exempt, blocked-client and 127.0.0.3 denied", r.Exempt, r.Deny)
	}
	for _, ru := range r.Rules {
		switch ru.Name {
		case "login":
			if ru.Ban == nil || *ru.Ban != (Ban{After: 3, Within: time.Minute, For: 15 * time.Minute, Growth: 2, Max: 24 * time.Hour}) {
				t.Errorf("login's ban %+v", ru.Ban)
			}
		case "report":
			if ru.Concurrency == nil || *ru.Concurrency != (Concurrency{Limit: 2, Status: 503, RetryAfter: time.Second}) {
				t.Errorf("report's concurrency %+v", ru.Concurrency)
			}
		}
	}
}

func TestRulesJSONRoundTrip(t *testing.T) {
	b, err := os.ReadFile("../cmd/shardlimit-demo/rules.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRules(b)
	if err != nil {
		t.Fatal(err)
	}
	r.Rules = append(r.Rules, Rule{Name: "gc", Prefix: "/api/", Methods: []string{"GET"}, Algorithm: shardlimit.GCRA,
		Limit: 7, Window: 1500 * time.Millisecond, Policy: "p"})
	r.Rules = append(r.Rules, Rule{Name: "multi", Path: "/m", Algorithm: shardlimit.SlidingLog,
		Limits: []Rate{{Limit: 3, Window: time.Second, Policy: "burst"}, {Limit: 0, Window: time.Hour}}})
	r.Overrides = []Override{{Rule: "anon-foo", IP: "203.0.113.7", Limit: 2}, {ID: "x", Limit: 0},
		{Rule: "multi", ID: "y", Limits: []Rate{{Limit: 9, Window: time.Hour}}}}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRules(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(r, back) {
		t.Errorf("round trip changed the rules:\n%+v\n%+v", r, back)
	}
}

// TestRulesErrors checks that every bad rule file is refused with
// ErrInvalidConfig and a message naming the problem.
func TestRulesErrors(t *testing.T) {
	rule := func(extra string) string {
		return `{"rules": [{"name": "a", "path": "/a", "limit": 1, "window": "1m"` + extra + `}]}`
	}
	multi := func(limits, extra string) string {
		return `{"rules": [{"name": "m", "path": "/m", "limits": [` + limits + `]` + extra + `}]}`
	}
	for _, tc := range []struct{ js, msg string }{
		{`{"rules": [{"name": "a", "path": "/a", "window": "1m"}]}`, "missing limit"},
		{`{"rules": [{"name": "a", "path": "/a", "limit": 1}]}`, "missing window"},
		{rule(`, "windw": "1m"`), "unknown field"},
		{`{"rulez": []}`, "unknown field"},
		{rule(`}], "tiers": [{"name": "t", "clientz": []`), "unknown field"},
		{rule(`, "algorithm": "leaky"`), "unknown algorithm"},
		{`{"rules": [{"name": "a", "limit": 1, "window": "60"}]}`, "window"},
		{`{"rules": [{"name": "a", "limit": 1, "window": "-1s"}]}`, "window"},
		{`{"rules": [{"name": "a", "limit": 1, "window": "100000h"}]}`, "window"},
		{`{"rules": [{"name": "a", "limit": -1, "window": "1s"}]}`, "limit -1"},
		{`{"rules": [{"name": "a", "limit": 20000000, "algorithm": "sliding_log", "window": "1s"}]}`, "limit 20000000"},
		{rule(`, "prefix": "/b"`), "both path and prefix"},
		{`{"rules": [{"name": "a", "path": "a", "limit": 1, "window": "1s"}]}`, "does not start with /"},
		{`{"rules": [{"name": "", "limit": 1, "window": "1s"}]}`, "no name"},
		{`{"rules": [{"name": "a", "limit": 1, "window": "1s"}, {"name": "a", "path": "/b", "limit": 1, "window": "1s"}]}`, "used twice"},
		{`{"rules": [{"name": "a", "path": "/x", "limit": 1, "window": "1s"}, {"name": "b", "path": "/x", "limit": 1, "window": "1s"}]}`, "same route"},
		{`{"rules": [{"name": "a", "path": "/x", "methods": ["GET"], "limit": 1, "window": "1s"}, {"name": "b", "path": "/x", "methods": ["get"], "limit": 1, "window": "1s"}]}`, "same route and method"},
		{rule(`, "methods": ["GET POST"]`), "bad method"},
		{rule(`, "policy": "caf\u00e9"`), "printable ASCII"},
		{rule(`, "buckets": -1`), "buckets"},
		{rule("") + `x`, "trailing data"},
		{`{"rules": [`, "unexpected EOF"},
		{rule("") + `{}`, "trailing data"},
		{`{}`, "no rules"},
		{`{"rules": []}`, "no rules"},
		{`{"rules": [], "tiers": [{"name": "t", "clients": ["c"], "rules": []}]}`, "no rules"},
		{`{"limiting": "on"}`, "no rules"},
		{`{"limiting": "of"}`, "limiting"},
		{`{"limiting": "off", "rules": [{"name": "a", "limit": 1, "window": "1s"}]}`, "limiting is off"},
		{`{"limiting": "off", "tiers": [{"name": "t", "rules": []}]}`, "limiting is off"},
		{`{"rules": [{"name": "a", "limit": 1, "window": "1s"}], "tiers": [{"name": "", "rules": []}]}`, "no name"},
		{rule(`}], "tiers": [{"name": "t", "rules": []}, {"name": "t", "rules": []`), "used twice"},
		{rule(`}], "tiers": [{"name": "t", "clients": ["c"], "rules": []}, {"name": "u", "clients": ["c"], "rules": []`), "already in tier"},
		{rule(`}], "tiers": [{"name": "t", "clients": [""], "rules": []`), "empty client"},
		{rule(`}], "tiers": [{"name": "t", "networks": ["10.0.0.0/99"], "rules": []`), "network"},
		{rule(`}], "overrides": [{"rule": "a", "limit": 1`), "exactly one of id and ip"},
		{rule(`}], "overrides": [{"rule": "a", "id": "x", "ip": "1.2.3.4", "limit": 1`), "exactly one of id and ip"},
		{rule(`}], "overrides": [{"rule": "a", "ip": "1.2.3", "limit": 1`), "override"},
		{rule(`}], "overrides": [{"rule": "b", "id": "x", "limit": 1`), `no rule "b"`},
		{rule(`}], "overrides": [{"rule": "a", "id": "x"`), "missing limit"},
		{rule(`}], "overrides": [{"rule": "a", "id": "x", "limit": -2`), "limit -2"},
		{rule(`}], "overrides": [{"id": "x", "limit": -2`), "limit -2"},
		{rule(`}], "overrides": [{"rule": "a", "ip": "::ffff:1.2.3.4", "limit": 1}, {"rule": "a", "ip": "1.2.3.4", "limit": 2`), "listed twice"},

		// Several limits per rule.
		{multi(`{"limit": 1, "window": "1s"}`, `, "limit": 1, "window": "1m"`), `rule "m": both "limit"/"window" and "limits" given`},
		{multi(`{"limit": 1, "window": "1s"}`, `, "window": "1m"`), `rule "m": both`},
		{multi(``, ``), `rule "m": "limits" is empty`},
		{multi(`{"window": "1s"}`, ``), `rule "m": a limit in "limits" has no "limit"`},
		{multi(`{"limit": 1}`, ``), `rule "m": a limit in "limits" has no "window"`},
		{multi(`{"limit": 1, "window": "1s", "windw": "1m"}`, ``), "unknown field"},
		{multi(`{"limit": 1, "window": "1 s"}`, ``), `rule "m": window`},
		{multi(`{"limit": 1, "window": "0s"}`, ``), `rule "m": window 0s outside`},
		{multi(`{"limit": -1, "window": "1s"}`, ``), `rule "m": limit -1`},
		{multi(`{"limit": 1, "window": "1s"}, {"limit": 2, "window": "1000ms"}`, ``), `rule "m": window 1s given twice`},
		{multi(`{"limit": 1, "window": "1s"}, {"limit": 2, "window": "2s"}, {"limit": 3, "window": "3s"}, {"limit": 4, "window": "4s"}, {"limit": 5, "window": "5s"}`, ``),
			`rule "m": 5 limits, at most 4`},
		{multi(`{"limit": 1, "window": "1s", "policy": "caf\u00e9"}`, ``), "printable ASCII"},
		{multi(`{"limit": 1, "window": "1s", "policy": "p"}, {"limit": 2, "window": "1m", "policy": "p"}`, ``), `rule "m": policy name "p" names two of its limits`},
		{multi(`{"limit": 1, "window": "1s", "policy": "m-1m"}, {"limit": 2, "window": "1m"}`, ``), `policy name "m-1m" names two`},
		{multi(`{"limit": 1, "window": "1s"}, {"limit": 2, "window": "1m"}`, `}], "overrides": [{"rule": "m", "id": "x", "limit": 3`),
			`override "x" on rule "m": limit 3 on a rule of 2 limits (windows [1s 1m0s]): give "limits" per window`},
		{multi(`{"limit": 1, "window": "1s"}, {"limit": 2, "window": "1m"}`, `}], "overrides": [{"id": "x", "limit": 3`),
			`override "x" on rule "m": limit 3 on a rule of 2 limits`},
		{multi(`{"limit": 1, "window": "1s"}`, `}], "overrides": [{"rule": "m", "id": "x", "limit": 1, "limits": [{"limit": 1, "window": "1s"}]`),
			`override "x": both "limit" and "limits" given`},
		{multi(`{"limit": 1, "window": "1s"}`, `}], "overrides": [{"id": "x", "limits": [{"limit": 1, "window": "1s"}]`),
			`override "x": limits per window need a rule`},
		{multi(`{"limit": 1, "window": "1s"}`, `}], "overrides": [{"rule": "m", "id": "x", "limits": [{"limit": 1, "window": "1h"}]`),
			`override "x" on rule "m": the rule has no 1h0m0s window (its windows: [1s])`},
		{multi(`{"limit": 1, "window": "1s"}`, `}], "overrides": [{"rule": "m", "id": "x", "limits": [{"limit": 1, "window": "1s"}, {"limit": 2, "window": "1s"}]`),
			`window 1s given twice`},
		{multi(`{"limit": 1, "window": "1s"}`, `}], "overrides": [{"rule": "m", "id": "x", "limits": [{"limit": -1, "window": "1s"}]`),
			`override "x" on rule "m": limit -1`},
		{multi(`{"limit": 1, "window": "1s"}`, `}], "overrides": [{"rule": "m", "id": "x", "limits": [{"limit": 1, "window": "1s", "policy": "p"}]`),
			`policy names belong to the rule's limits`},
		{multi(`{"limit": 1, "window": "1s"}`, `}], "overrides": [{"rule": "m", "id": "x", "limits": []`), `override "x": "limits" is empty`},
		{multi(`{"limit": 1, "window": "1s"}`, `}], "overrides": [{"rule": "m", "id": "x", "limits": [{"limit": 1}]`), `override "x": a limit in "limits" has no "window"`},
	} {
		_, err := ParseRules([]byte(tc.js))
		if err == nil {
			t.Errorf("%s: accepted", tc.js)
			continue
		}
		if !errors.Is(err, shardlimit.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %q, want ErrInvalidConfig mentioning %q", tc.js, err, tc.msg)
		}
	}
}

// TestNoRules checks that a rule set without rules is refused with
// ErrNoRules unless it says that limiting is off, and that the off form
// round-trips through JSON.
func TestNoRules(t *testing.T) {
	for _, js := range []string{``, " \n", `{}`, `{"rules": []}`, `{"rules": null, "overrides": []}`, "{\n}\n"} {
		_, err := ParseRules([]byte(js))
		if !errors.Is(err, ErrNoRules) || !errors.Is(err, shardlimit.ErrInvalidConfig) || !strings.Contains(err.Error(), `"limiting": "off"`) {
			t.Errorf("%q: %v, want ErrNoRules and ErrInvalidConfig, saying how to turn limiting off", js, err)
		}
	}
	if err := (&Rules{}).Validate(); !errors.Is(err, ErrNoRules) {
		t.Errorf("Rules{}.Validate() = %v", err)
	}
	r, err := ParseRules([]byte(`{"limiting": "off"}`))
	if err != nil || r.Limiting != LimitingOff || r.NumRules() != 0 {
		t.Fatalf("limiting off: %+v, %v", r, err)
	}
	b, err := json.Marshal(r)
	if err != nil || string(b) != `{"limiting":"off"}` {
		t.Errorf("marshalled %s, %v", b, err)
	}
	if err := (&Options{}).Validate(); !errors.Is(err, ErrNoRules) || !strings.Contains(err.Error(), "Options.Rules is nil") {
		t.Errorf("Options without rules: %v", err)
	}
	if err := (&Options{Rules: &Rules{Limiting: LimitingOff}}).Validate(); err != nil {
		t.Errorf("Options with limiting off: %v", err)
	}
}

// TestSeveralLimits checks a rule of several limits and an override per
// window in JSON, their Go form, and that Limits and Limit are exclusive
// in Go too.
func TestSeveralLimits(t *testing.T) {
	r, err := ParseRules([]byte(`{"rules": [
		{"name": "baz", "path": "/baz", "algorithm": "fixed_window", "limits": [
			{"limit": 10, "window": "1m"}, {"limit": 3, "window": "1s", "policy": "burst"}
		]},
		{"name": "one", "path": "/one", "limits": [{"limit": 5, "window": "1h"}]}
	], "overrides": [
		{"rule": "baz", "id": "batch", "limits": [{"limit": 50, "window": "1m"}]},
		{"rule": "baz", "ip": "192.0.2.1", "limit": 0},
		{"id": "blocked", "limit": 0}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Rate{{Limit: 10, Window: time.Minute}, {Limit: 3, Window: time.Second, Policy: "burst"}}
	if got := r.Rules[0]; !reflect.DeepEqual(got.Limits, want) || got.Limit != 0 || got.Window != 0 {
		t.Errorf("rule %+v, want Limits %+v", got, want)
	}
	if got := r.Rules[0].Rates(); !reflect.DeepEqual(got, want) {
		t.Errorf("Rates() = %+v", got)
	}
	if got, want := r.Overrides[0].Limits, []Rate{{Limit: 50, Window: time.Minute}}; !reflect.DeepEqual(got, want) {
		t.Errorf("override limits %+v, want %+v", got, want)
	}
	if got, want := r.Rules[1].PolicyNames(""), []string{"one"}; !reflect.DeepEqual(got, want) {
		t.Errorf("one-entry limits: policy names %q, want %q", got, want)
	}
	// Go values: one form or the other.
	for _, ru := range []Rule{
		{Name: "a", Limit: 1, Limits: []Rate{{Limit: 1, Window: time.Second}}},
		{Name: "a", Window: time.Second, Limits: []Rate{{Limit: 1, Window: time.Second}}},
	} {
		err := (&Rules{Rules: []Rule{ru}}).Validate()
		if !errors.Is(err, shardlimit.ErrInvalidConfig) || !strings.Contains(err.Error(), `rule "a": both limit and window, and limits, set`) {
			t.Errorf("%+v: %v", ru, err)
		}
	}
	ov := &Rules{Rules: []Rule{{Name: "a", Limits: []Rate{{Limit: 1, Window: time.Second}}}},
		Overrides: []Override{{Rule: "a", ID: "x", Limit: 2, Limits: []Rate{{Limit: 1, Window: time.Second}}}}}
	if err := ov.Validate(); !errors.Is(err, shardlimit.ErrInvalidConfig) || !strings.Contains(err.Error(), "both limit and limits") {
		t.Errorf("override with both forms: %v", err)
	}
}

// TestPolicyNames checks the IETF names of a rule's limits.
func TestPolicyNames(t *testing.T) {
	rates := func(ws ...time.Duration) []Rate {
		var out []Rate
		for _, w := range ws {
			out = append(out, Rate{Limit: 1, Window: w})
		}
		return out
	}
	for _, tc := range []struct {
		ru   Rule
		def  string
		want []string
	}{
		{Rule{Limit: 1, Window: time.Minute}, "", []string{"default"}},
		{Rule{Limit: 1, Window: time.Minute}, "api", []string{"api"}},
		{Rule{Limit: 1, Window: time.Minute, Policy: "p"}, "api", []string{"p"}},
		{Rule{Limits: rates(time.Second, time.Minute)}, "", []string{"default-1s", "default-1m"}},
		{Rule{Limits: rates(time.Second, time.Minute), Policy: "baz"}, "api", []string{"baz-1s", "baz-1m"}},
		{Rule{Limits: rates(90*time.Second, 24*time.Hour, 1500*time.Millisecond, time.Microsecond, 3)}, "x",
			[]string{"x-90s", "x-24h", "x-1500ms", "x-1us", "x-3ns"}},
		{Rule{Limits: []Rate{{Limit: 1, Window: time.Second, Policy: "burst"}, {Limit: 1, Window: time.Hour}}}, "",
			[]string{"burst", "default-1h"}},
		// A named rule is named after its name, unless a policy name is
		// configured, its own or the middleware's.
		{Rule{Name: "foo", Limit: 1, Window: time.Minute}, "", []string{"foo"}},
		{Rule{Name: "foo", Limit: 1, Window: time.Minute}, "api", []string{"api"}},
		{Rule{Name: "foo", Limit: 1, Window: time.Minute, Policy: "p"}, "", []string{"p"}},
		{Rule{Name: "baz", Limits: rates(time.Second, time.Minute)}, "", []string{"baz-1s", "baz-1m"}},
		{Rule{Name: "baz", Limits: []Rate{{Limit: 1, Window: time.Second, Policy: "burst"}, {Limit: 1, Window: time.Hour}}}, "",
			[]string{"burst", "baz-1h"}},
		{Rule{Name: "caf\u00e9 50%", Limit: 1, Window: time.Minute}, "", []string{"caf%C3%A9 50%25"}},
	} {
		if got := tc.ru.PolicyNames(tc.def); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v.PolicyNames(%q) = %q, want %q", tc.ru, tc.def, got, tc.want)
		}
	}
	// Names are checked with the middleware's PolicyName: "x-1s" is only
	// a collision under PolicyName "x".
	r := &Rules{Rules: []Rule{{Name: "a", Limits: []Rate{
		{Limit: 1, Window: time.Second}, {Limit: 1, Window: time.Minute, Policy: "x-1s"}}}}}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	o := Options{Rules: r, Headers: HeaderConfig{PolicyName: "x"}}
	if err := o.Validate(); !errors.Is(err, shardlimit.ErrInvalidConfig) || !strings.Contains(err.Error(), `rule "a": policy name "x-1s" names two`) {
		t.Errorf("Options.Validate: %v", err)
	}
}

// TestPolicyNameOf checks that a rule's name becomes a printable ASCII
// policy name, as is when it is one, and that distinct names stay
// distinct.
func TestPolicyNameOf(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"foo", "foo"},
		{"client-1-foo", "client-1-foo"},
		{`a "quoted" \ name`, `a "quoted" \ name`}, // written escaped in the sf-string
		{"caf\u00e9", "caf%C3%A9"},
		{"50%", "50%25"},
		{"50%25", "50%2525"},
		{"tab\there", "tab%09here"},
		{"nul\x00\x7f\xff", "nul%00%7F%FF"},
		{"", ""},
	} {
		got := PolicyNameOf(tc.name)
		if got != tc.want {
			t.Errorf("PolicyNameOf(%q) = %q, want %q", tc.name, got, tc.want)
		}
		if err := checkPolicyName(got); err != nil {
			t.Errorf("PolicyNameOf(%q) = %q: %v", tc.name, got, err)
		}
	}
	if PolicyNameOf("50%") == PolicyNameOf("50%25") || PolicyNameOf("\u00e9") == PolicyNameOf("%C3%A9") {
		t.Error("distinct names give one policy name")
	}
}

// TestRulesWithoutPolicyGetDistinctPolicyNames checks that two rules
// without a policy name validate and are named after their names, not
// both "default".
func TestRulesWithoutPolicyGetDistinctPolicyNames(t *testing.T) {
	r, err := ParseRules([]byte(`{"rules": [
		{"name": "foo", "path": "/foo", "limit": 5, "window": "1m"},
		{"name": "bar", "path": "/bar", "limit": 2, "window": "1m"},
		{"name": "b\u00e4z", "path": "/baz", "limits": [{"limit": 3, "window": "1s"}, {"limit": 10, "window": "1m"}]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ru := range r.Rules {
		got = append(got, ru.PolicyNames("")...)
	}
	if want := []string{"foo", "bar", "b%C3%A4z-1s", "b%C3%A4z-1m"}; !reflect.DeepEqual(got, want) {
		t.Errorf("policy names %q, want %q", got, want)
	}
}
