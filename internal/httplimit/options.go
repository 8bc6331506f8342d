package httplimit

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/shardlimit/shardlimit"
)

// Defaults and bounds of Options and KeyConfig.
const (
	// DefaultPolicyName is the IETF policy name used when neither
	// Options.PolicyName nor a rule's Policy sets one.
	DefaultPolicyName = "default"
	// DefaultMaxKeyBytes is the default KeyConfig.MaxKeyBytes.
	DefaultMaxKeyBytes = 64
	// MaxKeyBytesLimit is the largest KeyConfig.MaxKeyBytes accepted.
	MaxKeyBytesLimit = 1024
	// DefaultIPv4Prefix and DefaultIPv6Prefix are the default prefix
	// lengths, in bits, that client addresses are grouped by.
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
	// DefaultMaxKeys is the number of keys each rule's limiter holds at most
	// when Options.Limiter.MaxKeys is 0: 1,048,576, on the order of 100 MiB
	// per rule when full (plus 4 bytes per counted unit for the sliding
	// log). What happens to a new key beyond it is Options.Limiter.WhenFull
	// (RejectNewKeys by default, answered per Options.OnError).
	DefaultMaxKeys = 1 << 20
	// MaxForwardedHops is how many X-Forwarded-For entries are examined at
	// most, from the right; a longer chain is treated as if it ended there.
	MaxForwardedHops = 32
	// XForwardedFor and XRealIP name the forwarding headers
	// KeyConfig.ForwardedHeader may choose, in canonical MIME form.
	XForwardedFor = "X-Forwarded-For"
	XRealIP       = "X-Real-Ip"
	// digestLen is the length of the SHA-256 digest that replaces a long
	// identity.
	digestLen = 32
)

// HeaderSet selects the response header fields the middleware writes. It is
// a bit set; the zero value means DefaultHeaders. Field names are
// case-insensitive on the wire (RFC 9110, section 5.1); both Go frameworks
// write them in canonical MIME form, e.g. "X-Ratelimit-Limit".
type HeaderSet uint8

const (
	// HeaderXRateLimit writes the de-facto standard trio on every limited
	// response: X-RateLimit-Limit (the key's limit, requests or cost units
	// per window), X-RateLimit-Remaining (units left after this request, in
	// [0, limit]) and X-RateLimit-Reset (whole seconds until the usage next
	// drops, rounded up; Unix seconds with Options.ResetUnix). Libraries
	// disagree on X-RateLimit-Reset: GitHub sends Unix seconds, others
	// seconds or milliseconds to go; this package sends seconds to go unless
	// told otherwise.
	HeaderXRateLimit HeaderSet = 1 << iota
	// HeaderIETF writes the structured fields of
	// draft-ietf-httpapi-ratelimit-headers: RateLimit-Policy: "name";q=L;w=W
	// (quota L units per W seconds, the window rounded up) and RateLimit:
	// "name";r=R;t=T (R units remaining, T seconds until reset, rounded up).
	HeaderIETF
	// HeaderVerbose writes X-RateLimit-Window-Ms (the rule's window in
	// milliseconds, rounded up) and X-RateLimit-Strategy (the rule's
	// algorithm name, e.g. "fixed_window").
	HeaderVerbose
	// HeaderRetryAfter writes Retry-After on 429 responses: RFC 9110,
	// section 10.2.3, delay-seconds, the limiter's exact retry-after rounded
	// up to whole seconds and at least 1. It is omitted when no wait can
	// succeed (shardlimit.Never: a limit of 0 or a cost above the limit).
	HeaderRetryAfter
	// HeaderNone writes no rate-limit field at all, not even Retry-After.
	// It overrides every other bit.
	HeaderNone HeaderSet = 1 << 7
	// DefaultHeaders is what the zero HeaderSet means.
	DefaultHeaders = HeaderXRateLimit | HeaderRetryAfter
)

// ErrorPolicy says what the middleware does with a request whose decision
// failed (shardlimit.Result.Err non-nil: ErrTooManyKeys when a rule's table
// is full under shardlimit.RejectNewKeys, ErrClosed after Close).
type ErrorPolicy uint8

const (
	// FailClosed answers 503 Service Unavailable with a text/plain body and
	// no rate-limit headers. It is the default: a full table then refuses
	// new clients, as shardlimit.RejectNewKeys documents, instead of letting
	// them through unlimited.
	FailClosed ErrorPolicy = iota
	// FailOpen lets the request through to the next handler without
	// rate-limit headers.
	FailOpen
)

// EmptyKeyPolicy says what happens when a client identity source is
// configured (KeyConfig.Header or a key function) but a request yields an
// empty identity, or one ignored under UnknownIdentityAnonymous.
type EmptyKeyPolicy uint8

const (
	// EmptyKeyUseIP keys the request by its client address instead (the
	// default). A client with no usable address (a Unix socket peer, an
	// unspecified address) falls into the shared bucket.
	EmptyKeyUseIP EmptyKeyPolicy = iota
	// EmptyKeyShared puts every such request into one shared bucket per
	// rule (key "a"), so anonymous traffic shares one budget.
	EmptyKeyShared
	// EmptyKeyReject answers 400 Bad Request with a text/plain body and
	// consumes nothing, on routes a rule limits (others pass untouched).
	// Under UnknownIdentityAnonymous, that is every client the rules do not
	// list.
	EmptyKeyReject
)

// UnknownIdentityPolicy says what happens to a client identity (from
// KeyConfig.Header or a key function) that no tier lists in Tier.Clients
// and no override names in Override.ID.
type UnknownIdentityPolicy uint8

const (
	// UnknownIdentityAnonymous ignores such an identity (the default): the
	// request is keyed as if it carried none, per KeyConfig.EmptyKey (by
	// its client address unless configured otherwise). Identities then sort
	// the clients the rules list into their tiers and overrides, and a
	// client that sends a fresh value gets no fresh budget. It is the
	// default because an identity header is whatever the client sends,
	// like a forwarding header from an untrusted peer: believing every
	// value would hand out one budget per value made up.
	UnknownIdentityAnonymous UnknownIdentityPolicy = iota
	// UnknownIdentityOwnKey keys every identity by itself, listed or not:
	// each value gets its own budget under the default rules. Use it only
	// for identities a client cannot choose: checked before this
	// middleware (an API key validated upstream) or derived by the key
	// function from authenticated data.
	UnknownIdentityOwnKey
)

// KeyConfig configures how a request's client key is built. The zero value
// keys clients by their TCP peer address: IPv4 per /32, IPv6 per /64,
// forwarding headers ignored.
type KeyConfig struct {
	// Header names a request header carrying the client identity, such as
	// "X-Client-ID" or "X-API-Key". Empty (the default) keys by address. The
	// value's bytes are the identity, compared exactly against Tier.Clients
	// and Override.ID.
	//
	// The value is taken as sent, and a client can send any value. Unless
	// the header is authenticated before this middleware (an API key
	// validated upstream, the request refused otherwise), anyone can claim
	// a listed identity and its tier, and with UnknownIdentityOwnKey every
	// made-up value is a fresh budget. By default (UnknownIdentityAnonymous)
	// only listed identities are keys; any other is keyed like a request
	// without one.
	Header string

	// UnknownIdentity says what to do with an identity that no tier or
	// override lists. Default UnknownIdentityAnonymous: key the request as
	// if it had no identity.
	UnknownIdentity UnknownIdentityPolicy

	// EmptyKey says what to do when Header (or the middleware's key
	// function) yields an empty identity, or an unknown one under
	// UnknownIdentityAnonymous. Default EmptyKeyUseIP.
	EmptyKey EmptyKeyPolicy

	// MaxKeyBytes is the longest identity used as is, in bytes, in
	// [1, MaxKeyBytesLimit]; default DefaultMaxKeyBytes. A longer identity
	// is replaced by its SHA-256 digest, so keys stay bounded while distinct
	// identities keep distinct budgets.
	MaxKeyBytes int

	// IPv4Prefix is the prefix length, in bits in [1, 32], IPv4 clients are
	// grouped by. Default 32 (one key per address).
	IPv4Prefix int

	// IPv6Prefix is the prefix length, in bits in [1, 128], IPv6 clients are
	// grouped by. Default 64: a client usually controls a whole /64 and
	// could rotate addresses inside it.
	IPv6Prefix int

	// TrustedProxies lists the networks (CIDR "10.0.0.0/8" or a single
	// address) of reverse proxies whose forwarding header (ForwardedHeader)
	// is believed. Only when the TCP peer is inside one of them is that
	// header read; otherwise, or when it is absent, the client is the peer.
	// Empty (the default) ignores forwarding headers altogether.
	TrustedProxies []string

	// ForwardedHeader names the one forwarding header read from trusted
	// proxies, XForwardedFor or XRealIP (case-insensitive; empty means
	// XForwardedFor); the other is ignored, whatever it says.
	//
	// X-Forwarded-For is read right to left over all its lines, skipping
	// trusted addresses: the first untrusted address is the client (at most
	// MaxForwardedHops entries are read; if an entry is not an address, or
	// every entry is trusted, the last trusted address seen is the client).
	// X-Real-IP holds one address: its last line is the client.
	//
	// Name the header your proxies set themselves. A proxy passes on the
	// headers it does not set as the client sent them: one that only sets
	// X-Real-IP (nginx's proxy_set_header X-Real-IP $remote_addr) forwards
	// a client's own X-Forwarded-For, and believing it would let the client
	// pick its key and so its budget; one that appends to X-Forwarded-For
	// (nginx's $proxy_add_x_forwarded_for, most load balancers) forwards a
	// client's own X-Real-IP.
	ForwardedHeader string
}

// Options is the configuration shared by both middlewares; the fasthttpmw
// and httpmw Config types embed it. Construction validates it and returns an
// error wrapping shardlimit.ErrInvalidConfig for any bad value.
type Options struct {
	// Rules are the rules in force at start; required. They are compiled at
	// construction; later changes to the value have no effect (use Reload).
	Rules *Rules

	// Keys configures client key extraction.
	Keys KeyConfig

	// Headers selects the response fields written. Zero means
	// DefaultHeaders.
	Headers HeaderSet

	// PolicyName is the IETF policy name of rules without a Policy of their
	// own. Default DefaultPolicyName ("default").
	PolicyName string

	// ResetUnix makes X-RateLimit-Reset an absolute instant in Unix seconds
	// (rounded up) instead of the default seconds-to-go.
	ResetUnix bool

	// DefaultAlgorithm is the algorithm of rules that name none. Default
	// shardlimit.FixedWindow.
	DefaultAlgorithm shardlimit.Algorithm

	// Limiter is the template of every rule's limiter: its Shards,
	// JanitorInterval, MaxKeys and WhenFull are used as given (MaxKeys 0
	// means DefaultMaxKeys, a negative MaxKeys means no cap). Algorithm,
	// Limit, Window, Buckets, MaxKeyBytes and Clock are set by the
	// middleware (Clock to Options.Clock's).
	Limiter shardlimit.Config

	// NewLimiter, if set, builds each rule's limiter in place of
	// shardlimit.New, for example a Redis-shared one from package sync.
	// rule is the rule's name (unique within a rule set) and cfg the
	// configuration the middleware derived from Limiter and the rule, with
	// Clock set to the middleware's clock: build the limiter with it, since
	// requests are decided at instants read from it. It is called by
	// construction and by Reload for every new rule and every rule whose
	// algorithm, window or buckets changed (a rule whose only change is its
	// limit keeps its limiter), from the goroutine calling them. The
	// middleware owns what it returns: it calls Close when the rule is
	// removed or replaced and on the middleware's Close. An error fails
	// construction or that Reload, wrapped with the rule's name. Nil means
	// shardlimit.New.
	NewLimiter func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error)

	// Clock is the one clock of the middleware: each request is decided at
	// Clock.Now() read when the middleware runs, and it is the Config.Clock
	// of every rule's limiter (those NewLimiter builds too), whose janitor
	// judges by it which keys are idle. Nil (the default) means one
	// shardlimit.SystemClock created at construction: wall time then plus
	// monotonic time since, so a wall-clock step (NTP, an operator) moves
	// neither decisions nor janitors. Set it in tests
	// (shardlimit.ManualClock).
	//
	// Requests are not decided at the time the server read them (fasthttp's
	// ctx.Time()): behind slow middleware that instant can be long past,
	// and it is wall time, which steps; a janitor on another clock would
	// then evict keys whose window has not ended for the decisions, handing
	// their clients fresh budgets.
	Clock shardlimit.Clock

	// DryRun (shadow mode) counts every request and writes the usual
	// headers, but lets denied requests through to the next handler,
	// without Retry-After; Stats.WouldDeny counts them and OnDenied sees
	// them with Decision.DryRun set.
	DryRun bool

	// OnError says what to do when a decision fails. Default FailClosed.
	OnError ErrorPolicy

	// OnDenied, if set, is called for every denied request (including those
	// let through by DryRun) before the response is written, on the
	// request's goroutine. It must be safe for concurrent use and must not
	// retain the Decision's pointers past its return.
	OnDenied func(Decision)
}

// keyer is a validated KeyConfig.
type keyer struct {
	header      string // canonical MIME form, "" if none
	identity    bool   // an identity source (header or key function) is configured
	unknownID   UnknownIdentityPolicy
	emptyKey    EmptyKeyPolicy
	maxKeyBytes int
	v4Bits      int
	v6Bits      int
	trusted     []netip.Prefix
	fwdHeader   string // XForwardedFor or XRealIP
	fwdList     bool   // fwdHeader is X-Forwarded-For
}

// maxKeyLen is the longest key the keyer builds.
func (k *keyer) maxKeyLen() int { return 1 + max(k.maxKeyBytes, digestLen) }

func newKeyer(kc KeyConfig, keyFunc bool) (keyer, error) {
	k := keyer{
		header:      kc.Header,
		unknownID:   kc.UnknownIdentity,
		emptyKey:    kc.EmptyKey,
		maxKeyBytes: kc.MaxKeyBytes,
		v4Bits:      kc.IPv4Prefix,
		v6Bits:      kc.IPv6Prefix,
	}
	if k.header != "" {
		if strings.ContainsAny(k.header, " \t\r\n:") {
			return k, fmt.Errorf("%w: key header %q is not a field name", shardlimit.ErrInvalidConfig, k.header)
		}
		k.header = textproto.CanonicalMIMEHeaderKey(k.header)
		if keyFunc {
			return k, fmt.Errorf("%w: both a key header and a key function are set", shardlimit.ErrInvalidConfig)
		}
	}
	k.identity = k.header != "" || keyFunc
	if k.unknownID > UnknownIdentityOwnKey {
		return k, fmt.Errorf("%w: invalid unknown-identity policy %d", shardlimit.ErrInvalidConfig, k.unknownID)
	}
	if k.emptyKey > EmptyKeyReject {
		return k, fmt.Errorf("%w: unknown empty-key policy %d", shardlimit.ErrInvalidConfig, k.emptyKey)
	}
	if k.maxKeyBytes == 0 {
		k.maxKeyBytes = DefaultMaxKeyBytes
	}
	if k.maxKeyBytes < 1 || k.maxKeyBytes > MaxKeyBytesLimit {
		return k, fmt.Errorf("%w: max key bytes %d outside [1, %d]", shardlimit.ErrInvalidConfig, k.maxKeyBytes, MaxKeyBytesLimit)
	}
	if k.v4Bits == 0 {
		k.v4Bits = DefaultIPv4Prefix
	}
	if k.v4Bits < 1 || k.v4Bits > 32 {
		return k, fmt.Errorf("%w: IPv4 prefix /%d outside [1, 32]", shardlimit.ErrInvalidConfig, k.v4Bits)
	}
	if k.v6Bits == 0 {
		k.v6Bits = DefaultIPv6Prefix
	}
	if k.v6Bits < 1 || k.v6Bits > 128 {
		return k, fmt.Errorf("%w: IPv6 prefix /%d outside [1, 128]", shardlimit.ErrInvalidConfig, k.v6Bits)
	}
	switch h := textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(kc.ForwardedHeader)); h {
	case "", XForwardedFor:
		k.fwdHeader, k.fwdList = XForwardedFor, true
	case XRealIP:
		k.fwdHeader = XRealIP
	default:
		return k, fmt.Errorf("%w: forwarded header %q is neither %s nor X-Real-IP", shardlimit.ErrInvalidConfig, kc.ForwardedHeader, XForwardedFor)
	}
	for _, s := range kc.TrustedProxies {
		p, err := parsePrefix(s)
		if err != nil {
			return k, fmt.Errorf("%w: trusted proxy %q: %v", shardlimit.ErrInvalidConfig, s, err)
		}
		k.trusted = append(k.trusted, p)
	}
	return k, nil
}

// parsePrefix parses a CIDR or a single address (a /32 or /128), with
// IPv4-mapped IPv6 networks turned into IPv4 ones.
func parsePrefix(s string) (netip.Prefix, error) {
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
			return netip.Prefix{}, fmt.Errorf("IPv4-mapped prefix shorter than /96")
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
