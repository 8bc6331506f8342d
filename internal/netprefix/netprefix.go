// Package netprefix parses the client networks of the HTTP middleware's
// configuration (tier networks, trusted proxies), so that the public
// configuration package and the engine read them one way.
package netprefix

import (
	"errors"
	"net/netip"
	"strings"
)

// Parse parses a network given as a CIDR ("10.0.0.0/8", "2001:db8::/32") or
// as a single address (a /32 or /128), surrounded by optional spaces. An
// IPv4-mapped IPv6 network ("::ffff:10.0.0.0/104") becomes the IPv4 network
// it maps ("10.0.0.0/8"), so it matches unmapped client addresses; host bits
// are cleared. Errors are netip's, or say that a mapped prefix is shorter
// than /96.
func Parse(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a = a.Unmap().WithZone("")
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, errors.New("IPv4-mapped prefix shorter than /96")
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
