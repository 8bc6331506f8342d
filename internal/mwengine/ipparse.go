package mwengine

import "net/netip"

// byteseq is the type of request data: string (net/http) or []byte
// (fasthttp). Functions over it are instantiated per form and allocate in
// neither.
type byteseq interface{ ~string | ~[]byte }

// parseAddr parses a textual IPv4 address (dotted decimal, no leading zeros)
// or IPv6 address (RFC 4291 section 2.2, with "::" and an embedded IPv4
// tail), accepting exactly what netip.ParseAddr accepts. An IPv6 zone
// ("%eth0") must be non-empty and is dropped. Unlike netip.ParseAddr it takes
// []byte as well as string and never allocates.
func parseAddr[S byteseq](s S) (netip.Addr, bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			var b [4]byte
			if !parseV4(s, &b) {
				return netip.Addr{}, false
			}
			return netip.AddrFrom4(b), true
		case ':':
			return parseV6(s)
		}
	}
	return netip.Addr{}, false
}

// parseV4 parses dotted-decimal s into out.
func parseV4[S byteseq](s S, out *[4]byte) bool {
	n, val, digits := 0, 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return false // leading zero
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return false
			}
		case c == '.':
			if digits == 0 || n == 3 {
				return false
			}
			out[n] = byte(val)
			n++
			val, digits = 0, 0
		default:
			return false
		}
	}
	if digits == 0 || n != 3 {
		return false
	}
	out[3] = byte(val)
	return true
}

// hexVal returns the value of hex digit c, or -1.
func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// parseV6 parses an IPv6 address. It stays hand-written, rather than
// netip.ParseAddr, because netip.ParseAddr takes only a string: on a
// []byte (fasthttp's headers) the conversion allocates, and so does every
// error it returns, which TestKeyAllocs and fasthttpmw's
// TestMiddlewareAllocs refuse.
func parseV6[S byteseq](s S) (netip.Addr, bool) {
	s, ok := dropZone(s)
	if !ok {
		return netip.Addr{}, false
	}
	p := v6{ellipsis: -1}
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		p.ellipsis = 0
		s = s[2:]
	}
	for len(s) > 0 {
		if s, ok = v6Group(&p, s); !ok {
			return netip.Addr{}, false
		}
	}
	return p.addr()
}

// dropZone returns s without its zone ("%eth0"), and false for an empty
// zone.
func dropZone[S byteseq](s S) (S, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			return s[:i], i < len(s)-1
		}
	}
	return s, true
}

// v6 is an IPv6 address being parsed: the first n bytes of ip are filled,
// and "::" stands at byte offset ellipsis (-1 if not yet seen).
type v6 struct {
	ip       [16]byte
	n        int
	ellipsis int
}

// v6Group parses into p the group at the start of s (or the embedded IPv4
// address that ends it) and the ':' or "::" after it, and returns the
// rest of s.
func v6Group[S byteseq](p *v6, s S) (S, bool) {
	if p.n >= 16 {
		return s, false
	}
	j, v := 0, 0
	for j < len(s) && j < 5 {
		d := hexVal(s[j])
		if d < 0 {
			break
		}
		v = v<<4 | d
		j++
	}
	if j == 0 || j > 4 {
		return s, false
	}
	if j < len(s) && s[j] == '.' {
		return s[:0], v6Tail(p, s)
	}
	p.ip[p.n], p.ip[p.n+1] = byte(v>>8), byte(v)
	p.n += 2
	s = s[j:]
	if len(s) == 0 {
		return s, true
	}
	if s[0] != ':' || len(s) == 1 {
		return s, false
	}
	s = s[1:]
	if s[0] == ':' {
		if p.ellipsis >= 0 {
			return s, false
		}
		p.ellipsis = p.n
		s = s[1:]
	}
	return s, true
}

// v6Tail parses s, the embedded IPv4 address that ends an IPv6 address,
// into p.
func v6Tail[S byteseq](p *v6, s S) bool {
	if p.ellipsis < 0 && p.n != 12 || p.n+4 > 16 {
		return false
	}
	var b [4]byte
	if !parseV4(s, &b) {
		return false
	}
	copy(p.ip[p.n:], b[:])
	p.n += 4
	return true
}

// addr returns the address p holds, its "::" expanded to the zero groups
// it stands for.
func (p *v6) addr() (netip.Addr, bool) {
	if p.n < 16 {
		if p.ellipsis < 0 {
			return netip.Addr{}, false
		}
		k := 16 - p.n
		copy(p.ip[p.ellipsis+k:], p.ip[p.ellipsis:p.n])
		clear(p.ip[p.ellipsis : p.ellipsis+k])
	} else if p.ellipsis >= 0 {
		return netip.Addr{}, false // "::" must stand for at least one group
	}
	return netip.AddrFrom16(p.ip), true
}

// parseHop parses one X-Forwarded-For entry or an X-Real-IP value: an
// address, optionally in brackets, optionally followed by a port
// ("[2001:db8::1]:443", "192.0.2.1:80"), surrounded by optional whitespace.
func parseHop[S byteseq](s S) (netip.Addr, bool) {
	s = trimOWS(s)
	if len(s) > 0 && s[0] == '[' {
		return parseBracketed(s)
	}
	colons, last := 0, -1
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			colons++
			last = i
		}
	}
	if colons == 1 { // IPv4 with a port
		if !isPort(s[last+1:]) {
			return netip.Addr{}, false
		}
		s = s[:last]
	}
	a, ok := parseAddr(s)
	return a.Unmap(), ok
}

// trimOWS returns s without leading and trailing spaces and tabs.
func trimOWS[S byteseq](s S) S {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseBracketed parses "[ipv6]" or "[ipv6]:port".
func parseBracketed[S byteseq](s S) (netip.Addr, bool) {
	end := -1
	for i := 1; i < len(s); i++ {
		if s[i] == ']' {
			end = i
			break
		}
	}
	if end < 0 {
		return netip.Addr{}, false
	}
	rest := s[end+1:]
	if len(rest) > 0 && (rest[0] != ':' || !isPort(rest[1:])) {
		return netip.Addr{}, false
	}
	a, ok := parseV6(s[1:end])
	return a.Unmap(), ok
}

// isPort reports whether s is 1 to 5 decimal digits.
func isPort[S byteseq](s S) bool {
	if len(s) == 0 || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ParseRemoteAddr returns the address of a net/http Request.RemoteAddr:
// "ip:port" or "[ipv6]:port" as the server sets it, or a bare address as
// some test harnesses do; the invalid Addr for anything else. It accepts
// what netip.ParseAddrPort, or failing that netip.ParseAddr, accepts,
// unmaps IPv4-mapped IPv6 and drops a zone, without their work on the
// port (strconv) and the error values they build.
func ParseRemoteAddr(s string) netip.Addr {
	if i := lastColon(s); i >= 0 && isPort16(s[i+1:]) {
		host := s[:i]
		if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
			if a, ok := parseV6(host[1 : len(host)-1]); ok {
				return a.Unmap()
			}
		} else if a, ok := parseAddr(host); ok && a.Is4() {
			return a // IPv6 with a port must be in brackets
		}
	}
	a, _ := parseAddr(s)
	return a.Unmap()
}

// lastColon returns the index of the last ':' in s, or -1.
func lastColon(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			return i
		}
	}
	return -1
}

// isPort16 reports whether s is a decimal port number in [0, 65535], as
// strconv.ParseUint(s, 10, 16) accepts it (leading zeros allowed).
func isPort16(s string) bool {
	if len(s) == 0 {
		return false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return false
		}
		if v = v*10 + int(c-'0'); v > 65535 {
			return false
		}
	}
	return true
}
