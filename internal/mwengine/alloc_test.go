//go:build !race

package mwengine

import (
	"net/netip"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestKeyAllocs checks that key extraction allocates nothing on either
// request form, including the trusted-proxy path.
func TestKeyAllocs(t *testing.T) {
	k := mustKeyer(t, httplimit.KeyConfig{TrustedProxies: []string{"10.0.0.0/8"}})
	kr := mustKeyer(t, httplimit.KeyConfig{TrustedProxies: []string{"10.0.0.0/8"}, ForwardedHeader: "x-real-ip"})
	peer := netip.MustParseAddr("10.0.0.1")
	xffB := [][]byte{[]byte("198.51.100.1, [2001:db8::1]:443, 10.2.3.4")}
	xffS := []string{"198.51.100.1, 2001:db8:abcd:12::dead:beef%eth0, 10.2.3.4"}
	realB := [][]byte{[]byte("[2001:db8::1]:443")}
	buf := make([]byte, 0, 64)
	n := testing.AllocsPerRun(1000, func() {
		a := forwardedClient(k, peer, xffB)
		buf = k.appendAddrKey(buf[:0], a)
		a = forwardedClient(k, peer, xffS)
		buf = k.appendAddrKey(buf[:0], a)
		a = forwardedClient(kr, peer, realB)
		buf = k.appendAddrKey(buf[:0], a)
		buf = appendIDKey(k, buf[:0], []byte("client-1"))
	})
	if n != 0 {
		t.Errorf("%v allocs per key extraction, want 0", n)
	}
}

// TestDecideAllocs checks that a decision for a known client allocates
// nothing, on limiters the engine builds and on those a NewLimiter builds,
// whose keys carry the rule's namespace.
func TestDecideAllocs(t *testing.T) {
	rules := mustParse(t, `{"rules": [{"name": "a", "prefix": "/", "limit": 1000000000, "window": "1h"}]}`)
	own := func(_ string, cfg shardlimit.Config) (shardlimit.Limiter, error) { return shardlimit.New(cfg) }
	for _, o := range []httplimit.Options{{Rules: rules}, {Rules: rules, NewLimiter: own}} {
		e, err := New(o, false)
		if err != nil {
			t.Fatal(err)
		}
		q := Request[[]byte]{Method: []byte("GET"), Path: []byte("/x"), Client: netip.MustParseAddr("2001:db8::1"), Now: e.Clock().Now(), Cost: 1}
		var out Outcome
		run := func() {
			sc := e.GetScratch()
			Decide(e, sc, &q, &out)
			e.PutScratch(sc)
		}
		run()
		if n := testing.AllocsPerRun(1000, run); n != 0 || out.Action != httplimit.ActionAllow {
			t.Errorf("NewLimiter set: %v: %v allocs per decision (%v), want 0", o.NewLimiter != nil, n, out.Action)
		}
		e.Close()
	}
}
