package mwengine

import (
	"net/netip"
	"testing"

	"github.com/shardlimit/shardlimit/httplimit"
)

// BenchmarkAddrKey is the cost of building a client's address key, on
// every limited request keyed by address.
func BenchmarkAddrKey(b *testing.B) {
	for _, tc := range []struct {
		name string
		kc   httplimit.KeyConfig
		addr string
	}{
		{"ipv4", httplimit.KeyConfig{}, "192.0.2.123"},
		{"ipv4/24", httplimit.KeyConfig{IPv4Prefix: 24}, "192.0.2.123"},
		{"ipv6/64", httplimit.KeyConfig{}, "2001:db8:abcd:12:ffff::1"},
		{"ipv6/128", httplimit.KeyConfig{IPv6Prefix: 128}, "2001:db8:abcd:12:ffff::1"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			k, err := newKeyer(tc.kc, false)
			if err != nil {
				b.Fatal(err)
			}
			a := netip.MustParseAddr(tc.addr)
			buf := make([]byte, 0, k.maxKeyLen())
			b.ReportAllocs()
			for b.Loop() {
				buf = k.appendAddrKey(buf[:0], a)
			}
		})
	}
}
