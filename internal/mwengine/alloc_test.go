//go:build !race

package mwengine

import (
	"net/netip"
	"testing"

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
