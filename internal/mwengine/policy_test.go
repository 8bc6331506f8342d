package mwengine

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// bigLists returns rules with a rule set's exempt list and deny list of
// 5,000 IPv4 and IPv6 networks each (10,000 in all), a deny list of 100
// identities, a rule "a" on every path with lists of its own, and a shadow
// rule beside it if shadow.
func bigLists(tb testing.TB, shadow bool) *httplimit.Rules {
	tb.Helper()
	var ex, de httplimit.ClientList
	for i := range 2500 {
		ex.Networks = append(ex.Networks, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), fmt.Sprintf("2001:db8:%x::/48", i))
		de.Networks = append(de.Networks, fmt.Sprintf("11.%d.%d.0/24", i/256, i%256), fmt.Sprintf("2001:db9:%x::/48", i))
	}
	for i := range 100 {
		de.Clients = append(de.Clients, fmt.Sprintf("evil-%d", i))
	}
	r := &httplimit.Rules{
		Rules: []httplimit.Rule{
			{Name: "a", Prefix: "/", Limit: 1_000_000_000, Window: 3600e9,
				Exempt: httplimit.ClientList{Clients: []string{"ops"}, Networks: []string{"198.51.100.0/24"}},
				Deny:   httplimit.ClientList{Networks: []string{"203.0.113.0/24"}}},
			{Name: "a-try", Prefix: "/", Limit: 1_000_000_000, Window: 60e9, Shadow: true},
		},
		Exempt: ex, Deny: de,
	}
	if !shadow {
		r.Rules = r.Rules[:1]
	}
	if err := r.Validate(); err != nil {
		tb.Fatal(err)
	}
	return r
}

// decideOne decides q on e and returns the action.
func decideOne[S byteseq](e *Engine, q *Request[S]) httplimit.Action {
	sc := e.GetScratch()
	var o Outcome
	Decide(e, sc, q, &o)
	e.PutScratch(sc)
	return o.Action
}

// TestPolicyDecisions checks each list's answer in the engine, both
// request forms, and that a shadow rule on limiters a NewLimiter builds
// counts under its own namespace.
func TestPolicyDecisions(t *testing.T) {
	own := func(_ string, cfg shardlimit.Config) (shardlimit.Limiter, error) { return shardlimit.New(cfg) }
	for _, nl := range []bool{false, true} {
		o := httplimit.Options{Rules: bigLists(t, true), Keys: httplimit.KeyConfig{Header: "X-Client-ID"}}
		if nl {
			o.NewLimiter = own
		}
		e, err := New(o, false)
		if err != nil {
			t.Fatal(err)
		}
		now := e.Clock().Now()
		for _, tc := range []struct {
			client, id string
			want       httplimit.Action
		}{
			{"192.0.2.1", "", httplimit.ActionAllow},
			{"10.3.7.9", "", httplimit.ActionExempt},
			{"::ffff:10.3.7.9", "", httplimit.ActionExempt},
			{"2001:db8:9c3::1", "", httplimit.ActionExempt},
			{"11.0.0.1", "", httplimit.ActionDenyListed},
			{"2001:db9:1::1", "", httplimit.ActionDenyListed},
			{"192.0.2.1", "evil-42", httplimit.ActionDenyListed},
			{"198.51.100.9", "", httplimit.ActionExempt},
			{"192.0.2.1", "ops", httplimit.ActionExempt},
			{"203.0.113.1", "", httplimit.ActionDenyListed},
			{"2001:db8:ffff::1", "", httplimit.ActionAllow}, // past the 2,500 /48s
		} {
			qs := Request[string]{Method: "GET", Path: "/x", Client: netip.MustParseAddr(tc.client), Identity: tc.id, Now: now, Cost: 1}
			qb := Request[[]byte]{Method: []byte("GET"), Path: []byte("/x"), Client: qs.Client, Identity: []byte(tc.id), Now: now, Cost: 1}
			if got, gotB := decideOne(e, &qs), decideOne(e, &qb); got != tc.want || gotB != tc.want {
				t.Errorf("NewLimiter %v, %s %q: %v / %v, want %v", nl, tc.client, tc.id, got, gotB, tc.want)
			}
		}
		// The two allowed requests (twice each) reached both rules; the
		// three that rule a's own lists decided (twice each) reached the
		// shadow rule too, which decides whatever the enforced rule
		// answers; each rule's keys are under its own namespace.
		want := map[string][2]int{"a": {4, 2}, "a-try": {10, 4}}
		for _, rs := range e.RuleStats() {
			if w := want[rs.Name]; rs.Stats.Allowed != uint64(w[0]) || rs.Stats.Keys != w[1] {
				t.Errorf("NewLimiter %v, rule %s: %+v, want %d allowed over %d keys", nl, rs.Name, rs.Stats, w[0], w[1])
			}
			if nl && rs.Limiter.Peek(rs.KeyPrefix+"ip:192.0.2.1", now, 0).Remaining >= 1_000_000_000 {
				t.Errorf("rule %s: key not under its namespace %q", rs.Name, rs.KeyPrefix)
			}
		}
		e.Close()
	}
}

// BenchmarkDecidePolicies is one decision with 10,000 networks on the rule
// set's lists (a binary search among them per list) and, in the shadow
// cases, a shadow rule beside the enforced one: an allowed request (every
// list missed; one limiter, or two with the shadow rule), an exempt one
// and a denied one (one list hit, no limiter). Compare
// BenchmarkDecide/serial, without lists or shadow rule.
func BenchmarkDecidePolicies(b *testing.B) {
	for _, shadow := range []bool{false, true} {
		e, err := New(httplimit.Options{Rules: bigLists(b, shadow)}, false)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		now := e.Clock().Now()
		for _, bc := range []struct {
			name, client string
			want         httplimit.Action
		}{
			{"allowed", "192.0.2.1", httplimit.ActionAllow},
			{"allowed-ipv6", "2001:db8:ffff::1", httplimit.ActionAllow},
			{"exempt", "10.3.7.9", httplimit.ActionExempt},
			{"denied", "11.3.7.9", httplimit.ActionDenyListed},
		} {
			name := "lists/" + bc.name
			if shadow {
				name = "lists+shadow/" + bc.name
			}
			b.Run(name, func(b *testing.B) {
				q := Request[string]{Method: "GET", Path: "/x", Client: netip.MustParseAddr(bc.client), Now: now, Cost: 1}
				b.ReportAllocs()
				for b.Loop() {
					if a := decideOne(e, &q); a != bc.want {
						b.Fatalf("action %v", a)
					}
				}
			})
		}
	}
}

// TestShadowToEnforcedKeepsCounters checks that a reload turning a shadow
// rule into an enforced one (name, algorithm and window unchanged) keeps
// its limiter, so its clients' counts: the operator switches to what was
// measured.
func TestShadowToEnforcedKeepsCounters(t *testing.T) {
	shadow := mustParse(t, `{"rules": [{"name": "a", "path": "/a", "limit": 5, "window": "1m"},
		{"name": "a-try", "path": "/a", "limit": 2, "window": "1m", "shadow": true}]}`)
	enforced := mustParse(t, `{"rules": [{"name": "a-try", "path": "/a", "limit": 2, "window": "1m"}]}`)
	e, err := New(httplimit.Options{Rules: shadow}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q := Request[string]{Method: "GET", Path: "/a", Client: netip.MustParseAddr("192.0.2.1"), Now: e.Clock().Now(), Cost: 1}
	for i, want := range []httplimit.Action{httplimit.ActionAllow, httplimit.ActionAllow, httplimit.ActionAllow} {
		if got := decideOne(e, &q); got != want {
			t.Fatalf("#%d under the shadow rule: %v, want %v", i+1, got, want)
		}
	}
	if err := e.Reload(enforced); err != nil {
		t.Fatal(err)
	}
	if got := decideOne(e, &q); got != httplimit.ActionDeny {
		t.Errorf("after the switch: %v, want deny: the shadow rule's count (2 of 2) was kept", got)
	}
	if st := e.Stats(); st.Allowed != 2 || st.Denied != 2 || st.ShadowAllowed != 0 {
		t.Errorf("Stats %+v, want a-try's 2 allowed and 2 denied (1 would-deny, 1 deny) now enforced", st)
	}
}
