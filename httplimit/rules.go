package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/netprefix"
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
// overrides per window ("limits", see Override.Limits).
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
// overrides, MaxRuleMethods methods per rule, names (and policy names) of
// at most MaxNameBytes bytes, and windows of at least MinFileWindow
// (1 ms). Every error wraps shardlimit.ErrInvalidConfig and names the
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

// rateJSON is Rate's JSON form.
type rateJSON struct {
	Limit  *int   `json:"limit"`
	Window string `json:"window"`
	Policy string `json:"policy,omitempty"`
}

// toJSON returns rt's JSON form.
func (rt Rate) toJSON() rateJSON {
	return rateJSON{Limit: &rt.Limit, Window: rt.Window.String(), Policy: rt.Policy}
}

// rate returns the Rate j describes; what names its rule or override in
// errors.
func (j rateJSON) rate(what string) (Rate, error) {
	if j.Limit == nil {
		return Rate{}, fmt.Errorf("%w: %s: a limit in \"limits\" has no \"limit\"", shardlimit.ErrInvalidConfig, what)
	}
	if j.Window == "" {
		return Rate{}, fmt.Errorf("%w: %s: a limit in \"limits\" has no \"window\"", shardlimit.ErrInvalidConfig, what)
	}
	w, err := time.ParseDuration(j.Window)
	if err != nil {
		return Rate{}, fmt.Errorf("%w: %s: window: %v", shardlimit.ErrInvalidConfig, what, err)
	}
	if err := checkFileWindow(what, w); err != nil {
		return Rate{}, err
	}
	if err := checkFilePolicy(what, j.Policy); err != nil {
		return Rate{}, err
	}
	return Rate{Limit: *j.Limit, Window: w, Policy: j.Policy}, nil
}

// ratesFromJSON returns the Rates js describe, for the rule or override
// what: at most shardlimit.MaxRates.
func ratesFromJSON(js []rateJSON, what string) ([]Rate, error) {
	if len(js) == 0 {
		return nil, fmt.Errorf("%w: %s: \"limits\" is empty", shardlimit.ErrInvalidConfig, what)
	}
	if len(js) > shardlimit.MaxRates {
		return nil, fmt.Errorf("%w: %s: %d limits, at most %d (shardlimit.MaxRates)", shardlimit.ErrInvalidConfig, what, len(js), shardlimit.MaxRates)
	}
	out := make([]Rate, len(js))
	for i, j := range js {
		rt, err := j.rate(what)
		if err != nil {
			return nil, err
		}
		out[i] = rt
	}
	return out, nil
}

// ratesToJSON returns the JSON form of rs.
func ratesToJSON(rs []Rate) []rateJSON {
	out := make([]rateJSON, len(rs))
	for i, rt := range rs {
		out[i] = rt.toJSON()
	}
	return out
}

// MarshalJSON implements json.Marshaler with the form UnmarshalJSON reads.
func (rt Rate) MarshalJSON() ([]byte, error) { return json.Marshal(rt.toJSON()) }

// UnmarshalJSON implements json.Unmarshaler: {"limit": 3, "window": "1s"},
// with an optional "policy". It rejects a key given twice, unknown
// fields, a missing limit or window, a window that is not a Go duration
// string or is shorter than MinFileWindow, and a policy name longer than
// MaxNameBytes, with errors wrapping shardlimit.ErrInvalidConfig.
func (rt *Rate) UnmarshalJSON(b []byte) error {
	var j rateJSON
	if err := decodeFile(b, &j, "rate"); err != nil {
		return err
	}
	v, err := j.rate("rate")
	if err != nil {
		return err
	}
	*rt = v
	return nil
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

// ruleJSON is Rule's JSON form.
type ruleJSON struct {
	Name      string      `json:"name"`
	Path      string      `json:"path,omitempty"`
	Prefix    string      `json:"prefix,omitempty"`
	Methods   []string    `json:"methods,omitempty"`
	Algorithm string      `json:"algorithm,omitempty"`
	Limit     *int        `json:"limit,omitempty"`
	Window    string      `json:"window,omitempty"`
	Limits    *[]rateJSON `json:"limits,omitempty"`
	Buckets   int         `json:"buckets,omitempty"`
	Policy    string      `json:"policy,omitempty"`
}

// MarshalJSON implements json.Marshaler with the form UnmarshalJSON reads:
// "limit" and "window", or "limits" when Limits is set.
func (r Rule) MarshalJSON() ([]byte, error) {
	j := ruleJSON{
		Name: r.Name, Path: r.Path, Prefix: r.Prefix, Methods: r.Methods,
		Buckets: r.Buckets, Policy: r.Policy,
	}
	if len(r.Limits) > 0 {
		ls := ratesToJSON(r.Limits)
		j.Limits = &ls
	} else {
		j.Limit, j.Window = &r.Limit, r.Window.String()
	}
	if r.Algorithm != 0 {
		j.Algorithm = r.Algorithm.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler. It rejects a key given twice,
// unknown fields, a missing limit or window, a rule giving both
// "limit"/"window" and "limits", an unknown algorithm, a window that is
// not a Go duration string or is shorter than MinFileWindow, a name or
// policy name longer than MaxNameBytes and more than MaxRuleMethods
// methods or shardlimit.MaxRates limits, with errors wrapping
// shardlimit.ErrInvalidConfig and naming the rule.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var j ruleJSON
	if err := decodeFile(b, &j, "rule"); err != nil {
		return err
	}
	if err := checkFileName("rule", j.Name); err != nil {
		return err
	}
	what := "rule " + quoteName(j.Name)
	if len(j.Methods) > MaxRuleMethods {
		return fmt.Errorf("%w: %s: %d methods, more than the %d (MaxRuleMethods) a rule may list",
			shardlimit.ErrInvalidConfig, what, len(j.Methods), MaxRuleMethods)
	}
	if err := checkFilePolicy(what, j.Policy); err != nil {
		return err
	}
	out := Rule{Name: j.Name, Path: j.Path, Prefix: j.Prefix, Methods: j.Methods,
		Buckets: j.Buckets, Policy: j.Policy}
	if j.Algorithm != "" {
		a, err := shardlimit.ParseAlgorithm(j.Algorithm)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		out.Algorithm = a
	}
	if j.Limits != nil {
		if j.Limit != nil || j.Window != "" {
			return fmt.Errorf("%w: %s: both \"limit\"/\"window\" and \"limits\" given; use \"limits\" alone for several limits",
				shardlimit.ErrInvalidConfig, what)
		}
		ls, err := ratesFromJSON(*j.Limits, what)
		if err != nil {
			return err
		}
		out.Limits = ls
		*r = out
		return nil
	}
	if j.Limit == nil {
		return fmt.Errorf("%w: %s: missing limit (\"limit\" and \"window\", or \"limits\")", shardlimit.ErrInvalidConfig, what)
	}
	out.Limit = *j.Limit
	if j.Window == "" {
		return fmt.Errorf("%w: %s: missing window", shardlimit.ErrInvalidConfig, what)
	}
	w, err := time.ParseDuration(j.Window)
	if err != nil {
		return fmt.Errorf("%w: %s: window: %v", shardlimit.ErrInvalidConfig, what, err)
	}
	if err := checkFileWindow(what, w); err != nil {
		return err
	}
	out.Window = w
	*r = out
	return nil
}

// overrideJSON is Override's JSON form.
type overrideJSON struct {
	Rule   string      `json:"rule,omitempty"`
	ID     string      `json:"id,omitempty"`
	IP     string      `json:"ip,omitempty"`
	Limit  *int        `json:"limit,omitempty"`
	Limits *[]rateJSON `json:"limits,omitempty"`
}

// MarshalJSON implements json.Marshaler with the form UnmarshalJSON reads:
// "limit", or "limits" when Limits is set.
func (o Override) MarshalJSON() ([]byte, error) {
	j := overrideJSON{Rule: o.Rule, ID: o.ID, IP: o.IP}
	if len(o.Limits) > 0 {
		ls := ratesToJSON(o.Limits)
		j.Limits = &ls
	} else {
		j.Limit = &o.Limit
	}
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler, rejecting a key given twice,
// unknown fields, a missing limit, an override giving both "limit" and
// "limits", more than shardlimit.MaxRates limits and a window shorter
// than MinFileWindow, with errors wrapping shardlimit.ErrInvalidConfig
// and naming the override.
func (o *Override) UnmarshalJSON(b []byte) error {
	var j overrideJSON
	if err := decodeFile(b, &j, "override"); err != nil {
		return err
	}
	what := "override " + quoteName(j.ID+j.IP)
	out := Override{Rule: j.Rule, ID: j.ID, IP: j.IP}
	switch {
	case j.Limits != nil && j.Limit != nil:
		return fmt.Errorf("%w: %s: both \"limit\" and \"limits\" given", shardlimit.ErrInvalidConfig, what)
	case j.Limits != nil:
		ls, err := ratesFromJSON(*j.Limits, what)
		if err != nil {
			return err
		}
		out.Limits = ls
	case j.Limit != nil:
		out.Limit = *j.Limit
	default:
		return fmt.Errorf("%w: %s: missing limit (\"limit\", or \"limits\" per window)", shardlimit.ErrInvalidConfig, what)
	}
	*o = out
	return nil
}

// decodeStrict decodes one JSON value from b into v, rejecting unknown
// fields and trailing data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, shardlimit.ErrInvalidConfig) {
			return err
		}
		return fmt.Errorf("%w: %w", shardlimit.ErrInvalidConfig, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON value", shardlimit.ErrInvalidConfig)
	}
	return nil
}

// decodeFile decodes one JSON value of a rules file from b into v, the
// JSON form of a kind ("rule", "override", "rate"): it rejects a key given
// twice, naming it and the rule or override, then decodes as decodeStrict
// does.
func decodeFile(b []byte, v any, kind string) error {
	if err := checkDuplicateKeys(b); err != nil {
		var dup *dupKeyError
		if !errors.As(err, &dup) {
			return err
		}
		// Name the rule (or override) as far as b decodes.
		var id struct{ Name, ID, IP string }
		_ = json.Unmarshal(b, &id)
		name := id.Name
		if kind == "override" {
			name = id.ID + id.IP
		}
		if kind == "rate" {
			return fmt.Errorf("%w: %w", shardlimit.ErrInvalidConfig, dup)
		}
		return fmt.Errorf("%w: %s %s: %w", shardlimit.ErrInvalidConfig, kind, quoteName(name), dup)
	}
	return decodeStrict(b, v)
}

// ParseRules decodes and validates a JSON rules file (see Rules for the
// format, MaxRulesFileBytes for its caps). Errors wrap
// shardlimit.ErrInvalidConfig and name the offending rule, tier or
// override, or the cap exceeded; a file without rules that does not say
// "limiting": "off" is an error wrapping ErrNoRules too.
func ParseRules(data []byte) (*Rules, error) {
	if len(data) > MaxRulesFileBytes {
		return nil, errFileTooLarge(int64(len(data)), true)
	}
	if err := checkFileText(data); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: %w: the rule file is empty; to turn limiting off on purpose, say so: {\"limiting\": \"off\"}",
			shardlimit.ErrInvalidConfig, ErrNoRules)
	}
	var r Rules
	if err := decodeStrict(data, &r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate reports the first structural error in r, wrapping
// shardlimit.ErrInvalidConfig (and ErrNoRules for a rule set without rules
// that does not say Limiting: LimitingOff). Rules without an algorithm are
// checked as fixed windows, and policy names as derived without a
// HeaderConfig.PolicyName (from the rules' names); the middleware checks
// them again with its Options.DefaultAlgorithm and HeaderConfig.PolicyName.
// It does not apply the caps of a rules file (MaxRulesFileBytes and the
// others), which decoding one applies.
func (r *Rules) Validate() error {
	return r.validate(shardlimit.FixedWindow, "")
}

// NumRules returns the number of rules in r, default and tier rules.
func (r *Rules) NumRules() int {
	n := len(r.Rules)
	for _, t := range r.Tiers {
		n += len(t.Rules)
	}
	return n
}

// ruleInfo is what checking overrides needs of a rule.
type ruleInfo struct {
	alg     shardlimit.Algorithm
	windows []time.Duration
}

// validate is Validate for rules without an algorithm running defAlg and
// policy names derived from policyName.
func (r *Rules) validate(defAlg shardlimit.Algorithm, policyName string) error {
	if off, err := r.checkLimiting(); off || err != nil {
		return err
	}
	if err := r.checkNamesAndCaps(); err != nil {
		return err
	}
	v := validator{defAlg: defAlg, policyName: policyName, names: map[string]ruleInfo{}}
	if err := v.checkRules("", r.Rules); err != nil {
		return err
	}
	if err := v.checkTiers(r.Tiers); err != nil {
		return err
	}
	return v.checkOverrides(r.Overrides)
}

// invalid returns an error wrapping shardlimit.ErrInvalidConfig with the
// message format makes of args.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{shardlimit.ErrInvalidConfig}, args...)...)
}

// checkLimiting checks r.Limiting against the rules r holds, and reports
// whether limiting is off (so there is nothing more to check).
func (r *Rules) checkLimiting() (off bool, err error) {
	switch r.Limiting {
	case "", LimitingOn:
		if r.NumRules() == 0 {
			return false, fmt.Errorf("%w: %w in the rule set; to turn limiting off on purpose, say so: {\"limiting\": \"off\"} (Rules.Limiting = LimitingOff)",
				shardlimit.ErrInvalidConfig, ErrNoRules)
		}
		return false, nil
	case LimitingOff:
		if r.NumRules() > 0 || len(r.Tiers) > 0 || len(r.Overrides) > 0 {
			return true, invalid("limiting is off but the rule set lists rules, tiers or overrides")
		}
		return true, nil
	default:
		return false, invalid("limiting %q is neither %q nor %q", r.Limiting, LimitingOn, LimitingOff)
	}
}

// validator is what validating a rule set has learnt so far of its rules.
type validator struct {
	defAlg     shardlimit.Algorithm // for rules without an algorithm
	policyName string               // HeaderConfig.PolicyName
	names      map[string]ruleInfo  // the rules checked, by name
	order      []string             // their names in order, for deterministic errors
}

// route is what two rules of one tier must not share: a path (or prefix)
// and a method ("" for any).
type route struct {
	path    string
	prefix  bool
	methods string
}

// checkRules checks the rules of tier ("" for the default rules): each
// rule alone, then that no two share a route and method.
func (v *validator) checkRules(tier string, rules []Rule) error {
	seen := map[route]string{}
	for i := range rules {
		ru := &rules[i]
		if err := v.checkRule(tier, ru); err != nil {
			return err
		}
		if err := checkRoute(seen, ru); err != nil {
			return err
		}
		if err := checkPolicyName(ru.Policy); err != nil {
			return invalid("rule %q: %v", ru.Name, err)
		}
	}
	return nil
}

// checkRule checks the name, algorithm, limits and buckets of ru, a rule
// of tier, and records it in v.
func (v *validator) checkRule(tier string, ru *Rule) error {
	if ru.Name == "" {
		return invalid("tier %q: a rule has no name", tier)
	}
	if _, dup := v.names[ru.Name]; dup {
		return invalid("rule %q: name used twice", ru.Name)
	}
	alg := ru.Algorithm
	if alg == 0 {
		alg = v.defAlg
	}
	if alg < shardlimit.FixedWindow || alg > shardlimit.GCRA {
		return invalid("rule %q: unknown algorithm %d", ru.Name, int(alg))
	}
	info, err := checkRates(alg, ru, v.policyName)
	if err != nil {
		return invalid("rule %q: %v", ru.Name, err)
	}
	v.names[ru.Name] = info
	v.order = append(v.order, ru.Name)
	if ru.Buckets < 0 || ru.Buckets > shardlimit.MaxBuckets {
		return invalid("rule %q: buckets %d outside [0, %d]", ru.Name, ru.Buckets, shardlimit.MaxBuckets)
	}
	return nil
}

// checkRoute checks the path or prefix and the methods of ru, and that no
// rule in seen (the routes of its tier so far, by the rule naming them)
// has its route and one of its methods; it adds ru's routes to seen.
func checkRoute(seen map[route]string, ru *Rule) error {
	if ru.Path != "" && ru.Prefix != "" {
		return invalid("rule %q: both path and prefix set", ru.Name)
	}
	rt := route{path: ru.Path}
	if ru.Path == "" {
		rt = route{path: ru.Prefix, prefix: true}
		if rt.path == "" {
			rt.path = "/"
		}
	}
	if !strings.HasPrefix(rt.path, "/") {
		return invalid("rule %q: path %q does not start with /", ru.Name, rt.path)
	}
	ms := make([]string, 0, len(ru.Methods))
	for _, m := range ru.Methods {
		if m == "" || strings.ContainsAny(m, " \t\r\n,") {
			return invalid("rule %q: bad method %q", ru.Name, m)
		}
		ms = append(ms, strings.ToUpper(m))
	}
	slices.Sort(ms)
	for _, m := range ms {
		rt.methods = m
		if prev, dup := seen[rt]; dup {
			return invalid("rule %q: same route and method as rule %q", ru.Name, prev)
		}
		seen[rt] = ru.Name
	}
	if len(ms) == 0 {
		rt.methods = ""
		if prev, dup := seen[rt]; dup {
			return invalid("rule %q: same route as rule %q", ru.Name, prev)
		}
		seen[rt] = ru.Name
	}
	return nil
}

// checkTiers checks each tier's name, clients, networks and rules, and
// that no name or client is in two tiers.
func (v *validator) checkTiers(ts []Tier) error {
	tiers := map[string]bool{}
	clients := map[string]string{}
	for _, t := range ts {
		if t.Name == "" {
			return invalid("a tier has no name")
		}
		if tiers[t.Name] {
			return invalid("tier %q: name used twice", t.Name)
		}
		tiers[t.Name] = true
		for _, c := range t.Clients {
			if c == "" {
				return invalid("tier %q: empty client", t.Name)
			}
			if prev, dup := clients[c]; dup {
				return invalid("tier %q: client %q already in tier %q", t.Name, c, prev)
			}
			clients[c] = t.Name
		}
		for _, n := range t.Networks {
			if _, err := netprefix.Parse(n); err != nil {
				return invalid("tier %q: network %q: %v", t.Name, n, err)
			}
		}
		if err := v.checkRules(t.Name, t.Rules); err != nil {
			return err
		}
	}
	return nil
}

// overrideKey is what two overrides must not share: a rule and a client.
type overrideKey struct{ rule, id, ip string }

// checkOverrides checks each override against the rule it names (every
// rule if it names none), and that no client has two on one rule.
func (v *validator) checkOverrides(overrides []Override) error {
	seen := map[overrideKey]bool{}
	for i := range overrides {
		o := &overrides[i]
		what := o.ID + o.IP
		if (o.ID == "") == (o.IP == "") {
			return invalid("override %q: exactly one of id and ip must be set", what)
		}
		k := overrideKey{rule: o.Rule, id: o.ID}
		if o.IP != "" {
			a, err := netip.ParseAddr(o.IP)
			if err != nil {
				return invalid("override %q: %v", what, err)
			}
			k.ip = a.Unmap().WithZone("").String()
		}
		if seen[k] {
			return invalid("override %q: listed twice for rule %q", what, o.Rule)
		}
		seen[k] = true
		if err := v.checkOverrideRules(o); err != nil {
			return err
		}
	}
	return nil
}

// checkOverrideRules checks o against the rule it names, or against every
// rule if it names none.
func (v *validator) checkOverrideRules(o *Override) error {
	what := o.ID + o.IP
	if o.Rule == "" {
		if len(o.Limits) > 0 {
			return invalid("override %q: limits per window need a rule: name it in \"rule\"", what)
		}
		for _, name := range v.order {
			if err := checkOverride(v.names[name], o); err != nil {
				return invalid("override %q on rule %q: %v", what, name, err)
			}
		}
		return nil
	}
	info, ok := v.names[o.Rule]
	if !ok {
		return invalid("override %q: no rule %q", what, o.Rule)
	}
	if err := checkOverride(info, o); err != nil {
		return invalid("override %q on rule %q: %v", what, o.Rule, err)
	}
	return nil
}

// checkRates checks the limits of ru, a rule running alg, whose policy
// names derive from policyName, and returns its ruleInfo.
func checkRates(alg shardlimit.Algorithm, ru *Rule, policyName string) (ruleInfo, error) {
	info := ruleInfo{alg: alg}
	if len(ru.Limits) > 0 {
		if ru.Limit != 0 || ru.Window != 0 {
			return info, errors.New("both limit and window, and limits, set: give one form")
		}
		if len(ru.Limits) > shardlimit.MaxRates {
			return info, fmt.Errorf("%d limits, at most %d", len(ru.Limits), shardlimit.MaxRates)
		}
	}
	for _, rt := range ru.Rates() {
		if err := checkRuleLimit(alg, rt.Limit); err != nil {
			return info, err
		}
		if rt.Window <= 0 || rt.Window > shardlimit.MaxWindow {
			return info, fmt.Errorf("window %v outside [1ns, %v]", rt.Window, shardlimit.MaxWindow)
		}
		if slices.Contains(info.windows, rt.Window) {
			return info, fmt.Errorf("window %v given twice in limits", rt.Window)
		}
		if err := checkPolicyName(rt.Policy); err != nil {
			return info, err
		}
		info.windows = append(info.windows, rt.Window)
	}
	names := ru.PolicyNames(policyName)
	for i, n := range names {
		if j := slices.Index(names, n); j < i {
			return info, fmt.Errorf("policy name %q names two of its limits (windows %v and %v)", n, info.windows[j], info.windows[i])
		}
	}
	return info, nil
}

// checkOverride checks override o against the rule info describes.
func checkOverride(info ruleInfo, o *Override) error {
	if len(o.Limits) == 0 {
		if err := checkRuleLimit(info.alg, o.Limit); err != nil {
			return err
		}
		if o.Limit != 0 && len(info.windows) > 1 {
			return fmt.Errorf("limit %d on a rule of %d limits (windows %v): give \"limits\" per window (or \"limit\": 0 to block the client)",
				o.Limit, len(info.windows), info.windows)
		}
		return nil
	}
	if o.Limit != 0 {
		return errors.New("both limit and limits set: give one form")
	}
	var seen []time.Duration
	for _, rt := range o.Limits {
		if !slices.Contains(info.windows, rt.Window) {
			return fmt.Errorf("the rule has no %v window (its windows: %v)", rt.Window, info.windows)
		}
		if slices.Contains(seen, rt.Window) {
			return fmt.Errorf("window %v given twice", rt.Window)
		}
		seen = append(seen, rt.Window)
		if rt.Policy != "" {
			return fmt.Errorf("policy %q in an override: policy names belong to the rule's limits", rt.Policy)
		}
		if err := checkRuleLimit(info.alg, rt.Limit); err != nil {
			return err
		}
	}
	return nil
}

// checkRuleLimit checks limit against alg's range.
func checkRuleLimit(alg shardlimit.Algorithm, limit int) error {
	hi := shardlimit.MaxLimit
	if alg == shardlimit.SlidingLog {
		hi = shardlimit.MaxSlidingLogLimit
	}
	if limit < 0 || limit > hi {
		return fmt.Errorf("limit %d outside [0, %d]", limit, hi)
	}
	return nil
}

// checkPolicyName checks that s can be written as a structured-field
// string: printable ASCII (RFC 9651, section 3.3.3).
func checkPolicyName(s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("policy name %q is not printable ASCII", s)
		}
	}
	return nil
}
