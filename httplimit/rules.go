package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
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
//	    {"name": "foo", "path": "/foo", "algorithm": "fixed_window", "limit": 5, "window": "1m"}
//	  ],
//	  "tiers": [
//	    {"name": "gold", "clients": ["client-2"], "networks": ["10.0.0.0/8"], "rules": [
//	      {"name": "gold-foo", "path": "/foo", "algorithm": "fixed_window", "limit": 20, "window": "1m"}
//	    ]}
//	  ],
//	  "overrides": [
//	    {"rule": "foo", "ip": "203.0.113.7", "limit": 2},
//	    {"rule": "foo", "id": "blocked-key", "limit": 0}
//	  ]
//	}
//
// and, to turn limiting off on purpose (no rules, tiers or overrides):
//
//	{"limiting": "off"}
//
// Unknown fields are errors, so a misspelt field never silently drops a
// limit.
type Rules struct {
	// Limiting is LimitingOff to say that the rule set limits nothing on
	// purpose; empty means LimitingOn. In JSON "on" or "off".
	Limiting Limiting `json:"limiting,omitempty"`

	// Rules apply to clients in no tier, and to tier clients on routes
	// their tier's rules do not match.
	Rules []Rule `json:"rules,omitempty"`
	// Tiers group clients that get rules of their own.
	Tiers []Tier `json:"tiers,omitempty"`
	// Overrides give single clients a limit of their own on a rule.
	Overrides []Override `json:"overrides,omitempty"`
}

// Tier is a group of clients with rules of their own. A request belongs to
// the first tier listing its identity in Clients; failing that, to the first
// tier whose Networks contain its client address; failing that, to the
// default rules. A tier client whose route matches none of the tier's rules
// is matched against the default rules.
type Tier struct {
	// Name identifies the tier in Decision.Tier; required and unique.
	Name string `json:"name"`
	// Clients are identities (KeyConfig.Header values or key function
	// results), compared byte for byte. A listed identity is a key of its
	// own (see KeyConfig.UnknownIdentity for the others).
	Clients []string `json:"clients,omitempty"`
	// Networks are client networks, CIDR or single addresses.
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
	// and unique over the whole Rules value. A reload keeps the counters of
	// a rule whose name, algorithm, window and buckets are unchanged (see
	// "Reloading rules" in the package documentation).
	Name string
	// Path matches a request path exactly ("/foo" matches only "/foo").
	Path string
	// Prefix matches a path and everything below it: "/api" matches "/api"
	// and "/api/x" but not "/apix"; "/api/" matches "/api/" and "/api/x".
	// At most one of Path and Prefix may be set.
	Prefix string
	// Methods restricts the rule to these request methods (compared after
	// upper-casing the rule's names). Empty matches every method.
	Methods []string
	// Algorithm is the rule's algorithm; zero means Options.DefaultAlgorithm
	// (shardlimit.FixedWindow unless set).
	// In JSON a name accepted by shardlimit.ParseAlgorithm.
	Algorithm shardlimit.Algorithm
	// Limit is the default number of requests (cost units) per window per
	// client, in [0, shardlimit.MaxLimit] ([0, MaxSlidingLogLimit] for the
	// sliding log); 0 denies every request. Required in JSON.
	Limit int
	// Window is the period of the limit, in [1ns, shardlimit.MaxWindow]. In
	// JSON a Go duration string such as "1m" or "500ms" ("8760h" for a
	// year).
	Window time.Duration
	// Buckets is the sliding counter's number of sub-windows; 0 means
	// shardlimit.DefaultBuckets. Ignored by the other algorithms.
	Buckets int
	// Policy is the rule's IETF policy name (RateLimit-Policy,
	// RateLimit); empty means HeaderConfig.PolicyName. Printable ASCII only.
	Policy string
}

// Override gives one client a limit of its own on one rule or on every rule
// (shardlimit.Limiter.SetLimit); the key keeps its usage when the limit
// changes. Exactly one of ID and IP is set.
type Override struct {
	// Rule names the rule; empty means every rule.
	Rule string `json:"rule,omitempty"`
	// ID is a client identity (KeyConfig.Header value or key function
	// result); naming it makes it a key of its own on every rule (see
	// KeyConfig.UnknownIdentity).
	ID string `json:"id,omitempty"`
	// IP is a client address; it covers the client's whole prefix group
	// (KeyConfig.IPv4Prefix, IPv6Prefix).
	IP string `json:"ip,omitempty"`
	// Limit is the client's limit, in the range of Rule.Limit; 0 blocks the
	// client (429 without Retry-After). Required in JSON.
	Limit int `json:"limit"`
}

// ruleJSON is Rule's JSON form.
type ruleJSON struct {
	Name      string   `json:"name"`
	Path      string   `json:"path,omitempty"`
	Prefix    string   `json:"prefix,omitempty"`
	Methods   []string `json:"methods,omitempty"`
	Algorithm string   `json:"algorithm,omitempty"`
	Limit     *int     `json:"limit"`
	Window    string   `json:"window"`
	Buckets   int      `json:"buckets,omitempty"`
	Policy    string   `json:"policy,omitempty"`
}

// MarshalJSON implements json.Marshaler with the form UnmarshalJSON reads.
func (r Rule) MarshalJSON() ([]byte, error) {
	j := ruleJSON{
		Name: r.Name, Path: r.Path, Prefix: r.Prefix, Methods: r.Methods,
		Limit: &r.Limit, Window: r.Window.String(), Buckets: r.Buckets, Policy: r.Policy,
	}
	if r.Algorithm != 0 {
		j.Algorithm = r.Algorithm.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler. It rejects unknown fields, a
// missing limit, an unknown algorithm and a window that is not a Go
// duration string, with errors wrapping shardlimit.ErrInvalidConfig.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var j ruleJSON
	if err := decodeStrict(b, &j); err != nil {
		return err
	}
	if j.Limit == nil {
		return fmt.Errorf("%w: rule %q: missing limit", shardlimit.ErrInvalidConfig, j.Name)
	}
	out := Rule{Name: j.Name, Path: j.Path, Prefix: j.Prefix, Methods: j.Methods,
		Limit: *j.Limit, Buckets: j.Buckets, Policy: j.Policy}
	if j.Algorithm != "" {
		a, err := shardlimit.ParseAlgorithm(j.Algorithm)
		if err != nil {
			return fmt.Errorf("rule %q: %w", j.Name, err)
		}
		out.Algorithm = a
	}
	if j.Window == "" {
		return fmt.Errorf("%w: rule %q: missing window", shardlimit.ErrInvalidConfig, j.Name)
	}
	w, err := time.ParseDuration(j.Window)
	if err != nil {
		return fmt.Errorf("%w: rule %q: window: %v", shardlimit.ErrInvalidConfig, j.Name, err)
	}
	out.Window = w
	*r = out
	return nil
}

// UnmarshalJSON implements json.Unmarshaler, rejecting unknown fields and a
// missing limit.
func (o *Override) UnmarshalJSON(b []byte) error {
	var j struct {
		Rule  string `json:"rule"`
		ID    string `json:"id"`
		IP    string `json:"ip"`
		Limit *int   `json:"limit"`
	}
	if err := decodeStrict(b, &j); err != nil {
		return err
	}
	if j.Limit == nil {
		return fmt.Errorf("%w: override %q: missing limit", shardlimit.ErrInvalidConfig, j.ID+j.IP)
	}
	*o = Override{Rule: j.Rule, ID: j.ID, IP: j.IP, Limit: *j.Limit}
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

// ParseRules decodes and validates a JSON rule file (see Rules for the
// format). Errors wrap shardlimit.ErrInvalidConfig and name the offending
// rule; a file without rules that does not say "limiting": "off" is an
// error wrapping ErrNoRules too.
func ParseRules(data []byte) (*Rules, error) {
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

// LoadRules reads and parses the JSON rule file at path. Errors wrap
// shardlimit.ErrInvalidConfig, or the os error if the file cannot be read.
func LoadRules(path string) (*Rules, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := ParseRules(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Validate reports the first structural error in r, wrapping
// shardlimit.ErrInvalidConfig (and ErrNoRules for a rule set without rules
// that does not say Limiting: LimitingOff). Rules without an algorithm are
// checked as fixed windows; the middleware checks them again with its
// Options.DefaultAlgorithm.
func (r *Rules) Validate() error {
	return r.validate(shardlimit.FixedWindow)
}

// NumRules returns the number of rules in r, default and tier rules.
func (r *Rules) NumRules() int {
	n := len(r.Rules)
	for _, t := range r.Tiers {
		n += len(t.Rules)
	}
	return n
}

func (r *Rules) validate(defAlg shardlimit.Algorithm) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{shardlimit.ErrInvalidConfig}, args...)...)
	}
	switch r.Limiting {
	case "", LimitingOn:
		if r.NumRules() == 0 {
			return fmt.Errorf("%w: %w in the rule set; to turn limiting off on purpose, say so: {\"limiting\": \"off\"} (Rules.Limiting = LimitingOff)",
				shardlimit.ErrInvalidConfig, ErrNoRules)
		}
	case LimitingOff:
		if r.NumRules() > 0 || len(r.Tiers) > 0 || len(r.Overrides) > 0 {
			return bad("limiting is off but the rule set lists rules, tiers or overrides")
		}
		return nil
	default:
		return bad("limiting %q is neither %q nor %q", r.Limiting, LimitingOn, LimitingOff)
	}
	names := map[string]shardlimit.Algorithm{}
	checkTier := func(tier string, rules []Rule) error {
		type route struct {
			path    string
			prefix  bool
			methods string
		}
		seen := map[route]string{}
		for _, ru := range rules {
			if ru.Name == "" {
				return bad("tier %q: a rule has no name", tier)
			}
			if _, dup := names[ru.Name]; dup {
				return bad("rule %q: name used twice", ru.Name)
			}
			alg := ru.Algorithm
			if alg == 0 {
				alg = defAlg
			}
			if alg < shardlimit.FixedWindow || alg > shardlimit.GCRA {
				return bad("rule %q: unknown algorithm %d", ru.Name, int(alg))
			}
			names[ru.Name] = alg
			if err := checkRuleLimit(alg, ru.Limit); err != nil {
				return bad("rule %q: %v", ru.Name, err)
			}
			if ru.Window <= 0 || ru.Window > shardlimit.MaxWindow {
				return bad("rule %q: window %v outside [1ns, %v]", ru.Name, ru.Window, shardlimit.MaxWindow)
			}
			if ru.Buckets < 0 || ru.Buckets > shardlimit.MaxBuckets {
				return bad("rule %q: buckets %d outside [0, %d]", ru.Name, ru.Buckets, shardlimit.MaxBuckets)
			}
			if ru.Path != "" && ru.Prefix != "" {
				return bad("rule %q: both path and prefix set", ru.Name)
			}
			rt := route{path: ru.Path}
			if ru.Path == "" {
				rt = route{path: ru.Prefix, prefix: true}
				if rt.path == "" {
					rt.path = "/"
				}
			}
			if !strings.HasPrefix(rt.path, "/") {
				return bad("rule %q: path %q does not start with /", ru.Name, rt.path)
			}
			ms := make([]string, 0, len(ru.Methods))
			for _, m := range ru.Methods {
				if m == "" || strings.ContainsAny(m, " \t\r\n,") {
					return bad("rule %q: bad method %q", ru.Name, m)
				}
				ms = append(ms, strings.ToUpper(m))
			}
			slices.Sort(ms)
			for _, m := range ms {
				rt.methods = m
				if prev, dup := seen[rt]; dup {
					return bad("rule %q: same route and method as rule %q", ru.Name, prev)
				}
				seen[rt] = ru.Name
			}
			if len(ms) == 0 {
				rt.methods = ""
				if prev, dup := seen[rt]; dup {
					return bad("rule %q: same route as rule %q", ru.Name, prev)
				}
				seen[rt] = ru.Name
			}
			if err := checkPolicyName(ru.Policy); err != nil {
				return bad("rule %q: %v", ru.Name, err)
			}
		}
		return nil
	}
	if err := checkTier("", r.Rules); err != nil {
		return err
	}
	tiers := map[string]bool{}
	clients := map[string]string{}
	for _, t := range r.Tiers {
		if t.Name == "" {
			return bad("a tier has no name")
		}
		if tiers[t.Name] {
			return bad("tier %q: name used twice", t.Name)
		}
		tiers[t.Name] = true
		for _, c := range t.Clients {
			if c == "" {
				return bad("tier %q: empty client", t.Name)
			}
			if prev, dup := clients[c]; dup {
				return bad("tier %q: client %q already in tier %q", t.Name, c, prev)
			}
			clients[c] = t.Name
		}
		for _, n := range t.Networks {
			if _, err := netprefix.Parse(n); err != nil {
				return bad("tier %q: network %q: %v", t.Name, n, err)
			}
		}
		if err := checkTier(t.Name, t.Rules); err != nil {
			return err
		}
	}
	type okey struct{ rule, id, ip string }
	seenO := map[okey]bool{}
	for _, o := range r.Overrides {
		what := o.ID + o.IP
		if (o.ID == "") == (o.IP == "") {
			return bad("override %q: exactly one of id and ip must be set", what)
		}
		k := okey{rule: o.Rule, id: o.ID}
		if o.IP != "" {
			a, err := netip.ParseAddr(o.IP)
			if err != nil {
				return bad("override %q: %v", what, err)
			}
			k.ip = a.Unmap().WithZone("").String()
		}
		if seenO[k] {
			return bad("override %q: listed twice for rule %q", what, o.Rule)
		}
		seenO[k] = true
		if o.Rule == "" {
			for name, alg := range names {
				if err := checkRuleLimit(alg, o.Limit); err != nil {
					return bad("override %q on rule %q: %v", what, name, err)
				}
			}
			continue
		}
		alg, ok := names[o.Rule]
		if !ok {
			return bad("override %q: no rule %q", what, o.Rule)
		}
		if err := checkRuleLimit(alg, o.Limit); err != nil {
			return bad("override %q: %v", what, err)
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
