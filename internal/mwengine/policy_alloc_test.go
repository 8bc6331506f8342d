//go:build !race

package mwengine

import (
	"net/netip"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestPolicyAllocs checks that, with 10,000 networks and 100 identities
// on the lists and a shadow rule beside the enforced one, a decision
// allocates nothing: allowed (on limiters the engine builds and on
// namespaced ones), exempt and denied, by address and by identity.
func TestPolicyAllocs(t *testing.T) {
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
		for _, tc := range []struct {
			client, id string
			want       httplimit.Action
		}{
			{"192.0.2.1", "", httplimit.ActionAllow},
			{"2001:db8:ffff::1", "unlisted", httplimit.ActionAllow},
			{"10.3.7.9", "", httplimit.ActionExempt},
			{"11.3.7.9", "", httplimit.ActionDenyListed},
			{"192.0.2.1", "evil-7", httplimit.ActionDenyListed},
		} {
			q := Request[[]byte]{Method: []byte("GET"), Path: []byte("/x"), Client: netip.MustParseAddr(tc.client),
				Identity: []byte(tc.id), Now: e.Clock().Now(), Cost: 1}
			var got httplimit.Action
			run := func() { got = decideOne(e, &q) }
			run()
			if n := testing.AllocsPerRun(1000, run); n != 0 || got != tc.want {
				t.Errorf("NewLimiter %v, %s %q: %v allocs (%v), want 0 (%v)", nl, tc.client, tc.id, n, got, tc.want)
			}
		}
		e.Close()
	}
}
