package httplimit

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestOutcomeRuleJSON checks that "count" and "cost_header" decode into
// Rule.Count and Rule.CostHeader, and that marshalling gives them back.
func TestOutcomeRuleJSON(t *testing.T) {
	r, err := ParseRules([]byte(`{"rules": [
		{"name": "login", "path": "/login", "limit": 5, "window": "15m", "count": "failed"},
		{"name": "ok", "path": "/ok", "limit": 5, "window": "1m", "count": "successful"},
		{"name": "all", "path": "/all", "limit": 5, "window": "1m", "count": "all"},
		{"name": "llm", "prefix": "/v1", "limits": [{"limit": 1000, "window": "1m"}], "cost_header": "X-Tokens"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		count  CountOutcome
		header string
		settle bool
	}{{CountFailed, "", true}, {CountSuccessful, "", true}, {CountAll, "", false}, {"", "X-Tokens", true}}
	for i, w := range want {
		ru := r.Rules[i]
		if ru.Count != w.count || ru.CostHeader != w.header || ru.Settles() != w.settle {
			t.Errorf("rule %q: count %q, cost header %q, settles %t; want %q, %q, %t",
				ru.Name, ru.Count, ru.CostHeader, ru.Settles(), w.count, w.header, w.settle)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRules(b)
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("round trip: %+v, want %+v", back, r)
	}
	if strings.Contains(string(b), `"count":""`) || strings.Contains(string(b), `"cost_header":""`) {
		t.Errorf("empty fields marshalled: %s", b)
	}
}

// TestOutcomeRuleRefused checks that bad "count" and "cost_header" values,
// in a file and in Go, are refused with errors naming the rule; so are
// "count" given twice (failed and successful: a contradiction), and cost
// headers naming a field the middleware writes or the response needs.
func TestOutcomeRuleRefused(t *testing.T) {
	for _, tc := range []struct {
		rule string
		msgs []string
	}{
		{`"count": "both"`, []string{`rule "r"`, `count "both"`}},
		{`"count": "Failed"`, []string{`rule "r"`, `count "Failed"`}},
		{`"count": "failed", "count": "successful"`, []string{`rule "r"`, "count"}},
		{`"count": 1`, []string{"count"}},
		{`"cost_header": "X Cost"`, []string{`rule "r"`, `cost header "X Cost"`}},
		{`"cost_header": "X-Cost:"`, []string{`rule "r"`, "not a field name"}},
		{`"cost_header": "x-ratelimit-remaining"`, []string{`rule "r"`, "writes"}},
		{`"cost_header": "Retry-After"`, []string{`rule "r"`, "writes"}},
		{`"cost_header": "content-length"`, []string{`rule "r"`, "needs"}},
		{`"shadow": true, "count": "failed"`, []string{`rule "r"`, "shadow rule"}},
		{`"shadow": true, "cost_header": "X-Cost"`, []string{`rule "r"`, "shadow rule"}},
		{`"cost_header": "` + strings.Repeat("x", MaxNameBytes+1) + `"`, []string{`rule "r"`, "MaxNameBytes"}},
	} {
		js := `{"rules": [{"name": "r", "limit": 5, "window": "1m", ` + tc.rule + `}]}`
		_, err := ParseRules([]byte(js))
		wantRefused(t, short(js), err, tc.msgs...)
	}
	for _, ru := range []Rule{
		{Name: "r", Limit: 1, Window: time.Second, Count: "none"},
		{Name: "r", Limit: 1, Window: time.Second, CostHeader: "Set-Cookie"},
		{Name: "r", Limit: 1, Window: time.Second, CostHeader: "bad\nname"},
		{Name: "r", Limit: 1, Window: time.Second, Shadow: true, Count: CountSuccessful},
	} {
		err := (&Rules{Rules: []Rule{ru}}).Validate()
		wantRefused(t, "Go rule", err, `rule "r"`)
	}
}

// TestCountOutcomeCounts checks which responses each CountOutcome counts.
func TestCountOutcomeCounts(t *testing.T) {
	for _, tc := range []struct {
		c             CountOutcome
		failed, other bool
	}{{"", true, true}, {CountAll, true, true}, {CountFailed, true, false}, {CountSuccessful, false, true}} {
		if tc.c.Counts(true) != tc.failed || tc.c.Counts(false) != tc.other {
			t.Errorf("%q: counts failed %t, successful %t; want %t, %t", tc.c, tc.c.Counts(true), tc.c.Counts(false), tc.failed, tc.other)
		}
	}
}
