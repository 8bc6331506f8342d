package httplimit

import (
	"errors"
	"strconv"
	"time"

	"github.com/shardlimit/shardlimit"
)

// ErrNoRules reports a rule set that would leave no request limited: nil
// Options.Rules, or a Rules value without a single rule that does not say
// Limiting: LimitingOff. A rule file that lost its rules (an empty file,
// "{}", a bad edit) is thus refused, at start and on reload, instead of
// silently turning every limit off. Errors wrapping it wrap
// shardlimit.ErrInvalidConfig too.
var ErrNoRules = errors.New("httplimit: no rules")

// Limiting says whether a rule set limits at all: Rules.Limiting.
type Limiting string

const (
	// LimitingOn (or "") is the default: the rule set must hold at least
	// one rule.
	LimitingOn Limiting = "on"
	// LimitingOff says on purpose that nothing is limited: the rule set
	// holds no rule, tier or override, and every request passes untouched,
	// with no rate-limit field. Reloading rules that limit again finds the
	// counters of rules that come back within their window (see "Reloading
	// rules" in the package documentation).
	LimitingOff Limiting = "off"
)

// Rules is a complete rule set: the default rules, client tiers and per-client
// limit overrides. It is plain data; the middleware compiles it at
// construction and on Reload. It must hold at least one rule (in Rules or
// a tier) unless Limiting is LimitingOff. Its JSON form (ParseRules) is:
//
//	{
//	  "rules": [                              // the default tier: clients in no tier
//	    {"name": "foo", "path": "/foo", "algorithm": "fixed_window", "limit": 5, "window": "1m"},
//	    {"name": "baz", "path": "/baz", "algorithm": "fixed_window", "limits": [
//	      {"limit": 3, "window": "1s"}, {"limit": 10, "window": "1m"}
//	    ]}
//	  ],
//	  "tiers": [
//	    {"name": "gold", "clients": ["client-2"], "networks": ["10.0.0.0/8"], "rules": [
//	      {"name": "gold-foo", "path": "/foo", "algorithm": "fixed_window", "limit": 20, "window": "1m"},
//	      {"name": "gold-baz", "path": "/baz", "algorithm": "fixed_window", "limits": [
//	        {"limit": 10, "window": "1s"}, {"limit": 100, "window": "1m"}
//	      ]}
//	    ]}
//	  ],
//	  "overrides": [
//	    {"rule": "foo", "ip": "203.0.113.7", "limit": 2},
//	    {"rule": "foo", "id": "blocked-key", "limit": 0},
//	    {"rule": "baz", "id": "batch-job", "limits": [{"limit": 50, "window": "1m"}]}
//	  ]
//	}
//
// A rule gives either one limit ("limit" and "window") or several
// ("limits", see Rule.Limits); tiers give theirs in their own rules, and
// overrides per window ("limits", see Override.Limits). Exempt and deny
// lists ("exempt", "deny": for the rule set and per rule) and shadow rules
// ("shadow": true) are described under Policies in the package
// documentation. A rule may also count only some responses ("count": "failed" or "successful", see
// Rule.Count) and take its requests' final cost from a response header
// ("cost_header", see Rule.CostHeader): see "Settling after the handler"
// in the package documentation.
//
// and, to turn limiting off on purpose (no rules, tiers or overrides):
//
//	{"limiting": "off"}
//
// Unknown fields are errors, so a misspelt field never silently drops a
// limit, and so is a key given twice in any object (encoding/json alone
// would keep the last: {"limit": 1, "limit": 1000} would mean 1000).
// ParseRules (and so ReadRules and LoadRules) refuses a file that is not
// valid UTF-8, giving the byte offset (encoding/json would silently turn
// each invalid byte of a path or name into U+FFFD), and one that starts
// with a byte order mark.
// A rules file is held to caps that rules built in Go are not: at most
// MaxRulesFileBytes bytes, MaxRules rules, MaxTiers tiers, MaxTierClients
// clients and MaxTierNetworks networks over all tiers, MaxOverrides
// overrides, MaxListEntries exempt and deny list entries, MaxRuleMethods
// methods per rule, names (and policy names) of at most MaxNameBytes
// bytes, and windows of at least MinFileWindow (1 ms). Every error wraps shardlimit.ErrInvalidConfig and names the
// rule, tier or override, or the cap exceeded. Rules from a file and
// rules built in Go are both held to MaxOverrideLimits, to rule and tier
// names without control characters, and to methods that are HTTP tokens.
type Rules struct {
	// Limiting is LimitingOff to say that the rule set limits nothing on
	// purpose; empty means LimitingOn. In JSON "on" or "off".
	Limiting Limiting `json:"limiting,omitempty"`

	// Rules apply to clients in no tier, and to tier clients on routes
	// their tier's rules do not match.
	Rules []Rule `json:"rules,omitempty"`
	// Tiers group clients that get rules of their own; at most MaxTiers in
	// a rules file, whose default and tier rules together are at most
	// MaxRules.
	Tiers []Tier `json:"tiers,omitempty"`
	// Overrides give single clients a limit of their own on a rule; at
	// most MaxOverrides in a rules file.
	Overrides []Override `json:"overrides,omitempty"`

	// Exempt lists clients that no rule limits: their requests pass to
	// the next handler uncounted (no limiter is asked, shadow rules'
	// neither) and without any rate-limit field (Decision.Action
	// ActionExempt). See Policies in the package documentation.
	Exempt ClientList `json:"exempt,omitzero"`
	// Deny lists clients whose every request the middleware refuses, on
	// every route (limited or not), with 403 Forbidden and a body saying
	// so, uncounted and without rate-limit fields (ActionDenyListed;
	// under Options.DryRun they pass as ActionDryRunDeny). A client both
	// here and on an exempt list is refused by Validate.
	Deny ClientList `json:"deny,omitzero"`
}

// Tier is a group of clients with rules of their own. A request belongs to
// the first tier listing its identity in Clients; failing that, to the first
// tier whose Networks contain its client address; failing that, to the
// default rules. A tier client whose route matches none of the tier's rules
// is matched against the default rules.
type Tier struct {
	// Name identifies the tier in Decision.Tier; required and unique; at
	// most MaxNameBytes bytes in a rules file.
	Name string `json:"name"`
	// Clients are identities (KeyConfig.Header values or key function
	// results), compared byte for byte. A listed identity is a key of its
	// own (see KeyConfig.UnknownIdentity for the others). A rules file
	// lists at most MaxTierClients over all its tiers.
	Clients []string `json:"clients,omitempty"`
	// Networks are client networks, CIDR or single addresses. A rules
	// file lists at most MaxTierNetworks over all its tiers.
	Networks []string `json:"networks,omitempty"`
	// Rules are the tier's rules.
	Rules []Rule `json:"rules"`
}

// Rule limits the requests of each client on a route. Each rule has its own
// limiter, so a client's budget on one rule is independent of its budget on
// another; requests matched by one prefix rule share one budget.
//
// Matching, within a tier: an exact Path beats a Prefix, a longer Prefix
// beats a shorter one, a rule listing the request's method beats one listing
// none, and otherwise the first rule in order wins. A rule with neither Path
// nor Prefix matches every path. A request matching no rule is not limited
// and gets no rate-limit headers.
type Rule struct {
	// Name identifies the rule across reloads and in Decision.Rule; required
	// and unique over the whole Rules value; at most MaxNameBytes bytes in
	// a rules file. It is the rule's IETF policy name unless Policy or
	// HeaderConfig.PolicyName gives one (see PolicyNames). A reload keeps
	// the counters of a rule whose name, algorithm, windows and buckets are
	// unchanged (see "Reloading rules" in the package documentation). It
	// namespaces the rule's keys in a shared store (KeyNamespace):
	// renaming a rule starts its clients' counts afresh.
	Name string
	// Path matches a request path exactly ("/foo" matches only "/foo").
	Path string
	// Prefix matches a path and everything below it: "/api" matches "/api"
	// and "/api/x" but not "/apix"; "/api/" matches "/api/" and "/api/x".
	// At most one of Path and Prefix may be set.
	Prefix string
	// Methods restricts the rule to these request methods (compared after
	// upper-casing the rule's names). Empty matches every method. At most
	// MaxRuleMethods in a rules file.
	Methods []string
	// Algorithm is the rule's algorithm; zero means Options.DefaultAlgorithm
	// (shardlimit.FixedWindow unless set).
	// In JSON a name accepted by shardlimit.ParseAlgorithm.
	Algorithm shardlimit.Algorithm
	// Limit is the default number of requests (cost units) per window per
	// client, in [0, shardlimit.MaxLimit] ([0, MaxSlidingLogLimit] for the
	// sliding log); 0 denies every request. Required in JSON unless Limits
	// is given.
	Limit int
	// Window is the period of the limit, in [1ns, shardlimit.MaxWindow]
	// in Go and in [MinFileWindow, shardlimit.MaxWindow], at least 1 ms, in
	// a rules file. In JSON a Go duration string such as "1m" or "500ms"
	// ("8760h" for a year).
	Window time.Duration
	// Limits, in place of Limit and Window (which must then be zero, and
	// absent in JSON), gives the rule several limits, each over a window
	// of its own: say 3 per second and 10 per minute, so that a client can
	// neither spend its minute in a burst nor exceed it at a steady pace.
	// A request is admitted only if every limit admits it, and then counts
	// against all of them; a request any limit denies counts against none
	// (shardlimit.Config.Rates). At most shardlimit.MaxRates limits, each
	// window at most once, each limit and window in the ranges of Limit
	// and Window. The order does not matter. In JSON:
	//
	//	"limits": [{"limit": 3, "window": "1s"}, {"limit": 10, "window": "1m"}]
	//
	// The X-RateLimit fields of a response report the binding limit, the
	// one with the least remaining after the request (see HeaderConfig).
	// A tier with other numbers gives them in its own rule; a client, in
	// an Override with Limits.
	Limits []Rate
	// Buckets is the sliding counter's number of sub-windows; 0 means
	// shardlimit.DefaultBuckets. Ignored by the other algorithms.
	Buckets int
	// Policy is the rule's IETF policy name (RateLimit-Policy,
	// RateLimit); empty means HeaderConfig.PolicyName, and failing that
	// the rule's Name (made printable ASCII by PolicyNameOf), so that two
	// rules send two names. Printable ASCII only; at most MaxNameBytes
	// bytes in a rules file. A rule of several limits names each after it,
	// followed by "-" and the limit's window ("baz-1s", "baz-1m"), unless
	// the limit has a Policy of its own (see PolicyNames).
	Policy string

	// Shadow puts the rule in shadow: it decides and counts the requests
	// it matches (its limiter's Allowed and Denied, the latter its
	// would-denials; RuleStats.Shadow, Stats.ShadowWouldDeny) but never
	// answers one, and writes no field. Shadow rules are matched apart from
	// the others, with the same precedence, so a request may be decided
	// by one enforced rule and one shadow rule of the same route: try a
	// lower limit beside the enforced one and compare their counters
	// before switching. A shadow rule without an enforced rule on its
	// route is fine. In JSON "shadow": true.
	Shadow bool
	// Exempt and Deny list clients this rule does not limit (their
	// requests pass uncounted by it, without its fields) or refuses with
	// 403 Forbidden, uncounted, when it is the rule matched; on a shadow
	// rule a denial is a would-denial, counted, and the request passes. The
	// rule set's lists (Rules.Exempt, Rules.Deny) apply before them. In
	// JSON "exempt" and "deny", each a ClientList.
	Exempt, Deny ClientList
	// Count says which responses count against the rule's limits:
	// CountAll ("" too, the default), CountFailed or CountSuccessful. In
	// JSON "count": "all", "failed" or "successful". A response that does
	// not count is refunded after the handler (see "Settling after the
	// handler" in the package documentation). A shadow rule counts every
	// response: Count and CostHeader are refused on it.
	Count CountOutcome
	// CostHeader, if set, names a response header (an HTTP field name,
	// not one the middleware writes nor Content-Length, Content-Type and
	// the other framing fields) in which the handler reports the
	// request's final cost in units, a decimal integer in
	// [0, shardlimit.MaxLimit]: say the tokens an answer took. The
	// difference to the cost decided before the handler is settled after
	// it (an overdraft or a refund). The header is removed from the
	// response: it never reaches the client. In JSON "cost_header".
	CostHeader string
	// Ban, if set, bans a client after repeated denials of this rule (see
	// Ban). In JSON "ban".
	Ban *Ban
	// Concurrency, if set, caps the requests a client has in flight on
	// this rule (see Concurrency). In JSON "concurrency".
	Concurrency *Concurrency
}

// Rate is one limit of a rule of several (Rule.Limits), or one limit of
// an override's (Override.Limits): at most Limit requests (cost units) per
// client in each Window. Its JSON form is
//
//	{"limit": 3, "window": "1s"}
//
// with an optional "policy" in a rule's limits.
type Rate struct {
	// Limit is the number of requests (cost units) per window, in the
	// range of Rule.Limit; 0 denies every request. Required in JSON.
	Limit int
	// Window is the period of the limit, in [1ns, shardlimit.MaxWindow]
	// in Go and in [MinFileWindow, shardlimit.MaxWindow], at least 1 ms, in
	// a rules file. In JSON a Go duration string such as "1s" or "1m";
	// required.
	Window time.Duration
	// Policy is this limit's IETF policy name (RateLimit-Policy,
	// RateLimit), printable ASCII, at most MaxNameBytes bytes in a rules
	// file; empty means the name PolicyNames derives. Only in a rule's
	// limits, not in an override's.
	Policy string
}

// Rates returns the rule's limits: Limits, or the one of Limit and Window.
// The slice is Limits itself or a new one; do not modify it.
func (r *Rule) Rates() []Rate {
	if len(r.Limits) > 0 {
		return r.Limits
	}
	return []Rate{{Limit: r.Limit, Window: r.Window}}
}

// PolicyNames returns the IETF policy name of each of the rule's limits,
// in the order of Rates, for def the middleware's HeaderConfig.PolicyName.
// A limit's own Policy comes first; failing that, the rule's base name
// is r.Policy, else def, else the rule's Name (PolicyNameOf(r.Name)), else
// (a rule without a name, which Validate refuses) DefaultPolicyName. A
// rule of one limit is named its base name; a rule of several names each
// limit its base name, "-" and its window in the largest Go duration unit
// that divides it ("baz-1s", "baz-1m", "api-90s", "api-500ms", "api-24h").
// Names are meant to be unique within a rule; Validate checks that they
// are. Every name is printable ASCII, so it can be written as a
// structured-field string.
func (r *Rule) PolicyNames(def string) []string {
	base := r.Policy
	if base == "" {
		base = def
	}
	if base == "" {
		base = PolicyNameOf(r.Name)
	}
	if base == "" {
		base = DefaultPolicyName
	}
	rates := r.Rates()
	out := make([]string, len(rates))
	for i, rt := range rates {
		switch {
		case rt.Policy != "":
			out[i] = rt.Policy
		case len(rates) == 1:
			out[i] = base
		default:
			out[i] = base + "-" + shortWindow(rt.Window)
		}
	}
	return out
}

// PolicyNameOf returns the IETF policy name of a rule named name that
// names none of its own: name itself if it is printable ASCII (bytes 0x20
// to 0x7e) without '%', else name with each other byte and '%' written as
// '%' and two upper-case hexadecimal digits, as in a URL ("café" is
// "caf%C3%A9", "50%" is "50%25"). The result is always printable ASCII,
// so a structured-field string (RFC 9651, section 3.3.3), and distinct
// names give distinct results.
func PolicyNameOf(name string) string {
	i := 0
	for i < len(name) && name[i] >= 0x20 && name[i] <= 0x7e && name[i] != '%' {
		i++
	}
	if i == len(name) {
		return name
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, i, len(name)+16)
	copy(b, name)
	for ; i < len(name); i++ {
		if c := name[i]; c >= 0x20 && c <= 0x7e && c != '%' {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		}
	}
	return string(b)
}

// shortWindow formats w in the largest of h, m, s, ms, us and ns that
// divides it: "1s", "1m", "90s", "24h", "1500ms". ASCII only.
func shortWindow(w time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if w%u.d == 0 {
			return strconv.FormatInt(int64(w/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(w), 10) + "ns"
}

// Override gives one client a limit of its own on one rule or on every rule
// (shardlimit.Limiter.SetLimits); the key keeps its usage when the limit
// changes. Exactly one of ID and IP is set, and Limit or Limits.
type Override struct {
	// Rule names the rule; empty means every rule.
	Rule string
	// ID is a client identity (KeyConfig.Header value or key function
	// result); naming it makes it a key of its own on every rule (see
	// KeyConfig.UnknownIdentity).
	ID string
	// IP is a client address; it covers the client's whole prefix group
	// (KeyConfig.IPv4Prefix, IPv6Prefix). Two overrides on the same rule
	// (or both on every rule) whose addresses are in one group, such as
	// 2001:db8::1 and 2001:db8::ffff under the default /64, are refused
	// when the middleware compiles the rules (New, Reload): one would
	// silently replace the other.
	IP string
	// Limit is the client's limit, in the range of Rule.Limit; 0 blocks the
	// client (429 without Retry-After). On a rule of several limits (see
	// Rule.Limits) only 0 is accepted, which blocks the client in every
	// window: other numbers go per window in Limits. Required in JSON
	// unless Limits is given.
	Limit int
	// Limits, in place of Limit (which must then be 0, and absent in
	// JSON), gives the client its own limit in some or all of the rule's
	// windows; each Window must be one of the rule's, at most once, and
	// Policy empty. Windows it does not list keep the rule's limit. Rule
	// is required. In JSON:
	//
	//	{"rule": "baz", "id": "batch-job", "limits": [{"limit": 50, "window": "1m"}]}
	Limits []Rate
}
