package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// wantInvalid checks that err wraps ErrInvalidConfig and holds each of want.
func wantInvalid(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Fatalf("%s: %v, want an error wrapping ErrInvalidConfig", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v; want it to say %s", what, err, w)
		}
	}
}

// TestOverridesExpandedBeyondMaxOverrideLimitsRefused: 1,000 rules and
// 1,000 overrides without a rule (a million per-client limits) are
// refused, naming the cap, in a rules file and in Go; overrides naming
// their rule are not multiplied.
func TestOverridesExpandedBeyondMaxOverrideLimitsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"rules": [`)
	for i := range 1000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name": "r%d", "path": "/r%d", "limit": 5, "window": "1m"}`, i, i)
	}
	b.WriteString(`], "overrides": [`)
	for i := range 1000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"ip": "10.0.%d.%d", "limit": 1}`, i/256, i%256)
	}
	b.WriteString(`]}`)
	start := time.Now()
	_, err := ParseRules([]byte(b.String()))
	wantInvalid(t, "1,000 rules x 1,000 rule-less overrides", err, "1000000 per-client limits", "100000 (MaxOverrideLimits)")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("refusing took %v", d)
	}

	r := &Rules{}
	for i := range 1000 {
		r.Rules = append(r.Rules, Rule{Name: fmt.Sprint("r", i), Path: fmt.Sprint("/r", i), Limit: 5, Window: time.Minute})
	}
	for i := range 101 {
		r.Overrides = append(r.Overrides, Override{IP: fmt.Sprintf("10.0.0.%d", i), Limit: 1})
	}
	wantInvalid(t, "Go rules", r.Validate(), "101000 per-client limits", "MaxOverrideLimits")
	r.Overrides = r.Overrides[:100] // exactly the cap
	for i := range 1000 {
		r.Overrides = append(r.Overrides, Override{Rule: "r0", IP: fmt.Sprintf("10.1.%d.%d", i/256, i%256), Limit: 1})
	}
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "101000 per-client limits") {
		t.Errorf("100 x 1000 + 1000: %v, want refused at 101000", err)
	}
	r.Overrides = r.Overrides[:100]
	if err := r.Validate(); err != nil {
		t.Errorf("100 rule-less overrides on 1,000 rules, exactly MaxOverrideLimits: %v", err)
	}
}

// TestRulesFileInvalidUTF8Refused: a rules file holding a byte that is not
// UTF-8 (in a path, a name, an override's id, a tier's client) is refused
// with the byte's offset, not rewritten to U+FFFD; a byte order mark at
// the start is refused with a message of its own.
func TestRulesFileInvalidUTF8Refused(t *testing.T) {
	for _, tc := range []struct{ name, file string }{
		{"path", `{"rules": [{"name": "a", "path": "/caf` + "\xe9" + `", "limit": 1, "window": "1m"}]}`},
		{"name", `{"rules": [{"name": "caf` + "\xe9" + `", "path": "/c", "limit": 1, "window": "1m"}]}`},
		{"override id", `{"rules": [{"name": "a", "path": "/c", "limit": 1, "window": "1m"}], "overrides": [{"id": "x` + "\xff" + `", "limit": 0}]}`},
		{"tier client", `{"rules": [{"name": "a", "path": "/c", "limit": 1, "window": "1m"}], "tiers": [{"name": "t", "clients": ["c` + "\xc3" + `"], "rules": [{"name": "b", "path": "/c", "limit": 1, "window": "1m"}]}]}`},
	} {
		off := strings.IndexFunc(tc.file, func(r rune) bool { return r == '\uFFFD' })
		_, err := ParseRules([]byte(tc.file))
		wantInvalid(t, tc.name, err, "not valid UTF-8", fmt.Sprintf("byte offset %d", off))
	}
	var r Rules
	err := json.Unmarshal([]byte(`{"rules": [{"name": "caf`+"\xe9"+`", "path": "/c", "limit": 1, "window": "1m"}]}`), &r)
	wantInvalid(t, "json.Unmarshal", err, "not valid UTF-8", "byte offset 24")
	_, err = ParseRules([]byte("\ufeff" + `{"rules": [{"name": "a", "path": "/c", "limit": 1, "window": "1m"}]}`))
	wantInvalid(t, "BOM", err, "byte order mark", "not allowed")
}

// TestControlCharactersInNamesAndNonTokenMethodsRefused: rule and tier
// names holding control characters, and methods that are not HTTP tokens,
// are refused naming the rule (or tier), from a file and in Go; an
// unnamed default rule is named by its place.
func TestControlCharactersInNamesAndNonTokenMethodsRefused(t *testing.T) {
	ok := Rule{Name: "ok", Path: "/ok", Limit: 1, Window: time.Minute}
	for _, tc := range []struct {
		name string
		r    Rules
		want []string
	}{
		{"newline in a rule name", Rules{Rules: []Rule{ok, {Name: "a\nb", Path: "/a", Limit: 1, Window: time.Minute}}},
			[]string{`rule "a\nb": name holds control character 0x0a at byte 1`}},
		{"DEL in a rule name", Rules{Rules: []Rule{{Name: "a\x7f", Path: "/a", Limit: 1, Window: time.Minute}}},
			[]string{`rule "a\x7f": name holds control character 0x7f`}},
		{"tab in a tier name", Rules{Rules: []Rule{ok}, Tiers: []Tier{{Name: "gold\t", Rules: []Rule{{Name: "g", Path: "/g", Limit: 1, Window: time.Minute}}}}},
			[]string{`tier "gold\t": name holds control character 0x09`}},
		{"control in a tier rule name", Rules{Rules: []Rule{ok}, Tiers: []Tier{{Name: "gold", Rules: []Rule{{Name: "g\r", Path: "/g", Limit: 1, Window: time.Minute}}}}},
			[]string{`rule "g\r": name holds control character 0x0d`}},
		{"method with a slash", Rules{Rules: []Rule{{Name: "m", Path: "/m", Methods: []string{"GET/1"}, Limit: 1, Window: time.Minute}}},
			[]string{`rule "m": bad method "GET/1": not an HTTP token`}},
		{"method with a NUL", Rules{Rules: []Rule{{Name: "m", Path: "/m", Methods: []string{"GE\x00T"}, Limit: 1, Window: time.Minute}}},
			[]string{`rule "m": bad method "GE\x00T"`}},
		{"method non-ASCII", Rules{Rules: []Rule{{Name: "m", Path: "/m", Methods: []string{"GÉT"}, Limit: 1, Window: time.Minute}}},
			[]string{`rule "m": bad method "GÉT"`}},
		{"unnamed default rule", Rules{Rules: []Rule{ok, {Path: "/a", Limit: 1, Window: time.Minute}}},
			[]string{"rule #2 of the default rules (rules[1]) has no name"}},
		{"unnamed tier rule", Rules{Rules: []Rule{ok}, Tiers: []Tier{{Name: "gold", Rules: []Rule{{Path: "/g", Limit: 1, Window: time.Minute}}}}},
			[]string{`rule #1 of tier "gold" (tiers[0].rules[0]) has no name`}},
	} {
		wantInvalid(t, tc.name+" (Go)", tc.r.Validate(), tc.want...)
		js, err := json.Marshal(tc.r)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseRules(js)
		wantInvalid(t, tc.name+" (file)", err, tc.want...)
	}
	good := Rules{Rules: []Rule{{Name: "m", Path: "/m", Methods: []string{"GET", "M-SEARCH", "X_Y!#$%&'*+.^`|~9"}, Limit: 1, Window: time.Minute}}}
	if err := good.Validate(); err != nil {
		t.Errorf("token methods: %v", err)
	}
}
