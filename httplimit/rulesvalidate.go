package httplimit

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/netprefix"
)

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
	if err := v.checkOverrides(r.Overrides); err != nil {
		return err
	}
	return r.checkLists()
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
		if r.NumRules() > 0 || len(r.Tiers) > 0 || len(r.Overrides) > 0 || r.Exempt.Len()+r.Deny.Len() > 0 {
			return true, invalid("limiting is off but the rule set lists rules, tiers, overrides, or exempt or deny clients")
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
	seen, shadows := map[route]string{}, map[route]string{} // shadow rules are matched apart
	for i := range rules {
		ru := &rules[i]
		if err := v.checkRule(tier, ru); err != nil {
			return err
		}
		if err := checkRoute(cond(ru.Shadow, shadows, seen), ru); err != nil {
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
	if err := checkOutcome(ru); err != nil {
		return invalid("rule %q: %v", ru.Name, err)
	}
	if ru.Shadow && (ru.Ban != nil || ru.Concurrency != nil) {
		return invalid("rule %q: a shadow rule answers no request: ban and concurrency are not supported on it", ru.Name)
	}
	return checkPolicies(ru)
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
