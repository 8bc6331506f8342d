package httplimit

import (
	"errors"
	"testing"

	"github.com/shardlimit/shardlimit"
)

func TestOptionsValidate(t *testing.T) {
	rules, err := ParseRules([]byte(`{"rules": [{"name": "r", "limit": 1, "window": "1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	big, err := ParseRules([]byte(`{"rules": [{"name": "r", "limit": 20000000, "window": "1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{Rules: rules}, {Rules: rules, TopDenied: -1}, {Rules: rules, TopDenied: MaxTopDenied}} {
		if err := o.Validate(); err != nil {
			t.Fatalf("valid options %+v: %v", o, err)
		}
	}
	for _, o := range []Options{
		{Rules: rules, Headers: HeaderConfig{PolicyName: "caf\u00e9"}},
		{Rules: rules, DefaultAlgorithm: 9},
		{Rules: rules, OnError: 7},
		{Rules: rules, TopDenied: MaxTopDenied + 1},
		{Rules: big, DefaultAlgorithm: shardlimit.SlidingLog},
		{Rules: rules, Keys: KeyConfig{MaxKeyBytes: -1}},
		{Rules: rules, Keys: KeyConfig{MaxKeyBytes: MaxKeyBytesLimit + 1}},
		{Rules: rules, Keys: KeyConfig{IPv4Prefix: 33}},
		{Rules: rules, Keys: KeyConfig{IPv4Prefix: -1}},
		{Rules: rules, Keys: KeyConfig{IPv6Prefix: 129}},
		{Rules: rules, Keys: KeyConfig{TrustedProxies: []string{"10.0.0.0/33"}}},
		{Rules: rules, Keys: KeyConfig{TrustedProxies: []string{"nope"}}},
		{Rules: rules, Keys: KeyConfig{TrustedProxies: []string{"::ffff:0:0/80"}}},
		{Rules: rules, Keys: KeyConfig{Header: "X Client"}},
		{Rules: rules, Keys: KeyConfig{EmptyKey: 9}},
		{Rules: rules, Keys: KeyConfig{UnknownIdentity: 2}},
		{Rules: rules, Keys: KeyConfig{ForwardedHeader: "Forwarded"}},
		{Rules: rules, Keys: KeyConfig{ForwardedHeader: "X-Forwarded-Host"}},
		{Rules: rules, Keys: KeyConfig{ForwardedHeader: "CF-Connecting-IP"}},
	} {
		if err := o.Validate(); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", o, err)
		}
	}
}

// TestEnumStrings checks that every enum prints as a name, and an
// unknown value as its type and number.
func TestEnumStrings(t *testing.T) {
	for _, tc := range []struct {
		v    interface{ String() string }
		want string
	}{
		{ActionNoRule, "no_rule"}, {ActionAllow, "allow"}, {ActionDeny, "deny"},
		{ActionDryRunDeny, "dry_run_deny"}, {ActionBadCost, "bad_cost"}, {ActionNoIdentity, "no_identity"},
		{ActionFailClosed, "fail_closed"}, {ActionFailOpen, "fail_open"},
		{ActionExempt, "exempt"}, {ActionDenyListed, "deny_listed"},
		{ActionBanned, "banned"}, {ActionTooManyInFlight, "too_many_in_flight"}, {Action(200), "Action(200)"},
		{FailClosed, "fail_closed"}, {FailOpen, "fail_open"}, {ErrorPolicy(2), "ErrorPolicy(2)"},
		{EmptyKeyUseIP, "use_ip"}, {EmptyKeyShared, "shared"}, {EmptyKeyReject, "reject"},
		{UnknownIdentityAnonymous, "anonymous"}, {UnknownIdentityOwnKey, "own_key"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.v, got, tc.want)
		}
	}
}
