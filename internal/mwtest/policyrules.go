package mwtest

import (
	"fmt"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
)

// ListRules are the allocation tests' rules with policies: rule "open" on
// /open (limit 10^9 a minute) with a shadow rule beside it, exempt and
// deny lists of the rule set holding 10,000 networks in all (10.x.y.0/24
// exempt, 11.x.y.0/24 denied, and IPv6 /48s of 2001:db8 and 2001:db9), and
// the identity "evil" denied. 192.0.2.1 and 2001:db8:ffff::1 are on no
// list.
func ListRules(tb testing.TB) *httplimit.Rules {
	tb.Helper()
	r := &httplimit.Rules{Rules: []httplimit.Rule{
		{Name: "open", Path: "/open", Limit: 1_000_000_000, Window: 60e9},
		{Name: "open-try", Path: "/open", Limit: 1_000_000_000, Window: 3600e9, Shadow: true},
	}}
	for i := range 2500 {
		r.Exempt.Networks = append(r.Exempt.Networks, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), fmt.Sprintf("2001:db8:%x::/48", i))
		r.Deny.Networks = append(r.Deny.Networks, fmt.Sprintf("11.%d.%d.0/24", i/256, i%256), fmt.Sprintf("2001:db9:%x::/48", i))
	}
	r.Deny.Clients = []string{"evil"}
	if err := r.Validate(); err != nil {
		tb.Fatal(err)
	}
	return r
}
