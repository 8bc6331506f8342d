package mwengine

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/netprefix"
)

// Key forms (see httplimit.KeyConfig): printable, so that keys read as
// what they are wherever they are stored (Redis, with package sync).
const (
	keyAddr   = "ip:"        // + the client's network in text: "ip:192.0.2.1", "ip:2001:db8::/64"
	keyID     = "id:"        // + the identity
	keyDigest = "id-sha256:" // + the hex SHA-256 digest of a longer identity
	keyShared = "shared"     // the shared bucket
	maxAddr   = len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")
)

// keyer is a validated KeyConfig.
type keyer struct {
	header      string // canonical MIME form, "" if none
	identity    bool   // an identity source (header or key function) is configured
	unknownID   httplimit.UnknownIdentityPolicy
	emptyKey    httplimit.EmptyKeyPolicy
	maxKeyBytes int
	v4Bits      int
	v6Bits      int
	trusted     []netip.Prefix
	fwdHeader   string // XForwardedFor or XRealIP
	fwdList     bool   // fwdHeader is X-Forwarded-For
}

// newKeyer returns the keyer of kc, validated by Options.Validate; keyFunc
// tells whether the middleware has a key function, which kc.Header must
// then not name.
func newKeyer(kc httplimit.KeyConfig, keyFunc bool) (keyer, error) {
	k := keyer{
		header:      textproto.CanonicalMIMEHeaderKey(kc.Header),
		unknownID:   kc.UnknownIdentity,
		emptyKey:    kc.EmptyKey,
		maxKeyBytes: cmp.Or(kc.MaxKeyBytes, httplimit.DefaultMaxKeyBytes),
		v4Bits:      cmp.Or(kc.IPv4Prefix, httplimit.DefaultIPv4Prefix),
		v6Bits:      cmp.Or(kc.IPv6Prefix, httplimit.DefaultIPv6Prefix),
		fwdHeader:   httplimit.XForwardedFor,
		fwdList:     true,
	}
	if k.header != "" && keyFunc {
		return k, fmt.Errorf("%w: both a key header and a key function are set", shardlimit.ErrInvalidConfig)
	}
	k.identity = k.header != "" || keyFunc
	if textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(kc.ForwardedHeader)) == httplimit.XRealIP {
		k.fwdHeader, k.fwdList = httplimit.XRealIP, false
	}
	for _, s := range kc.TrustedProxies {
		p, err := netprefix.Parse(s)
		if err != nil {
			return k, fmt.Errorf("%w: trusted proxy %q: %v", shardlimit.ErrInvalidConfig, s, err)
		}
		k.trusted = append(k.trusted, p)
	}
	return k, nil
}

// maxKeyLen is the longest key the keyer builds.
func (k *keyer) maxKeyLen() int {
	return max(len(keyID)+k.maxKeyBytes, len(keyDigest)+2*sha256.Size, len(keyAddr)+maxAddr)
}

// usableAddr reports whether a can key a client: valid and not unspecified
// (fasthttp reports 0.0.0.0 for a peer it does not know).
func usableAddr(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified()
}

// appendAddrKey appends the key of client address a to dst: "ip:" and a's
// network under the configured prefix length in text, as netip.Prefix
// writes it ("ip:192.0.2.0/24", "ip:2001:db8::/64"), or the address alone
// for a full-length prefix ("ip:192.0.2.1"). IPv4-mapped IPv6 is keyed as
// IPv4. It does not allocate when dst has room.
func (k *keyer) appendAddrKey(dst []byte, a netip.Addr) []byte {
	a = a.Unmap().WithZone("")
	dst = append(dst, keyAddr...)
	bits := k.v6Bits
	if a.Is4() {
		bits = k.v4Bits
	}
	if bits == a.BitLen() {
		return a.AppendTo(dst)
	}
	p, _ := a.Prefix(bits) // the lengths are validated: within a's
	return p.AppendTo(dst)
}

// appendIDKey appends the key of client identity id to dst: "id:" and the
// identity if it is at most maxKeyBytes long, else "id-sha256:" and its
// SHA-256 digest in hex.
func appendIDKey[S byteseq](k *keyer, dst []byte, id S) []byte {
	if len(id) <= k.maxKeyBytes {
		return append(append(dst, keyID...), id...)
	}
	start := len(dst)
	dst = append(dst, id...) // hashed from dst: no conversion of a string id
	sum := sha256.Sum256(dst[start:])
	return hex.AppendEncode(append(dst[:start], keyDigest...), sum[:])
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
			if hops++; hops >= httplimit.MaxForwardedHops {
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

// KeyKind names the kind of client key key (as Scratch.Key holds it):
// "identity" (an identity, or its digest), "address" (a client's network)
// or "shared" (the shared bucket); "" for anything else. It says what a
// key limits without the key itself, which may be a secret (an API key).
func KeyKind(key []byte) string {
	switch {
	case bytes.HasPrefix(key, []byte(keyID)), bytes.HasPrefix(key, []byte(keyDigest)):
		return "identity"
	case bytes.HasPrefix(key, []byte(keyAddr)):
		return "address"
	case string(key) == keyShared:
		return "shared"
	}
	return ""
}
