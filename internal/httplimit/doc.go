// Package httplimit is the framework-independent half of the HTTP middleware
// of shardlimit: rule files and their matching, client key extraction, the
// per-request decision and the formatting of rate-limit headers and 429
// bodies. The fasthttpmw and httpmw packages are thin adapters around it and
// re-export its public types, so this package is written once and shared.
//
// # Keys
//
// A request's key is built into a caller-provided byte buffer and handed to
// shardlimit.Limiter.AllowBytesN, which never retains it, so deciding an
// already known client allocates nothing. A key is one tag byte followed by
// a payload:
//
//	'4' + 4 bytes     an IPv4 client masked to KeyConfig.IPv4Prefix (/32 by default)
//	'6' + 1..16 bytes an IPv6 client masked to KeyConfig.IPv6Prefix (/64 by default),
//	                  only the bytes the prefix covers; IPv4-mapped IPv6 is IPv4
//	'i' + identity    a client identity (request header or key function) of at
//	                  most KeyConfig.MaxKeyBytes bytes, one that a tier or an
//	                  override lists (any under UnknownIdentityOwnKey)
//	'I' + 32 bytes    the SHA-256 digest of a longer identity
//	'a'               the shared bucket of requests with no usable identity or address
//
// Identities and addresses never share a key space, so a client cannot claim
// another client's address budget by sending it as an identity. Every key is
// at most 1+max(MaxKeyBytes, 32) bytes, and the number of keys per rule is
// capped by shardlimit.Config.MaxKeys (DefaultMaxKeys unless configured).
//
// # Identities must be authenticated upstream
//
// A client identity is whatever the request says: any client can send any
// X-Client-ID. By default (UnknownIdentityAnonymous) an identity that no
// tier or override lists is ignored and the request is keyed like one
// without identity, by its address, so made-up identities buy no budget;
// but a client that sends a listed identity still gets that client's tier.
// Use identities as keys (UnknownIdentityOwnKey), or tiers that raise
// limits, only when they are authenticated before this middleware: an API
// key validated upstream, or a key function that reads an authenticated
// principal.
//
// # Headers
//
// See HeaderSet for the fields written and where each comes from.
package httplimit
