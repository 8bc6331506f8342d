package mwengine

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// rule is a compiled Rule. Fields are immutable once the rule is published
// (l.lim is safe for concurrent use).
type rule struct {
	name     string
	tier     string
	alg      shardlimit.Algorithm
	rates    []rate // shortest window first: the order of the limiter's rates
	buckets  int    // resolved; 0 for algorithms without buckets
	methods  []string
	path     string
	prefix   bool
	l        *limiter
	strategy string
	shadow   bool        // a shadow rule: decided and counted, never answering (shadow.go)
	lists    *lists      // its exempt and deny lists; nil if none
	out      outcomeRule // settling after the handler

	// Policies (bans.go, inflight.go): policies is set when the rule has
	// a ban or a concurrency limit; pns is httplimit.KeyNamespace(name).
	ban      *httplimit.Ban
	conc     *httplimit.Concurrency
	pns      string
	policies bool
}

// rate is one compiled limit of a rule, with the field values that depend
// only on it, formatted once.
type rate struct {
	limit       int           // the default limit
	window      time.Duration //
	sfName      []byte        // the IETF policy name as a structured-field string
	limitDigits []byte        // limit
	policyW     []byte        // ";w=" and the window in seconds, rounded up
	policy      []byte        // the RateLimit-Policy item for limit
	windowMs    []byte        // the window in milliseconds, rounded up
}

// limits are a key's limits, one per rate of its rule in the rule's order;
// entries past the rule's rates are 0.
type limits [shardlimit.MaxRates]int

// id returns the identity of the limiter r needs.
func (r *rule) id() limiterID {
	id := limiterID{name: r.name, alg: r.alg, buckets: r.buckets}
	for k, rt := range r.rates {
		id.windows[k] = rt.window
	}
	return id
}

// defaults returns r's default limits.
func (r *rule) defaults() limits {
	var d limits
	for k, rt := range r.rates {
		d[k] = rt.limit
	}
	return d
}

// binding returns the index of the rate of r whose window is w: the rate a
// Result reports. A rule of one rate has one; a Result without a window of
// the rule's (a NewLimiter's limiter that sets none) is taken as the
// longest window's.
func (r *rule) binding(w time.Duration) int {
	n := len(r.rates)
	if n == 1 {
		return 0
	}
	for k := range n - 1 {
		if r.rates[k].window == w {
			return k
		}
	}
	return n - 1
}

// ruleAllows reports whether rule r applies to method.
func ruleAllows[S byteseq](r *rule, method S) bool {
	if len(r.methods) == 0 {
		return true
	}
	for _, m := range r.methods {
		if string(method) == m {
			return true
		}
	}
	return false
}

// tier is a compiled tier: its rules indexed for matching.
type tier struct {
	name     string
	exact    map[string][]*rule // by path; method-specific rules first; nil if few
	few      []exactPath        // exact's content when at most maxScanPaths paths
	prefixes []*rule            // longest first; method-specific first
	shadow   *tier              // the tier's shadow rules, matched apart; nil if none
}

// exactPath is the rules of one exact path, method-specific ones first.
type exactPath struct {
	path  string
	rules []*rule
}

// maxScanPaths is the most exact paths of a tier that matching compares one
// by one (most of them differ from the request path in length) before
// hashing the request path into a map pays.
const maxScanPaths = 8

// exactRules returns t's rules for exact path path, or nil.
func exactRules[S byteseq](t *tier, path S) []*rule {
	if t.exact != nil {
		return t.exact[string(path)]
	}
	for i := range t.few {
		if p := &t.few[i]; len(p.path) == len(path) && p.path == string(path) {
			return p.rules
		}
	}
	return nil
}

// netTier is a tier reached through a client network.
type netTier struct {
	net  netip.Prefix
	tier *tier
}

// ruleSet is one compiled Rules value, published atomically.
type ruleSet struct {
	def   *tier
	byID  map[string]*tier // listed identities: their tier, nil if only an override names them
	nets  []netTier
	rules map[string]*rule // by name

	tiers   map[string]*tier // by name, for a tier hook
	lists   *lists           // the rule set's exempt and deny lists; nil if none
	shadows bool             // some rule is a shadow rule
}

// matchTier returns t's rule for method and path, or nil.
func matchTier[S byteseq](t *tier, method, path S) *rule {
	for _, r := range exactRules(t, path) {
		if ruleAllows(r, method) {
			return r
		}
	}
	for _, r := range t.prefixes {
		if prefixMatch(path, r.path) && ruleAllows(r, method) {
			return r
		}
	}
	return nil
}

// prefixMatch reports whether path is p or below p ("/api" matches "/api"
// and "/api/x", not "/apix"; "/api/" and "/" match everything they start).
func prefixMatch[S byteseq](path S, p string) bool {
	if len(path) < len(p) || string(path[:len(p)]) != p {
		return false
	}
	return len(path) == len(p) || p[len(p)-1] == '/' || path[len(p)] == '/'
}

// lookupID returns the tier of identity id (nil if none) and whether a
// tier or an override lists id.
func lookupID[S byteseq](set *ruleSet, id S) (*tier, bool) {
	if len(id) == 0 || len(set.byID) == 0 {
		return nil, false
	}
	t, ok := set.byID[string(id)]
	return t, ok
}

// tierOf returns the tier of a request whose identity's tier is idTier (nil
// if none): idTier, else the first tier whose networks hold client, else
// the default tier.
func tierOf(set *ruleSet, idTier *tier, client netip.Addr) *tier {
	t := idTier
	if t == nil && len(set.nets) > 0 && client.IsValid() {
		a := client.Unmap().WithZone("")
		for _, nt := range set.nets {
			if nt.net.Contains(a) {
				t = nt.tier
				break
			}
		}
	}
	if t == nil {
		t = set.def
	}
	return t
}

// compileTier indexes rules (already validated) of the tier named name,
// taking their compiled forms from byName: the enforced rules, and the
// shadow rules apart in the tier's shadow.
func compileTier(name string, rules []httplimit.Rule, byName map[string]*rule) *tier {
	enforced, shadow := splitShadow(rules)
	t := indexTier(name, enforced, byName)
	if len(shadow) > 0 {
		t.shadow = indexTier(name, shadow, byName)
	}
	return t
}

// indexTier indexes rules of the tier named name, taking their compiled
// forms from byName.
func indexTier(name string, rules []httplimit.Rule, byName map[string]*rule) *tier {
	t := &tier{name: name, exact: map[string][]*rule{}}
	for _, ru := range rules {
		r := byName[ru.Name]
		if !r.prefix {
			t.exact[r.path] = append(t.exact[r.path], r)
		} else {
			t.prefixes = append(t.prefixes, r)
		}
	}
	specificFirst := func(a, b *rule) int {
		return cmp.Compare(min(len(b.methods), 1), min(len(a.methods), 1))
	}
	for _, rs := range t.exact {
		slices.SortStableFunc(rs, specificFirst)
	}
	if len(t.exact) <= maxScanPaths {
		for path, rs := range t.exact {
			t.few = append(t.few, exactPath{path: path, rules: rs})
		}
		slices.SortFunc(t.few, func(a, b exactPath) int { return strings.Compare(a.path, b.path) })
		t.exact = nil
	}
	slices.SortStableFunc(t.prefixes, func(a, b *rule) int {
		if c := cmp.Compare(len(b.path), len(a.path)); c != 0 {
			return c
		}
		return specificFirst(a, b)
	})
	return t
}

// newRule returns the compiled form of ru (validated) without a limiter.
func (e *Engine) newRule(tierName string, ru httplimit.Rule) *rule {
	r := &rule{name: ru.Name, tier: tierName, alg: ru.Algorithm, out: newOutcomeRule(&ru)}
	if r.alg == 0 {
		r.alg = e.defAlg
	}
	if r.alg == shardlimit.SlidingCounter {
		r.buckets = cmp.Or(ru.Buckets, shardlimit.DefaultBuckets)
	}
	for _, m := range ru.Methods {
		r.methods = append(r.methods, strings.ToUpper(m))
	}
	if ru.Path != "" {
		r.path = ru.Path
	} else {
		r.path, r.prefix = cmp.Or(ru.Prefix, "/"), true
	}
	names := ru.PolicyNames(e.hdr.PolicyName)
	for i, rt := range ru.Rates() {
		c := rate{limit: rt.Limit, window: rt.Window}
		c.sfName = appendSFString(nil, names[i])
		c.limitDigits = strconv.AppendInt(nil, int64(c.limit), 10)
		c.policyW = strconv.AppendInt([]byte(";w="), CeilSeconds(c.window), 10)
		c.policy = appendPolicyItem(nil, &c, c.limit)
		ms := int64(c.window / time.Millisecond)
		if c.window%time.Millisecond != 0 {
			ms++
		}
		c.windowMs = strconv.AppendInt(nil, ms, 10)
		r.rates = append(r.rates, c)
	}
	slices.SortFunc(r.rates, func(a, b rate) int { return cmp.Compare(a.window, b.window) })
	r.strategy = r.alg.String()
	r.shadow, r.lists = ru.Shadow, compileLists(ru.Exempt, ru.Deny)
	e.compilePolicies(r, ru)
	return r
}

// limiterConfig returns the limiter configuration of r: Limit and Window
// for a rule of one rate, else Rates in r's order.
func (e *Engine) limiterConfig(r *rule) shardlimit.Config {
	cfg := e.tmpl
	cfg.Algorithm = r.alg
	cfg.Limit, cfg.Window, cfg.Rates = 0, 0, nil
	if len(r.rates) == 1 {
		cfg.Limit, cfg.Window = r.rates[0].limit, r.rates[0].window
	} else {
		for _, rt := range r.rates {
			cfg.Rates = append(cfg.Rates, shardlimit.Rate{Limit: rt.limit, Window: rt.window})
		}
	}
	cfg.Buckets = r.buckets
	cfg.MaxKeyBytes = e.nsLen + e.keys.maxKeyLen() // the rule's namespace, then the client key
	cfg.Clock = e.clock
	switch {
	case cfg.MaxKeys == 0:
		cfg.MaxKeys = httplimit.DefaultMaxKeys
	case cfg.MaxKeys < 0:
		cfg.MaxKeys = 0
	}
	return cfg
}

// overrideKeys returns, per rule name, the key -> limits map of r's
// overrides (validated). A rule-specific override beats an every-rule one
// for the same key; the windows an override's Limits do not list keep the
// rule's limits.
func (e *Engine) overrideKeys(r *httplimit.Rules, rules map[string]*rule) map[string]map[string]limits {
	out := map[string]map[string]limits{}
	add := func(name string, o httplimit.Override) {
		var key []byte
		if o.ID != "" {
			key = appendIDKey(&e.keys, nil, o.ID)
		} else {
			a, _ := netip.ParseAddr(o.IP) // validated
			key = e.keys.appendAddrKey(nil, a)
		}
		ru := rules[name]
		var lims limits
		if len(o.Limits) == 0 {
			for k := range ru.rates {
				lims[k] = o.Limit
			}
		} else {
			lims = ru.defaults()
			for _, rt := range o.Limits {
				for k := range ru.rates {
					if ru.rates[k].window == rt.Window {
						lims[k] = rt.Limit
					}
				}
			}
		}
		if out[name] == nil {
			out[name] = map[string]limits{}
		}
		out[name][string(key)] = lims
	}
	for _, o := range r.Overrides {
		if o.Rule == "" {
			for name := range rules {
				add(name, o)
			}
		}
	}
	for _, o := range r.Overrides {
		if o.Rule != "" {
			add(o.Rule, o)
		}
	}
	return out
}
