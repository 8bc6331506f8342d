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
			got[tier+" "+ru.Path] = lim{ru.Algorithm, ru.Limit, ru.Window}
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
		"client-1 /foo": {shardlimit.FixedWindow, 10, time.Minute},
		"client-1 /bar": {shardlimit.SlidingLog, 5, time.Minute},
		"client-2 /foo": {shardlimit.FixedWindow, 20, time.Minute},
		"client-2 /bar": {shardlimit.SlidingLog, 10, time.Minute},
		" /foo":         {shardlimit.FixedWindow, 5, time.Minute},
		" /bar":         {shardlimit.SlidingLog, 2, time.Minute},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("seed rules %v, want %v", got, want)
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
	r.Overrides = []Override{{Rule: "anon-foo", IP: "203.0.113.7", Limit: 2}, {ID: "x", Limit: 0}}
	r.Rules = append(r.Rules, Rule{Name: "gc", Prefix: "/api/", Methods: []string{"GET"}, Algorithm: shardlimit.GCRA,
		Limit: 7, Window: 1500 * time.Millisecond, Policy: "p"})
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
