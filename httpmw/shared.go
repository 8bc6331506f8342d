package httpmw

import "github.com/shardlimit/shardlimit/internal/httplimit"

// The configuration, rule and decision types are aliases of those of the
// internal package httplimit, shared with package fasthttpmw, so values move
// freely between the two middlewares. Their fields are documented there:
// go doc github.com/shardlimit/shardlimit/internal/httplimit.Options
type (
	// Options is the framework-independent part of Config: rules, key
	// extraction, headers, dry run, error policy, clock.
	Options = httplimit.Options
	// KeyConfig configures how a request's client key is built: remote
	// address (IPv4 per /32, IPv6 per /64 by default), trusted proxies and
	// the one forwarding header believed from them, an identity header and
	// what unlisted or empty identities get, the key length cap.
	KeyConfig = httplimit.KeyConfig
	// Rules is a rule set: default rules, tiers and overrides; see ParseRules
	// for its JSON form.
	Rules = httplimit.Rules
	// Tier is a group of clients with rules of their own.
	Tier = httplimit.Tier
	// Rule limits each client's requests on a route.
	Rule = httplimit.Rule
	// Override gives one client a limit of its own.
	Override = httplimit.Override
	// HeaderSet selects the response fields written.
	HeaderSet = httplimit.HeaderSet
	// ErrorPolicy says what to do with a request whose decision failed.
	ErrorPolicy = httplimit.ErrorPolicy
	// EmptyKeyPolicy says what to do with a request without a client
	// identity.
	EmptyKeyPolicy = httplimit.EmptyKeyPolicy
	// UnknownIdentityPolicy says what to do with a client identity that no
	// tier or override lists.
	UnknownIdentityPolicy = httplimit.UnknownIdentityPolicy
	// Decision is one request's outcome, given to OnDenied and Denied.
	Decision = httplimit.Decision
	// Stats are the middleware's counters.
	Stats = httplimit.Stats
)

// Header sets; see httplimit's HeaderSet for each field's source and format.
const (
	// HeaderXRateLimit: X-RateLimit-Limit, -Remaining, -Reset (seconds to
	// go, rounded up, or Unix seconds with Options.ResetUnix).
	HeaderXRateLimit = httplimit.HeaderXRateLimit
	// HeaderIETF: RateLimit-Policy and RateLimit, the structured fields of
	// draft-ietf-httpapi-ratelimit-headers.
	HeaderIETF = httplimit.HeaderIETF
	// HeaderVerbose: X-RateLimit-Window-Ms and X-RateLimit-Strategy.
	HeaderVerbose = httplimit.HeaderVerbose
	// HeaderRetryAfter: Retry-After on 429 (RFC 9110, section 10.2.3),
	// whole seconds rounded up, at least 1, omitted when no wait can succeed.
	HeaderRetryAfter = httplimit.HeaderRetryAfter
	// HeaderNone: no rate-limit field at all.
	HeaderNone = httplimit.HeaderNone
	// DefaultHeaders is what a zero HeaderSet means.
	DefaultHeaders = httplimit.DefaultHeaders
)

// The forwarding headers KeyConfig.ForwardedHeader may name.
const (
	// XForwardedFor: read right to left, the right-most address that is
	// not a trusted proxy is the client (the default).
	XForwardedFor = httplimit.XForwardedFor
	// XRealIP: one address, the client.
	XRealIP = httplimit.XRealIP
)

// Error policies.
const (
	// FailClosed answers a failed decision with 503 (the default).
	FailClosed = httplimit.FailClosed
	// FailOpen lets a request whose decision failed through, without
	// rate-limit fields.
	FailOpen = httplimit.FailOpen
)

// Unknown-identity policies. Identities are whatever clients send: use
// them as keys only when they are authenticated upstream.
const (
	// UnknownIdentityAnonymous keys a request whose identity no tier or
	// override lists as if it had none, per KeyConfig.EmptyKey (the
	// default): made-up identities get no budget of their own.
	UnknownIdentityAnonymous = httplimit.UnknownIdentityAnonymous
	// UnknownIdentityOwnKey keys every identity by itself, for identities
	// validated before the middleware (API keys checked upstream).
	UnknownIdentityOwnKey = httplimit.UnknownIdentityOwnKey
)

// Empty-key policies.
const (
	// EmptyKeyUseIP keys a request without identity by its address (the
	// default).
	EmptyKeyUseIP = httplimit.EmptyKeyUseIP
	// EmptyKeyShared puts requests without identity into one shared bucket.
	EmptyKeyShared = httplimit.EmptyKeyShared
	// EmptyKeyReject answers requests without identity with 400.
	EmptyKeyReject = httplimit.EmptyKeyReject
)

// ParseRules decodes and validates a JSON rule file:
//
//	{"rules": [{"name": "foo", "path": "/foo", "algorithm": "fixed_window", "limit": 10, "window": "1m"}],
//	 "tiers": [{"name": "gold", "clients": ["client-2"], "rules": [...]}],
//	 "overrides": [{"rule": "foo", "ip": "203.0.113.7", "limit": 2}]}
//
// Errors wrap shardlimit.ErrInvalidConfig.
func ParseRules(data []byte) (*Rules, error) { return httplimit.ParseRules(data) }

// LoadRules reads and parses the JSON rule file at path (see ParseRules).
func LoadRules(path string) (*Rules, error) { return httplimit.LoadRules(path) }
