package netprefix

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// randPrefix returns a random prefix, IPv4 or IPv6, of a random length,
// from a small space so that prefixes often nest and touch.
func randPrefix(r *rand.Rand) netip.Prefix {
	if r.IntN(2) == 0 {
		a := netip.AddrFrom4([4]byte{10, byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256))})
		return netip.PrefixFrom(a, 8+r.IntN(25)).Masked()
	}
	var b [16]byte
	b[0], b[1], b[2] = 0x20, 0x01, byte(r.IntN(4))
	b[15] = byte(r.IntN(256))
	bits := []int{0, 16, 24, 64, 120, 127, 128}[r.IntN(7)]
	return netip.PrefixFrom(netip.AddrFrom16(b), bits).Masked()
}

// randAddr returns a random address near randPrefix's space.
func randAddr(r *rand.Rand) netip.Addr {
	switch r.IntN(3) {
	case 0:
		return netip.AddrFrom4([4]byte{10, byte(r.IntN(5)), byte(r.IntN(256)), byte(r.IntN(256))})
	case 1: // IPv4-mapped
		return netip.AddrFrom16(netip.AddrFrom4([4]byte{10, byte(r.IntN(5)), byte(r.IntN(256)), byte(r.IntN(256))}).As16())
	}
	var b [16]byte
	b[0], b[1], b[2] = 0x20, 0x01, byte(r.IntN(5))
	b[15] = byte(r.IntN(256))
	return netip.AddrFrom16(b)
}

// TestSetMatchesReference checks Contains and Overlaps against the naive
// model (netip's own Contains and Overlaps over every prefix) on random
// sets of nesting, touching and disjoint networks.
func TestSetMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		ps := make([]netip.Prefix, r.IntN(40))
		for i := range ps {
			ps[i] = randPrefix(r)
		}
		s := NewSet(ps)
		for range 200 {
			a := randAddr(r)
			want := false
			for _, p := range ps {
				want = want || p.Contains(a.Unmap())
			}
			if got := s.Contains(a); got != want {
				t.Fatalf("round %d: Contains(%v) = %v, want %v; set %v", round, a, got, want, ps)
			}
			q := randPrefix(r)
			want = false
			for _, p := range ps {
				want = want || p.Overlaps(q)
			}
			if got := s.Overlaps(q); got != want {
				t.Fatalf("round %d: Overlaps(%v) = %v, want %v; set %v", round, q, got, want, ps)
			}
		}
	}
}

// TestSetEdges checks the ends of the address space, merging and the
// invalid values.
func TestSetEdges(t *testing.T) {
	all := NewSet([]netip.Prefix{netip.MustParsePrefix("::/0"), netip.MustParsePrefix("0.0.0.0/0")})
	for _, a := range []string{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "0.0.0.0", "255.255.255.255"} {
		if !all.Contains(netip.MustParseAddr(a)) {
			t.Errorf("::/0 and 0.0.0.0/0 do not contain %s", a)
		}
	}
	v6 := NewSet([]netip.Prefix{netip.MustParsePrefix("::/0")})
	if v6.Contains(netip.MustParseAddr("10.0.0.1")) || v6.Overlaps(netip.MustParsePrefix("10.0.0.0/8")) {
		t.Error("::/0 holds IPv4: the families must not meet, as in net/netip")
	}
	s := NewSet([]netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/25"), netip.MustParsePrefix("10.0.0.128/25"), // touch: one span
		netip.MustParsePrefix("10.0.0.7/32"), // inside
		netip.MustParsePrefix("255.255.255.255/32"),
		{}, // invalid: skipped
	})
	if s.Len() != 2 {
		t.Errorf("Len = %d, want 2 (merged)", s.Len())
	}
	for a, want := range map[string]bool{"10.0.0.0": true, "10.0.0.255": true, "10.0.1.0": false, "9.255.255.255": false,
		"255.255.255.255": true, "::ffff:10.0.0.9": true, "::a00:9": false} {
		if got := s.Contains(netip.MustParseAddr(a)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", a, got, want)
		}
	}
	if s.Contains(netip.Addr{}) || s.Overlaps(netip.Prefix{}) {
		t.Error("the invalid Addr or Prefix is in the set")
	}
	var empty Set
	if empty.Contains(netip.MustParseAddr("10.0.0.1")) {
		t.Error("the zero Set contains an address")
	}
}

// TestSetContainsAllocs checks that a lookup allocates nothing.
func TestSetContainsAllocs(t *testing.T) {
	s, addrs, _ := tenThousand()
	n := testing.AllocsPerRun(100, func() {
		for _, a := range addrs[:64] {
			s.Contains(a)
		}
	})
	if n != 0 {
		t.Errorf("%v allocs per 64 lookups, want 0", n)
	}
}

// tenThousand returns a Set of 10,000 distinct random networks (IPv4 /16
// to /32 and IPv6 /32 to /128) and 1,024 addresses, half of them inside.
func tenThousand() (Set, []netip.Addr, []netip.Prefix) {
	r := rand.New(rand.NewPCG(3, 4))
	seen := map[netip.Prefix]bool{}
	var ps []netip.Prefix
	for len(ps) < 10_000 {
		var p netip.Prefix
		if r.IntN(2) == 0 {
			a := netip.AddrFrom4([4]byte{byte(1 + r.IntN(223)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
			p = netip.PrefixFrom(a, 16+r.IntN(17)).Masked()
		} else {
			var b [16]byte
			b[0], b[1] = 0x20, 0x01
			for i := 2; i < 16; i++ {
				b[i] = byte(r.IntN(256))
			}
			p = netip.PrefixFrom(netip.AddrFrom16(b), 32+r.IntN(97)).Masked()
		}
		if !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	addrs := make([]netip.Addr, 1024)
	for i := range addrs {
		if i%2 == 0 {
			addrs[i] = ps[r.IntN(len(ps))].Addr()
		} else {
			addrs[i] = netip.AddrFrom4([4]byte{byte(1 + r.IntN(223)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
		}
	}
	return NewSet(ps), addrs, ps
}

// BenchmarkSetContains10k looks addresses up in a set of 10,000 networks;
// BenchmarkLinearContains10k scans the same networks in turn, as a slice of
// prefixes would.
func BenchmarkSetContains10k(b *testing.B) {
	s, addrs, _ := tenThousand()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Contains(addrs[i&1023])
		i++
	}
}

func BenchmarkLinearContains10k(b *testing.B) {
	_, addrs, ps := tenThousand()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		a := addrs[i&1023]
		for _, p := range ps {
			if p.Contains(a) {
				break
			}
		}
		i++
	}
}
