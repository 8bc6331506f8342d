package mwengine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

func mustKeyer(t *testing.T, kc httplimit.KeyConfig) *keyer {
	t.Helper()
	k, err := newKeyer(kc, false)
	if err != nil {
		t.Fatal(err)
	}
	return &k
}

func addrKey(k *keyer, s string) string {
	return string(k.appendAddrKey(nil, netip.MustParseAddr(s)))
}

// TestAddrKeys checks the default keys of parsed addresses: IPv4 per /32, IPv6
// per /64, IPv4-mapped IPv6 as IPv4, textual variants of one address
// alike.
func TestAddrKeys(t *testing.T) {
	k := mustKeyer(t, httplimit.KeyConfig{})
	same := [][]string{
		{"2001:db8:abcd:12::1", "2001:db8:abcd:12:ffff:ffff:ffff:fffe", "2001:db8:abcd:12::dead:beef"},
		{"2001:db8:abcd:13::1", "2001:DB8:ABCD:13:0:0:0:2", "2001:db8:abcd:13::3"},
		{"::ffff:192.0.2.1", "192.0.2.1", "::ffff:c000:201"},
	}
	seen := map[string]bool{}
	for _, group := range same {
		key := addrKey(k, group[0])
		if seen[key] {
			t.Errorf("%s shares a key with another group", group[0])
		}
		seen[key] = true
		for _, a := range group[1:] {
			if got := addrKey(k, a); got != key {
				t.Errorf("key(%s) = %x, key(%s) = %x; want equal", a, got, group[0], key)
			}
		}
	}
	if addrKey(k, "192.0.2.1") == addrKey(k, "192.0.2.2") {
		t.Error("IPv4 /32: 192.0.2.1 and 192.0.2.2 share a key")
	}
	for a, want := range map[string]string{
		"192.0.2.1":                     "ip:192.0.2.1",
		"::ffff:192.0.2.1":              "ip:192.0.2.1",
		"2001:db8::1":                   "ip:2001:db8::/64",
		"2001:db8:abcd:12:ffff::1%eth0": "ip:2001:db8:abcd:12::/64",
		"::1":                           "ip:::/64",
	} {
		if got := addrKey(k, a); got != want {
			t.Errorf("key of %s %q, want %q", a, got, want)
		}
	}
	if addrKey(k, "::c000:201") == addrKey(k, "192.0.2.1") {
		t.Error("IPv4-compatible (not mapped) IPv6 keyed as IPv4")
	}
}

// TestAddrKeyGrouping checks keys under configured prefix lengths: an
// IPv4 /24 and an IPv6 /56 group their networks' addresses, an IPv6 /128
// keys each address, an IPv6 /1 halves the address space.
func TestAddrKeyGrouping(t *testing.T) {
	k56 := mustKeyer(t, httplimit.KeyConfig{IPv6Prefix: 56, IPv4Prefix: 24})
	if got := addrKey(k56, "192.0.2.77"); got != "ip:192.0.2.0/24" {
		t.Errorf("IPv4 /24 key %q", got)
	}
	if addrKey(k56, "2001:db8:abcd:12::1") != addrKey(k56, "2001:db8:abcd:13::1") {
		t.Error("/56: 2001:db8:abcd:12::/64 and :13::/64 differ")
	}
	if addrKey(k56, "2001:db8:abcd:12::1") == addrKey(k56, "2001:db8:abcd:112::1") {
		t.Error("/56: 2001:db8:abcd:12:: and :112:: share a key")
	}
	if addrKey(k56, "192.0.2.1") != addrKey(k56, "192.0.2.200") || addrKey(k56, "192.0.2.1") == addrKey(k56, "192.0.3.1") {
		t.Error("IPv4 /24 grouping wrong")
	}
	k128 := mustKeyer(t, httplimit.KeyConfig{IPv6Prefix: 128})
	if got := addrKey(k128, "2001:db8::1"); got != "ip:2001:db8::1" {
		t.Errorf("IPv6 /128 key %q", got)
	}
	if addrKey(k128, "2001:db8::1") == addrKey(k128, "2001:db8::2") {
		t.Error("/128: two addresses share a key")
	}
	k1 := mustKeyer(t, httplimit.KeyConfig{IPv6Prefix: 1})
	if addrKey(k1, "2001:db8::1") != addrKey(k1, "7fff::") || addrKey(k1, "8000::") == addrKey(k1, "7fff::") {
		t.Error("/1 grouping wrong")
	}
}

// maskBytes zeroes every bit of b after the first bits: the reference for
// appendAddrKey's masks.
func maskBytes(b []byte, bits int) {
	for i := range b {
		switch {
		case bits >= 8:
			bits -= 8
		case bits > 0:
			b[i] &^= 0xff >> bits
			bits = 0
		default:
			b[i] = 0
		}
	}
}

func TestMaskBytes(t *testing.T) {
	for _, tc := range []struct {
		bits int
		want []byte
	}{
		{0, []byte{0, 0}}, {1, []byte{0x80, 0}}, {7, []byte{0xfe, 0}}, {8, []byte{0xff, 0}},
		{9, []byte{0xff, 0x80}}, {16, []byte{0xff, 0xff}},
	} {
		b := []byte{0xff, 0xff}
		maskBytes(b, tc.bits)
		if !bytes.Equal(b, tc.want) {
			t.Errorf("mask /%d = %x, want %x", tc.bits, b, tc.want)
		}
	}
}

// TestAddrKeyPrefixes checks appendAddrKey against maskBytes for every
// prefix length, on addresses with every bit set and on random ones.
func TestAddrKeyPrefixes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for bits := 1; bits <= 128; bits++ {
		kc := httplimit.KeyConfig{IPv6Prefix: bits}
		if bits <= 32 {
			kc.IPv4Prefix = bits
		}
		k := mustKeyer(t, kc)
		for i := range 20 {
			var b16 [16]byte
			for j := range b16 {
				b16[j] = 0xff
				if i > 0 {
					b16[j] = byte(rng.Uint32())
				}
			}
			a6 := netip.AddrFrom16(b16)
			if a6.Is4In6() {
				continue
			}
			if got, want := k.appendAddrKey([]byte("x"), a6), "x"+prefixKey(b16[:], bits); string(got) != want {
				t.Fatalf("/%d %s: key %q, want %q", bits, a6, got, want)
			}
			if bits > 32 {
				continue
			}
			b4 := [4]byte(b16[:4])
			want := prefixKey(b4[:], bits)
			for _, a4 := range []netip.Addr{netip.AddrFrom4(b4), netip.AddrFrom16([16]byte(append(make([]byte, 10), 0xff, 0xff, b4[0], b4[1], b4[2], b4[3])))} {
				if got := k.appendAddrKey(nil, a4); string(got) != want {
					t.Fatalf("/%d %s: key %q, want %q", bits, a4, got, want)
				}
			}
		}
	}
}

// prefixKey returns the key of the network of address bytes b (4 or 16)
// with prefix length bits, masked by maskBytes: "ip:" and the masked
// address, then "/bits" unless bits is the full length.
func prefixKey(b []byte, bits int) string {
	m := bytes.Clone(b)
	maskBytes(m, bits)
	a, _ := netip.AddrFromSlice(m)
	if bits == 8*len(b) {
		return "ip:" + a.String()
	}
	return "ip:" + a.String() + "/" + strconv.Itoa(bits)
}

// TestIDKeys checks identity keys: tagged, capped, long ones digested so
// that distinct identities keep distinct keys, and never equal to an
// address key.
func TestIDKeys(t *testing.T) {
	k := mustKeyer(t, httplimit.KeyConfig{MaxKeyBytes: 8})
	if got := string(appendIDKey(k, nil, "client-1")); got != "id:client-1" {
		t.Errorf("short identity key %q", got)
	}
	a := appendIDKey(k, nil, "client-10")
	b := appendIDKey(k, nil, []byte("client-11"))
	sum := sha256.Sum256([]byte("client-10"))
	if string(a) != "id-sha256:"+hex.EncodeToString(sum[:]) || bytes.Equal(a, b) {
		t.Errorf("long identity keys %q, %q", a, b)
	}
	if len(k.appendAddrKey(nil, netip.MustParseAddr("192.0.2.1"))) > k.maxKeyLen() || len(a) > k.maxKeyLen() {
		t.Error("a key is longer than maxKeyLen")
	}
	huge := strings.Repeat("x", 10000)
	if got := appendIDKey(k, make([]byte, 0, 64), huge); len(got) != len("id-sha256:")+64 {
		t.Errorf("10 kB identity key has %d bytes", len(got))
	}
}

// TestForwardedClient checks the right-most untrusted rule for
// X-Forwarded-For, and that only the configured header is read.
func TestForwardedClient(t *testing.T) {
	trusted := []string{"10.0.0.0/8", "2001:db8:ffff::/48", "::ffff:172.16.0.1"}
	xff := mustKeyer(t, httplimit.KeyConfig{TrustedProxies: trusted})
	xri := mustKeyer(t, httplimit.KeyConfig{TrustedProxies: trusted, ForwardedHeader: " x-REAL-ip"})
	peer := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		k     *keyer
		lines []string
		want  string
	}{
		{xff, nil, "10.0.0.1"},
		{xff, []string{"203.0.113.1"}, "203.0.113.1"},
		{xff, []string{"198.51.100.1, 203.0.113.1"}, "203.0.113.1"},
		{xff, []string{"203.0.113.1, 10.2.3.4"}, "203.0.113.1"},
		{xff, []string{"spoof, 203.0.113.1, 10.2.3.4"}, "203.0.113.1"},
		{xff, []string{"203.0.113.1, garbage, 10.2.3.4"}, "10.2.3.4"},
		{xff, []string{"garbage"}, "10.0.0.1"},
		{xff, []string{"10.9.9.9, 10.2.3.4"}, "10.9.9.9"},
		{xff, []string{"198.51.100.1", "203.0.113.1, 10.2.3.4"}, "203.0.113.1"},
		{xff, []string{"198.51.100.1", "10.2.3.4"}, "198.51.100.1"},
		{xff, []string{"2001:db8::1, 2001:db8:ffff::2"}, "2001:db8::1"},
		{xff, []string{"[2001:db8::1]:443 , 172.16.0.1"}, "2001:db8::1"},
		{xff, []string{"::ffff:203.0.113.5"}, "203.0.113.5"},
		{xff, []string{" , "}, "10.0.0.1"},
		{xff, []string{"203.0.113.1," + strings.Repeat("10.0.0.5,", httplimit.MaxForwardedHops) + "10.0.0.6"}, "10.0.0.5"},
		{xri, nil, "10.0.0.1"},
		{xri, []string{"203.0.113.7"}, "203.0.113.7"},
		{xri, []string{" [2001:db8::7]:443 "}, "2001:db8::7"},
		{xri, []string{"::ffff:203.0.113.5"}, "203.0.113.5"},
		{xri, []string{"198.51.100.1", "203.0.113.7"}, "203.0.113.7"}, // the last line
		{xri, []string{"not an address"}, "10.0.0.1"},
		{xri, []string{"198.51.100.1, 203.0.113.7"}, "10.0.0.1"}, // not a list
		{xri, []string{"10.2.3.4"}, "10.2.3.4"},                  // taken as given
	} {
		got := forwardedClient(tc.k, peer, tc.lines)
		var bs [][]byte
		for _, l := range tc.lines {
			bs = append(bs, []byte(l))
		}
		gotB := forwardedClient(tc.k, peer, bs)
		if got.String() != tc.want || gotB != got {
			t.Errorf("%s %q: %v (bytes %v), want %s", tc.k.fwdHeader, tc.lines, got, gotB, tc.want)
		}
	}
	if xff.fwdHeader != httplimit.XForwardedFor || xri.fwdHeader != httplimit.XRealIP {
		t.Errorf("forwarded headers %q, %q", xff.fwdHeader, xri.fwdHeader)
	}
	if !xff.trusts(netip.MustParseAddr("::ffff:10.1.1.1")) || !xff.trusts(netip.MustParseAddr("172.16.0.1")) || xff.trusts(netip.MustParseAddr("172.16.0.2")) {
		t.Error("trusts: IPv4-mapped handling wrong")
	}
}

func TestKeyConfigHeaderAndKeyFunc(t *testing.T) {
	if _, err := newKeyer(httplimit.KeyConfig{Header: "X-Api-Key"}, true); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Errorf("a key header and a key function both accepted: %v", err)
	}
	k := mustKeyer(t, httplimit.KeyConfig{Header: "x-api-key", ForwardedHeader: " x-real-ip"})
	if k.header != "X-Api-Key" || k.fwdHeader != httplimit.XRealIP || k.fwdList {
		t.Errorf("keyer %+v: names not canonical", k)
	}
}
