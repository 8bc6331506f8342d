package netprefix

import (
	"encoding/binary"
	"net/netip"
	"slices"
)

// u128 is an IPv6 address (IPv4 as IPv4-mapped IPv6) as a 128-bit
// unsigned integer: hi holds its first 8 bytes.
type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

// inc returns a+1 and false if a is the largest value (no successor).
func (a u128) inc() (u128, bool) {
	if a.lo != ^uint64(0) {
		return u128{a.hi, a.lo + 1}, true
	}
	if a.hi != ^uint64(0) {
		return u128{a.hi + 1, 0}, true
	}
	return a, false
}

// toU128 returns a (unmapped, without zone) in the 128-bit space, IPv4 as
// IPv4-mapped IPv6.
func toU128(a netip.Addr) u128 {
	b := a.Unmap().As16() // As16 maps IPv4 to ::ffff:a.b.c.d
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// bounds returns the first and last address of p (masked, unmapped) in
// the 128-bit space.
func bounds(p netip.Prefix) (first, last u128) {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	first = toU128(p.Masked().Addr())
	last = first
	switch {
	case bits == 0:
		last = u128{^uint64(0), ^uint64(0)}
	case bits <= 64:
		last.hi |= ^uint64(0) >> bits
		last.lo = ^uint64(0)
	case bits < 128:
		last.lo |= ^uint64(0) >> (bits - 64)
	}
	return first, last
}

// span is a range of IPv6 addresses, first and last included; span4 one
// of IPv4 addresses.
type (
	span  struct{ first, last u128 }
	span4 struct{ first, last uint32 }
)

// Set is a set of networks for membership tests: the networks' address
// ranges, sorted and merged into disjoint spans (one table for IPv4, one
// for IPv6), searched by binary search. Contains costs O(log n)
// comparisons for n spans (14 for 10,000) and never allocates. An
// IPv4-mapped IPv6 address is looked up as the IPv4 address it maps, and
// IPv4 and IPv6 never meet, as in net/netip: "::/0" holds no IPv4
// address. The zero Set is empty. A Set is immutable once built, so safe
// for concurrent use.
type Set struct {
	v4 []span4
	v6 []span
}

// NewSet returns the Set of ps (each as Parse returns it, or any valid
// prefix: it is unmapped and masked here). Invalid prefixes are skipped.
func NewSet(ps []netip.Prefix) Set {
	var s4, s6 []span
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		f, l := bounds(p)
		if p.Addr().Is4() {
			s4 = append(s4, span{f, l})
		} else {
			s6 = append(s6, span{f, l})
		}
	}
	var out Set
	for _, sp := range merge(s4) {
		out.v4 = append(out.v4, span4{uint32(sp.first.lo), uint32(sp.last.lo)})
	}
	out.v6 = merge(s6)
	return out
}

// merge sorts spans and merges those that overlap or touch, in place.
func merge(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int {
		switch {
		case a.first.less(b.first):
			return -1
		case b.first.less(a.first):
			return 1
		}
		return 0
	})
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 {
			prev := &out[n-1]
			next, ok := prev.last.inc()
			if !ok || !next.less(s.first) { // touching or overlapping
				if prev.last.less(s.last) {
					prev.last = s.last
				}
				continue
			}
		}
		out = append(out, s)
	}
	return slices.Clip(out)
}

// Len returns the number of disjoint ranges the Set holds (networks that
// overlap or touch count as one).
func (s *Set) Len() int { return len(s.v4) + len(s.v6) }

// Contains reports whether a is inside one of the Set's networks; false
// for the invalid Addr. It does not allocate.
func (s *Set) Contains(a netip.Addr) bool {
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is4() {
		if len(s.v4) == 0 {
			return false
		}
		b := a.As4()
		x := binary.BigEndian.Uint32(b[:])
		return covers4(s.v4, x, x)
	}
	if len(s.v6) == 0 || !a.IsValid() {
		return false
	}
	x := toU128(a)
	return covers6(s.v6, x, x)
}

// Overlaps reports whether some address of p is in the Set.
func (s *Set) Overlaps(p netip.Prefix) bool {
	if !p.IsValid() {
		return false
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	f, l := bounds(p)
	if p.Addr().Is4() {
		return covers4(s.v4, uint32(f.lo), uint32(l.lo))
	}
	return covers6(s.v6, f, l)
}

// covers6 reports whether some span of spans (sorted, disjoint) meets
// [f, l]: the last span starting at or before l ends at or after f.
func covers6(spans []span, f, l u128) bool {
	lo, hi := 0, len(spans) // find the first span starting after l
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.less(spans[m].first) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo > 0 && !spans[lo-1].last.less(f)
}

// covers4 is covers6 for IPv4 spans.
func covers4(spans []span4, f, l uint32) bool {
	lo, hi := 0, len(spans)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l < spans[m].first {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo > 0 && spans[lo-1].last >= f
}
