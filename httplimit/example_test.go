package httplimit_test

import (
	"errors"
	"fmt"

	"github.com/shardlimit/shardlimit/httplimit"
)

// A rule file must limit something, or say that it does not on purpose.
func ExampleParseRules() {
	r, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "api", "prefix": "/api", "algorithm": "sliding_log", "limit": 100, "window": "1m"}
	]}`))
	fmt.Println(r.NumRules(), r.Rules[0].Algorithm, r.Rules[0].Window, err)

	_, err = httplimit.ParseRules([]byte(`{"rules": []}`))
	fmt.Println(errors.Is(err, httplimit.ErrNoRules))

	r, err = httplimit.ParseRules([]byte(`{"limiting": "off"}`))
	fmt.Println(r.Limiting, r.NumRules(), err)
	// Output:
	// 1 sliding_log 1m0s <nil>
	// true
	// off 0 <nil>
}

// A rule may hold several limits, each over its own window; an override
// may change some of them for one client.
func ExampleParseRules_severalLimits() {
	r, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "baz", "path": "/baz", "policy": "baz", "limits": [
			{"limit": 3, "window": "1s"}, {"limit": 10, "window": "1m"}
		]}
	], "overrides": [
		{"rule": "baz", "id": "batch-job", "limits": [{"limit": 50, "window": "1m"}]}
	]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	baz := r.Rules[0]
	for i, rt := range baz.Rates() {
		fmt.Println(rt.Limit, rt.Window, baz.PolicyNames("")[i])
	}
	fmt.Println(r.Overrides[0].Limits)

	_, err = httplimit.ParseRules([]byte(`{"rules": [
		{"name": "x", "limit": 5, "window": "1m", "limits": [{"limit": 3, "window": "1s"}]}
	]}`))
	fmt.Println(err)
	// Output:
	// 3 1s baz-1s
	// 10 1m0s baz-1m
	// [{50 1m0s }]
	// shardlimit: invalid config: rule "x": both "limit"/"window" and "limits" given; use "limits" alone for several limits
}

// Exempt and deny lists, for the rule set and per rule, and a shadow rule
// tried beside the enforced one; a client both exempt and denied is
// refused, naming the rule and the two entries.
func ExampleParseRules_policies() {
	r, err := httplimit.ParseRules([]byte(`{"rules": [
		{"name": "api", "prefix": "/api", "limit": 100, "window": "1m",
		 "deny": {"networks": ["198.51.100.0/24"]}},
		{"name": "api-try", "prefix": "/api", "limit": 60, "window": "1m", "shadow": true}
	], "exempt": {"clients": ["health-checker"], "networks": ["10.0.0.0/8"]}}`))
	fmt.Println(r.Exempt.Len(), r.Rules[0].Deny.Networks, r.Rules[1].Shadow, err)

	_, err = httplimit.ParseRules([]byte(`{"rules": [
		{"name": "api", "prefix": "/api", "limit": 100, "window": "1m",
		 "deny": {"networks": ["10.1.0.0/16"]}}
	], "exempt": {"networks": ["10.0.0.0/8"]}}`))
	fmt.Println(err)
	// Output:
	// 2 [198.51.100.0/24] true <nil>
	// shardlimit: invalid config: rule "api": exempt network "10.0.0.0/8" (the rule set's) overlaps deny network "10.1.0.0/16" (its own): a client cannot be both exempt and denied
}
