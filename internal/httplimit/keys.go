package httplimit

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
)

// Key tags: the first byte of every key (see the package documentation).
const (
	tagIPv4     = '4'
	tagIPv6     = '6'
	tagID       = 'i'
	tagIDDigest = 'I'
	tagShared   = 'a'
)

// usableAddr reports whether a can key a client: valid and not unspecified
// (fasthttp reports 0.0.0.0 for a peer it does not know).
func usableAddr(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified()
}

// appendAddrKey appends the key of client address a, masked to the
// configured prefix, to dst. IPv4-mapped IPv6 is keyed as IPv4.
func (k *keyer) appendAddrKey(dst []byte, a netip.Addr) []byte {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		v := binary.BigEndian.Uint32(b[:]) & (^uint32(0) << (32 - k.v4Bits))
		return append(dst, tagIPv4, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	b := a.As16()
	hi := binary.BigEndian.Uint64(b[:8]) & (^uint64(0) << (64 - min(k.v6Bits, 64)))
	lo := binary.BigEndian.Uint64(b[8:]) & (^uint64(0) << (128 - max(k.v6Bits, 64)))
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return append(append(dst, tagIPv6), b[:(k.v6Bits+7)/8]...)
}

// appendIDKey appends the key of client identity id to dst: the identity
// itself if it is at most maxKeyBytes long, its SHA-256 digest otherwise.
func appendIDKey[S byteseq](k *keyer, dst []byte, id S) []byte {
	if len(id) <= k.maxKeyBytes {
		return append(append(dst, tagID), id...)
	}
	dst = append(dst, tagIDDigest)
	start := len(dst)
	dst = append(dst, id...)
	sum := sha256.Sum256(dst[start:])
	return append(dst[:start], sum[:]...)
}

// trusts reports whether a is inside a trusted proxy network.
func (k *keyer) trusts(a netip.Addr) bool {
	if len(k.trusted) == 0 || !a.IsValid() {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedClient returns the client address of a request from trusted
// proxy peer, given the lines of the forwarded header k trusts
// (KeyConfig.ForwardedHeader). For X-Real-IP: the last line if it is an
// address, else peer. For X-Forwarded-For: walking the lines right to
// left, the first address that is not a trusted proxy; if an entry is not
// an address, every entry is trusted or MaxForwardedHops entries were read,
// the last trusted address seen; peer if there is no entry.
func forwardedClient[S byteseq](k *keyer, peer netip.Addr, lines []S) netip.Addr {
	if !k.fwdList {
		if len(lines) > 0 {
			if a, ok := parseHop(lines[len(lines)-1]); ok {
				return a
			}
		}
		return peer
	}
	last, hops := peer, 0
	for li := len(lines) - 1; li >= 0; li-- {
		line := lines[li]
		end := len(line)
		for end >= 0 {
			start := end - 1
			for start >= 0 && line[start] != ',' {
				start--
			}
			entry := line[start+1 : end]
			end = start
			if isBlank(entry) {
				continue
			}
			a, ok := parseHop(entry)
			if !ok {
				return last
			}
			if !k.trusts(a) {
				return a
			}
			last = a
			if hops++; hops >= MaxForwardedHops {
				return last
			}
		}
	}
	return last // peer if there was no entry
}

// isBlank reports whether s holds only spaces and tabs.
func isBlank[S byteseq](s S) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' && s[i] != '\t' {
			return false
		}
	}
	return true
}
