package httplimit

import (
	"fmt"
	"net/textproto"
	"strings"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/netprefix"
)

// Defaults and bounds of Options, KeyConfig and HeaderConfig.
const (
	// DefaultPolicyName is the IETF policy name Rule.PolicyNames gives a
	// rule with neither a Policy nor a Name when HeaderConfig.PolicyName
	// is empty. Validation refuses rules without a name, so the middleware
	// never sends it: a rule without a Policy is named after its Name.
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
	// DefaultTopDenied is the default Options.TopDenied: how many client
	// keys the summary of the most-denied keys tracks.
	DefaultTopDenied = 100
	// MaxTopDenied is the largest Options.TopDenied accepted.
	MaxTopDenied = 10_000
	// MaxForwardedHops is how many X-Forwarded-For entries are examined at
	// most, from the right; a longer chain is treated as if it ended there.
	MaxForwardedHops = 32
	// XForwardedFor and XRealIP name the forwarding headers
	// KeyConfig.ForwardedHeader may choose, in canonical MIME form.
	XForwardedFor = "X-Forwarded-For"
	XRealIP       = "X-Real-Ip"
)

// Options is the configuration shared by both middlewares: the fasthttpmw
// and httpmw Config types embed it and add the hooks that take their
// framework's request. The zero value of every field but Rules is a usable
// default. New validates it (see Validate) and returns an error wrapping
// shardlimit.ErrInvalidConfig for any bad value.
type Options struct {
	// Rules are the rules in force at start; required (nil is an error
	// wrapping ErrNoRules). They are compiled by New; later changes to the
	// value have no effect (use the middleware's Reload). Load them with
	// LoadRules or ParseRules, or build them in Go.
	Rules *Rules

	// Keys configures how a request's client key is built: by address by
	// default (IPv4 per /32, IPv6 per /64), or by identity.
	Keys KeyConfig

	// Headers selects the rate-limit fields of responses. The zero value
	// writes X-RateLimit-Limit, -Remaining and -Reset on every limited
	// response and Retry-After on every 429 that a wait can end; setting a
	// field only adds fields or removes the one it names.
	Headers HeaderConfig

	// DefaultAlgorithm is the algorithm of rules that name none. Default
	// shardlimit.FixedWindow.
	DefaultAlgorithm shardlimit.Algorithm

	// Limiter is the template of every rule's limiter: its Shards,
	// JanitorInterval, MaxKeys and WhenFull are used as given (MaxKeys 0
	// means DefaultMaxKeys, a negative MaxKeys means no cap). Algorithm,
	// Limit, Window, Rates, Buckets, MaxKeyBytes and Clock are set by the
	// middleware (Clock to Options.Clock's; Limit and Window for a rule of
	// one limit, Rates, shortest window first, for a rule of several).
	Limiter shardlimit.Config

	// NewLimiter, if set, builds each rule's limiter in place of
	// shardlimit.New, for example a Redis-shared one from package sync.
	// rule is the rule's name (unique within a rule set) and cfg the
	// configuration the middleware derived from Limiter and the rule, with
	// Clock set to the middleware's clock: build the limiter with it, since
	// requests are decided at instants read from it.
	//
	// Each rule's keys are namespaced by the middleware: every client key
	// it passes to the limiter of a rule starts with KeyNamespace(rule), a
	// fixed 9 bytes derived from the rule's name (cfg.MaxKeyBytes counts
	// them). So limiters that share a store never count one another's
	// requests, whatever the factory does: limiters of package sync may
	// all take one Prefix (or the rule's name in it, for keys a person can
	// tell apart), and two rules of one window still keep separate
	// counters. A rule keeps its keys as long as it keeps its name; a
	// renamed rule starts from fresh counters. The nodes of a cluster
	// share a rule's counters when they run it under one name with one
	// store and Prefix. Keys are shown without the namespace (TopDenied);
	// RuleStats.KeyPrefix gives it.
	//
	// For a rule of several limits cfg.Rates holds them (see Limiter), and
	// the limiter must report the binding one's window in Result.Window
	// (shardlimit's do). It is called by New and by Reload for every rule
	// that needs a new limiter (a rule keeps its limiter across reloads,
	// see "Reloading rules" in the package documentation), from the
	// goroutine calling them. The middleware owns what it returns: it
	// calls Close when the limiter is no longer needed and on the
	// middleware's Close. An error fails New or that Reload, wrapped with
	// the rule's name. Nil means shardlimit.New: one table per rule in
	// memory, passed the client key alone.
	NewLimiter func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error)

	// Clock is the one clock of the middleware: each request is decided at
	// the clock's reading when the middleware runs, and it is the
	// Config.Clock of every rule's limiter (those NewLimiter builds too),
	// by which the janitor judges which of their keys are idle. Nil (the
	// default) means shardlimit.DefaultClock(): the system's monotonic
	// clock, read once per request, so every decision is made at its true
	// instant however loaded the server is; like every shardlimit clock it
	// is wall time at its start plus monotonic time since, so a wall-clock
	// step (NTP, an operator) moves neither decisions nor the janitor's
	// sweeps. Set it in tests (shardlimit.ManualClock).
	//
	// Requests are not decided at the time the server read them (fasthttp's
	// ctx.Time()): that is a reading of another clock, wall time, which
	// steps, and the janitor, sweeping at the limiters' clock, would evict
	// keys whose window has not ended for the decisions, handing their
	// clients fresh budgets.
	Clock shardlimit.Clock

	// DryRun (shadow mode) counts every request and writes the usual
	// fields, but lets denied requests through to the next handler, without
	// Retry-After: Stats.WouldDeny counts them and OnDenied sees them with
	// Action ActionDryRunDeny. Clients on a deny list pass too, without
	// fields (Decision.Listed set). To try one rule in shadow beside the
	// enforced ones, use Rule.Shadow instead.
	DryRun bool

	// OnError says what to do when a decision fails. Default FailClosed.
	// A middleware's error hook (its Config.ErrorStatus), if set, decides
	// instead, per request and error.
	OnError ErrorPolicy

	// OnDenied, if set, is called for every denied request (including those
	// let through by DryRun, and those a deny list refused: Decision.Listed)
	// before the response is written, on the request's goroutine; not for
	// a shadow rule's would-denials. It must be safe for concurrent use.
	OnDenied func(Decision)

	// FailedResponse, if set, tells which responses failed, for the rules
	// that count by outcome (Rule.Count): d is the request's decision and
	// status the response's status code (500 for a handler that
	// panicked). Nil means status >= 400. It runs on the request's
	// goroutine after the handler returns, and must be safe for
	// concurrent use.
	FailedResponse func(d Decision, status int) bool

	// TopDenied is how many (rule, client key) pairs the middleware's
	// summary of the most-denied clients tracks (its TopDenied method; see
	// DeniedKey for what the counts promise), in [0, MaxTopDenied]: 0
	// means DefaultTopDenied, a negative value keeps no summary. The
	// summary takes about TopDenied x (KeyConfig.MaxKeyBytes + 100) bytes,
	// reserved by New, and one short mutex hold per denied request (those
	// let through by DryRun included); allowed requests never touch it.
	TopDenied int

	// MaxPolicyKeys is how many (rule, client key) pairs the table of bans
	// (Rule.Ban) and the table of requests in flight (Rule.Concurrency)
	// each hold at most, in [0, MaxPolicyKeysLimit]: 0 means
	// DefaultMaxPolicyKeys. Neither table grows past it, whatever keys a
	// flood of clients brings: a full ban table stops counting the
	// violations of new clients (their requests are still limited by their
	// rule, and bans in force are never dropped for room) and refuses
	// SetBan; a full in-flight table refuses the requests of clients with
	// nothing in flight, as over their limit.
	MaxPolicyKeys int

	// BanStore, if set, shares bans between the nodes of a cluster: a ban
	// that starts, is set or lifted on one node is written to the store
	// at once by a goroutine of the middleware, which also reads the bans
	// in force every BanSyncInterval. So a ban is enforced by every node
	// within BanSyncInterval plus two store round trips of its start, and
	// a node that restarts reads the bans in force before its first
	// interval ends. Package sync's NewBanStore keeps them in Redis. Nil
	// keeps bans in-process. Store errors are counted (PolicyStats) and
	// retried at the next interval; requests never wait for the store.
	// Offences (Ban.Growth) are counted per node: a ban learnt from the
	// store is enforced until its end but is not an offence of this node.
	BanStore BanStore

	// BanSyncInterval is how often bans are read from BanStore, in
	// [0, 1m]; 0 means DefaultBanSyncInterval (100 ms). Each read returns
	// every ban in force (at most MaxPolicyKeys), so with many bans a
	// longer interval costs the store less.
	BanSyncInterval time.Duration
}

// HeaderConfig selects the rate-limit fields of responses. The zero value
// writes the de-facto standard X-RateLimit trio on every response a rule
// limits and Retry-After on every 429 that a wait can end. IETF and Verbose
// add fields beside those; only OmitXRateLimit and OmitRetryAfter remove
// any, each the fields it names, so no setting drops another field by
// accident.
//
// Field names are case-insensitive on the wire (RFC 9110, section 5.1);
// both Go frameworks write them in canonical MIME form, such as
// "X-Ratelimit-Limit". Requests that no rule limits, and answers other than
// 200 and 429 (400, 500, 503), get none of these fields.
type HeaderConfig struct {
	// IETF adds the two structured fields of the IETF draft "RateLimit
	// header fields for HTTP", draft-ietf-httpapi-ratelimit-headers-11
	// (a work in progress; the field names and parameters below are those
	// of that version):
	//
	//	RateLimit-Policy: "name";q=L;w=W   the policy: quota of L units (the key's limit) per W seconds (the window, rounded up)
	//	RateLimit: "name";r=R;t=T          R units remaining, T seconds until the usage next drops (rounded up)
	//
	// Both are lists (RFC 9651 structured fields) whose items are named
	// by strings: the rule's policy names (Rule.PolicyNames: its Policy,
	// else PolicyName, else the rule's Name, for a rule of one limit; for
	// a rule of several, that name, "-" and each window). RateLimit-Policy
	// lists every limit of the rule that limited the request, shortest
	// window first, with the key's own limits (overrides) in q; for rule
	// "baz" of 3 a second and 10 a minute:
	//
	//	RateLimit-Policy: "baz-1s";q=3;w=1, "baz-1m";q=10;w=60
	//	RateLimit: "baz-1m";r=0;t=57
	//
	// RateLimit has one item, the binding limit's, whose numbers the
	// X-RateLimit fields report too: the limit with the least remaining
	// after the request (of two with as much, the longer window). Its r is
	// the least any limit leaves, so a client spending at most r units
	// within t seconds stays within every limit; the draft lets a server
	// send only the limit closest to exhaustion, as its own example of
	// several windows does (appendix B.3.1).
	IETF bool

	// PolicyName, if set, is the IETF policy name of every rule without a
	// Policy of its own: printable ASCII. Empty (the default) names each
	// such rule after its Name (PolicyNameOf: printable ASCII as is,
	// other bytes and '%' as %XX), so the fields tell rules apart.
	PolicyName string

	// Verbose adds X-RateLimit-Window-Ms (the window of the limit the
	// X-RateLimit fields report, the binding one for a rule of several, in
	// milliseconds, rounded up) and X-RateLimit-Strategy (the rule's
	// algorithm, as shardlimit.Algorithm.String names it, such as
	// "fixed_window").
	Verbose bool

	// ResetUnix makes X-RateLimit-Reset an absolute instant in Unix seconds
	// (rounded up), as GitHub sends it, instead of the default seconds to
	// go (rounded up). Libraries disagree on this field; the IETF draft's
	// "t" is always seconds to go.
	ResetUnix bool

	// OmitXRateLimit removes X-RateLimit-Limit (the key's limit, units per
	// window), X-RateLimit-Remaining (units left after this request, in
	// [0, limit]) and X-RateLimit-Reset (when the usage next drops). For a
	// rule of several limits they report the binding one: the limit with
	// the least remaining after the request (of two with as much, the
	// longer window), whose window X-RateLimit-Window-Ms gives (Verbose).
	OmitXRateLimit bool

	// OmitRetryAfter removes Retry-After from 429 answers. By default a
	// 429 carries it (RFC 9110, section 10.2.3, delay-seconds): the
	// limiter's exact wait until the same request would be admitted,
	// rounded up to whole seconds and at least 1. It is absent, whatever
	// this field says, when no wait can succeed (a limit of 0, or a cost
	// above the limit) and on requests let through by DryRun.
	OmitRetryAfter bool
}

// ErrorPolicy says what the middleware does with a request whose decision
// failed (shardlimit.Result.Err non-nil: ErrTooManyKeys when a rule's table
// is full under shardlimit.RejectNewKeys, ErrClosed after Close).
type ErrorPolicy uint8

const (
	// FailClosed answers 503 Service Unavailable with a text/plain body and
	// no rate-limit fields. It is the default: a full table then refuses
	// new clients, as shardlimit.RejectNewKeys documents, instead of letting
	// them through unlimited.
	FailClosed ErrorPolicy = iota
	// FailOpen lets the request through to the next handler without
	// rate-limit fields.
	FailOpen
)

// String returns "fail_closed" or "fail_open".
func (p ErrorPolicy) String() string {
	return enumName(uint8(p), "ErrorPolicy", "fail_closed", "fail_open")
}

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
	// rule, so anonymous traffic shares one budget.
	EmptyKeyShared
	// EmptyKeyReject answers 400 Bad Request with a text/plain body and
	// consumes nothing, on routes a rule limits (others pass untouched).
	// Under UnknownIdentityAnonymous, that is every client the rules do not
	// list.
	EmptyKeyReject
)

// String returns "use_ip", "shared" or "reject".
func (p EmptyKeyPolicy) String() string {
	return enumName(uint8(p), "EmptyKeyPolicy", "use_ip", "shared", "reject")
}

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

// String returns "anonymous" or "own_key".
func (p UnknownIdentityPolicy) String() string {
	return enumName(uint8(p), "UnknownIdentityPolicy", "anonymous", "own_key")
}

// enumName returns names[v], or "type(v)" for a value without a name.
func enumName(v uint8, typ string, names ...string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// KeyConfig configures how a request's client key is built. The zero value
// keys clients by their TCP peer address: IPv4 per /32, IPv6 per /64,
// forwarding headers ignored.
//
// A key is stored, and shared through Redis with package sync, as
// printable text: "ip:" and the client's network ("ip:192.0.2.1",
// "ip:2001:db8::/64", "ip:192.0.2.0/24" under IPv4Prefix 24), "id:" and the
// identity, "id-sha256:" and the hex SHA-256 digest of an identity longer
// than MaxKeyBytes, or "shared" for the shared bucket (EmptyKeyShared, or a
// request without a usable address). Identities and addresses never share
// a key, so a client cannot claim another client's address budget by
// sending it as an identity.
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

// Validate reports the first invalid value in o, as New does before
// building anything: an error wrapping shardlimit.ErrInvalidConfig (and
// ErrNoRules when o.Rules is nil or holds no rule without saying that
// limiting is off). It does not check o.Limiter, which the limiters'
// constructors check.
func (o *Options) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{shardlimit.ErrInvalidConfig}, args...)...)
	}
	if o.Rules == nil {
		return fmt.Errorf("%w: %w: Options.Rules is nil", shardlimit.ErrInvalidConfig, ErrNoRules)
	}
	alg := o.DefaultAlgorithm
	if alg == 0 {
		alg = shardlimit.FixedWindow
	}
	if alg < shardlimit.FixedWindow || alg > shardlimit.GCRA {
		return bad("unknown default algorithm %d", int(alg))
	}
	if err := checkPolicyName(o.Headers.PolicyName); err != nil {
		return bad("%v", err)
	}
	if err := o.Rules.validate(alg, o.Headers.PolicyName); err != nil {
		return err
	}
	if o.OnError > FailOpen {
		return bad("unknown error policy %v", o.OnError)
	}
	if o.TopDenied > MaxTopDenied {
		return bad("top denied %d above %d", o.TopDenied, MaxTopDenied)
	}
	if err := o.checkPolicyOptions(); err != nil {
		return err
	}
	return o.Keys.validate()
}

// validate checks kc.
func (kc *KeyConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{shardlimit.ErrInvalidConfig}, args...)...)
	}
	if kc.Header != "" && strings.ContainsAny(kc.Header, " \t\r\n:") {
		return bad("key header %q is not a field name", kc.Header)
	}
	if kc.UnknownIdentity > UnknownIdentityOwnKey {
		return bad("unknown unknown-identity policy %v", kc.UnknownIdentity)
	}
	if kc.EmptyKey > EmptyKeyReject {
		return bad("unknown empty-key policy %v", kc.EmptyKey)
	}
	if kc.MaxKeyBytes < 0 || kc.MaxKeyBytes > MaxKeyBytesLimit {
		return bad("max key bytes %d outside [1, %d]", kc.MaxKeyBytes, MaxKeyBytesLimit)
	}
	if kc.IPv4Prefix < 0 || kc.IPv4Prefix > 32 {
		return bad("IPv4 prefix /%d outside [1, 32]", kc.IPv4Prefix)
	}
	if kc.IPv6Prefix < 0 || kc.IPv6Prefix > 128 {
		return bad("IPv6 prefix /%d outside [1, 128]", kc.IPv6Prefix)
	}
	switch textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(kc.ForwardedHeader)) {
	case "", XForwardedFor, XRealIP:
	default:
		return bad("forwarded header %q is neither %s nor X-Real-IP", kc.ForwardedHeader, XForwardedFor)
	}
	for _, s := range kc.TrustedProxies {
		if _, err := netprefix.Parse(s); err != nil {
			return bad("trusted proxy %q: %v", s, err)
		}
	}
	return nil
}
