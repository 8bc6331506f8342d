package httplimit

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit/internal/netprefix"
)

// TestPolicyJSONRoundTrip checks that lists and shadow rules decode from
// their JSON form and survive a round trip through MarshalJSON.
func TestPolicyJSONRoundTrip(t *testing.T) {
	js := `{"rules": [
		{"name": "foo", "path": "/foo", "limit": 5, "window": "1m",
		 "exempt": {"clients": ["ops"]}, "deny": {"networks": ["198.51.100.0/24"]}},
		{"name": "foo-try", "path": "/foo", "limit": 2, "window": "1m", "shadow": true}
	], "exempt": {"clients": ["health"], "networks": ["10.0.0.0/8", "2001:db8::1"]},
	   "deny": {"clients": ["evil"]}}`
	r, err := ParseRules([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	want := Rules{
		Rules: []Rule{
			{Name: "foo", Path: "/foo", Limit: 5, Window: 60e9,
				Exempt: ClientList{Clients: []string{"ops"}}, Deny: ClientList{Networks: []string{"198.51.100.0/24"}}},
			{Name: "foo-try", Path: "/foo", Limit: 2, Window: 60e9, Shadow: true},
		},
		Exempt: ClientList{Clients: []string{"health"}, Networks: []string{"10.0.0.0/8", "2001:db8::1"}},
		Deny:   ClientList{Clients: []string{"evil"}},
	}
	if !reflect.DeepEqual(*r, want) {
		t.Fatalf("parsed %+v\nwant %+v", *r, want)
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
		t.Errorf("round trip %s gave %+v, want %+v", b, back, r)
	}
	plain, _ := json.Marshal(Rules{Rules: []Rule{{Name: "a", Limit: 1, Window: 60e9}}})
	if strings.Contains(string(plain), "exempt") || strings.Contains(string(plain), "shadow") {
		t.Errorf("rules without policies marshal as %s, want no policy fields", plain)
	}
}

// TestPolicyErrors checks that every bad list, contradiction and shadow
// route clash is refused with an error naming the rule (or the rule set)
// and what is wrong, and that the combinations allowed are.
func TestPolicyErrors(t *testing.T) {
	rule := func(extra string) string {
		return `{"name": "foo", "path": "/foo", "limit": 1, "window": "1m"` + extra + `}`
	}
	for _, tc := range []struct {
		js   string
		msgs []string // empty: accepted
	}{
		// Each list alone.
		{`{"rules": [` + rule(`, "exempt": {"clients": [""]}`) + `]}`, []string{`rule "foo"`, "empty client in the exempt list"}},
		{`{"rules": [` + rule(`, "deny": {"networks": ["10.0.0.0/33"]}`) + `]}`, []string{`rule "foo"`, `deny network "10.0.0.0/33"`}},
		{`{"rules": [` + rule(``) + `], "deny": {"networks": ["nope"]}}`, []string{"rule set", `deny network "nope"`}},
		{`{"rules": [` + rule(`, "exempt": {"client": ["x"]}`) + `]}`, []string{`unknown field "client"`}},
		{`{"rules": [` + rule(`, "shadow": "yes"`) + `]}`, []string{"shadow"}},
		// Contradictions: identities.
		{`{"rules": [` + rule(``) + `], "exempt": {"clients": ["a"]}, "deny": {"clients": ["a"]}}`,
			[]string{"rule set", `client "a" is both exempt (the rule set's) and denied (the rule set's)`}},
		{`{"rules": [` + rule(`, "exempt": {"clients": ["a"]}, "deny": {"clients": ["a"]}`) + `]}`,
			[]string{`rule "foo"`, `client "a" is both exempt (its own) and denied (its own)`}},
		{`{"rules": [` + rule(`, "exempt": {"clients": ["a"]}`) + `], "deny": {"clients": ["a"]}}`,
			[]string{`rule "foo"`, `exempt (its own) and denied (the rule set's)`}},
		{`{"rules": [` + rule(`, "deny": {"clients": ["a"]}`) + `], "exempt": {"clients": ["a"]}}`,
			[]string{`rule "foo"`, `exempt (the rule set's) and denied (its own)`}},
		// Contradictions: networks that share an address, either way round,
		// mapped or not.
		{`{"rules": [` + rule(``) + `], "exempt": {"networks": ["10.1.2.3"]}, "deny": {"networks": ["10.0.0.0/8"]}}`,
			[]string{`exempt network "10.1.2.3"`, `overlaps deny network "10.0.0.0/8"`}},
		{`{"rules": [` + rule(`, "exempt": {"networks": ["2001:db8::/32"]}, "deny": {"networks": ["2001:db8:1::/48"]}`) + `]}`,
			[]string{`rule "foo"`, `exempt network "2001:db8::/32" (its own) overlaps deny network "2001:db8:1::/48" (its own)`}},
		{`{"rules": [` + rule(`, "exempt": {"networks": ["::ffff:10.0.0.1"]}`) + `], "deny": {"networks": ["10.0.0.0/24"]}}`,
			[]string{`rule "foo"`, `overlaps deny network "10.0.0.0/24" (the rule set's)`}},
		{`{"rules": [` + rule(`, "shadow": true`) + `,` + strings.Replace(rule(`, "shadow": true`), "foo", "foo2", 1) + `]}`,
			[]string{`rule "foo2": same route as rule "foo"`}},
		{`{"limiting": "off", "deny": {"clients": ["a"]}}`, []string{"limiting is off"}},

		// Accepted: disjoint networks, lists of different rules, IPv4
		// beside ::/0, a shadow rule beside an enforced one of its route,
		// or alone.
		{`{"rules": [` + rule(``) + `], "exempt": {"networks": ["10.0.0.0/8"]}, "deny": {"networks": ["11.0.0.0/8", "::/0"]}}`, nil},
		{`{"rules": [` + rule(`, "exempt": {"clients": ["a"]}`) + `,` + strings.Replace(rule(`, "deny": {"clients": ["a"]}`), `"foo", "path": "/foo"`, `"bar", "path": "/bar"`, 1) + `]}`, nil},
		{`{"rules": [` + rule(``) + `,` + strings.Replace(rule(`, "shadow": true`), `"foo"`, `"foo-try"`, 1) + `]}`, nil},
		{`{"rules": [` + rule(`, "shadow": true`) + `]}`, nil},
	} {
		_, err := ParseRules([]byte(tc.js))
		if len(tc.msgs) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want accepted", short(tc.js), err)
			}
			continue
		}
		wantRefused(t, short(tc.js), err, tc.msgs...)
	}
}

// TestPolicyValidateInGo checks that rules built in Go are held to the
// same checks, and that a large list of networks is checked quickly
// enough for a test (the overlap check is O(n log n), not pairwise).
func TestPolicyValidateInGo(t *testing.T) {
	r := &Rules{Rules: []Rule{{Name: "foo", Limit: 1, Window: 60e9, Deny: ClientList{Networks: []string{"10.0.0.0/8"}}}},
		Tiers: []Tier{{Name: "t", Rules: []Rule{{Name: "t-foo", Limit: 1, Window: 60e9, Exempt: ClientList{Networks: []string{"10.9.9.9"}}}}}},
	}
	if err := r.Validate(); err != nil {
		t.Errorf("lists of two rules: %v, want accepted", err)
	}
	r.Exempt = ClientList{Networks: []string{"10.2.0.0/16"}}
	wantRefused(t, "exempt inside a rule's deny", r.Validate(), `rule "foo"`, `exempt network "10.2.0.0/16" (the rule set's)`)

	var ex, de ClientList
	for i := range 10_000 {
		ex.Networks = append(ex.Networks, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
		de.Networks = append(de.Networks, fmt.Sprintf("11.%d.%d.0/24", i/256, i%256))
	}
	big := &Rules{Rules: []Rule{{Name: "foo", Limit: 1, Window: 60e9}}, Exempt: ex, Deny: de}
	if err := big.Validate(); err != nil {
		t.Fatal(err)
	}
	big.Deny.Networks = append(big.Deny.Networks, "10.39.15.7")
	wantRefused(t, "one overlap among 20,000", big.Validate(), `exempt network "10.39.15.0/24"`, `deny network "10.39.15.7"`)
}

// TestPolicyFileCap checks MaxListEntries in a rules file.
func TestPolicyFileCap(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"rules": [{"name": "foo", "limit": 1, "window": "1m"}], "deny": {"clients": [`)
	for i := range MaxListEntries + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"c%d"`, i)
	}
	b.WriteString(`]}}`)
	_, err := ParseRules([]byte(b.String()))
	wantRefused(t, "too many entries", err, "MaxListEntries")
}

// TestErrorStatusOf checks the error hook's mapping.
func TestErrorStatusOf(t *testing.T) {
	for in, want := range map[int]struct {
		code int
		pass bool
	}{ErrorPass: {0, true}, 429: {429, false}, 503: {503, false}, 400: {400, false}, 599: {599, false},
		200: {503, false}, 302: {503, false}, -1: {503, false}, 600: {503, false}} {
		if code, pass := ErrorStatusOf(in); code != want.code || pass != want.pass {
			t.Errorf("ErrorStatusOf(%d) = %d, %v; want %d, %v", in, code, pass, want.code, want.pass)
		}
	}
}

// TestExemptDenyOverlapMatchesReference checks the overlap check (a sorted
// range table per list) against the naive pairwise one on random lists of
// nesting and disjoint networks, IPv4, IPv6 and IPv4-mapped.
func TestExemptDenyOverlapMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	net := func() string {
		switch r.IntN(3) {
		case 0:
			return fmt.Sprintf("10.%d.%d.0/%d", r.IntN(3), r.IntN(4), 14+r.IntN(11))
		case 1:
			return fmt.Sprintf("::ffff:10.%d.%d.%d/%d", r.IntN(3), r.IntN(4), r.IntN(256), 110+r.IntN(19))
		}
		return fmt.Sprintf("2001:db8:%x::/%d", r.IntN(4), 30+r.IntN(20))
	}
	for round := range 500 {
		var e, d ClientList
		for range r.IntN(6) {
			e.Networks = append(e.Networks, net())
		}
		for range r.IntN(6) {
			d.Networks = append(d.Networks, net())
		}
		want := false
		for _, a := range e.Networks {
			for _, b := range d.Networks {
				pa, _ := netprefix.Parse(a)
				pb, _ := netprefix.Parse(b)
				want = want || pa.Overlaps(pb)
			}
		}
		pe, err1 := parseList("t", "exempt", e)
		pd, err2 := parseList("t", "deny", d)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if got := checkExemptDeny("t", pe, "x", pd, "y") != nil; got != want {
			t.Fatalf("round %d: exempt %v, deny %v: refused %v, want %v", round, e.Networks, d.Networks, got, want)
		}
	}
}
