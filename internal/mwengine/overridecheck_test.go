package mwengine

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestOverridesOfOneClientKeyRefused: two overrides whose addresses are
// one client key (one IPv6 /64 by default, one IPv4 group under
// KeyConfig.IPv4Prefix) on the same rule, or both on every rule, are
// refused by New and by Reload (which keeps the rules in force), with an
// error naming both overrides and the rule; one on a rule and one on every
// rule, or on two rules, are not in conflict.
func TestOverridesOfOneClientKeyRefused(t *testing.T) {
	const rules = `{"rules": [{"name": "foo", "path": "/foo", "limit": 5, "window": "1m"},
		{"name": "bar", "path": "/bar", "limit": 5, "window": "1m"}], "overrides": [%s]}`
	parse := func(overrides string) *httplimit.Rules {
		return mustParse(t, strings.Replace(rules, "%s", overrides, 1))
	}
	for _, tc := range []struct {
		name      string
		keys      httplimit.KeyConfig
		overrides string
		want      []string // in the error; none: accepted
	}{
		{"ipv6 /64", httplimit.KeyConfig{},
			`{"rule": "foo", "ip": "2001:db8::1", "limit": 0}, {"rule": "foo", "ip": "2001:db8::ffff", "limit": 1000}`,
			[]string{`overrides "2001:db8::1" and "2001:db8::ffff" are one client key under the /64 grouping`, `rule "foo"`}},
		{"every rule", httplimit.KeyConfig{},
			`{"ip": "2001:db8::1", "limit": 0}, {"ip": "2001:db8::2", "limit": 1000}`,
			[]string{`overrides "2001:db8::1" and "2001:db8::2" are one client key under the /64 grouping`, "every rule"}},
		{"ipv4 /24", httplimit.KeyConfig{IPv4Prefix: 24},
			`{"rule": "bar", "ip": "192.0.2.1", "limit": 0}, {"rule": "bar", "ip": "192.0.2.200", "limit": 1000}`,
			[]string{`overrides "192.0.2.1" and "192.0.2.200" are one client key under the /24 grouping`, `rule "bar"`}},
		{"ipv4 /32", httplimit.KeyConfig{},
			`{"rule": "bar", "ip": "192.0.2.1", "limit": 0}, {"rule": "bar", "ip": "192.0.2.200", "limit": 1000}`, nil},
		{"ipv6 /128", httplimit.KeyConfig{IPv6Prefix: 128},
			`{"rule": "foo", "ip": "2001:db8::1", "limit": 0}, {"rule": "foo", "ip": "2001:db8::ffff", "limit": 1000}`, nil},
		{"two rules", httplimit.KeyConfig{},
			`{"rule": "foo", "ip": "2001:db8::1", "limit": 0}, {"rule": "bar", "ip": "2001:db8::ffff", "limit": 1000}`, nil},
		{"a rule and every rule", httplimit.KeyConfig{},
			`{"rule": "foo", "ip": "2001:db8::1", "limit": 0}, {"ip": "2001:db8::ffff", "limit": 1000}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := parse(tc.overrides)
			e, err := New(httplimit.Options{Rules: r, Keys: tc.keys}, false)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				e.Close()
				return
			}
			if err == nil {
				e.Close()
				t.Fatal("New accepted them")
			}
			checkErr(t, "New", err, tc.want)

			// Reload refuses them and keeps the rules in force.
			e = newTestEngine(t, httplimit.Options{Rules: parse(`{"rule": "foo", "ip": "192.0.2.9", "limit": 7}`), Keys: tc.keys})
			checkErr(t, "Reload", e.Reload(r), tc.want)
			if d := decide(e, "192.0.2.9", "", "/foo", 0, 1); d.Result.Limit != 7 {
				t.Errorf("after the refused reload, the override in force gives limit %d, want 7", d.Result.Limit)
			}
		})
	}
}

func checkErr(t *testing.T, what string, err error, want []string) {
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
