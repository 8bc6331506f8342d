package mwengine

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/netprefix"
)

// limiterID is what a limiter counts: the requests of the rule with this
// name, under this algorithm, these windows (shortest first; 0 past the
// rule's) and buckets. A rule gets the limiter of its identity if there is
// one, in force or set aside, and so its clients' counters; a rule whose
// windows change gets another, with fresh counters.
type limiterID struct {
	name    string
	alg     shardlimit.Algorithm
	windows [shardlimit.MaxRates]time.Duration
	buckets int
}

// rates returns the number of rates of the limiter id names.
func (id limiterID) rates() int {
	n := 0
	for n < len(id.windows) && id.windows[n] != 0 {
		n++
	}
	return n
}

// limiter is a rule's limiter and the limits applied to it. lim is safe for
// concurrent use; def and overrides change only under Engine.mu, and for a
// limiter in force also under the gate's write lock, under whose read lock
// decisions read overrides.
type limiter struct {
	id        limiterID
	lim       shardlimit.Limiter
	ns        string            // the namespace of every key passed to lim: httplimit.KeyNamespace(id.name), "" if the engine built lim
	def       limits            // the default limits applied
	overrides map[string]limits // the per-key limits applied, by client key (without ns)

	// Requests of the rule not decided, by cause (httplimit.ErrorCounts,
	// RuleStats.BadCost and NoIdentity); never touched by a decision that
	// succeeds.
	tooManyKeys, invalid, closedErrs, otherErrs, badCost, noID atomic.Uint64
	pol                                                        policyCounts // the rule's lists (lists.go)

	settle settleState // settling after the handler, and its counters
}

// countError counts a decision of l that failed with err.
func (l *limiter) countError(err error) {
	switch {
	case errors.Is(err, shardlimit.ErrTooManyKeys):
		l.tooManyKeys.Add(1)
	case errors.Is(err, shardlimit.ErrInvalidKey), errors.Is(err, shardlimit.ErrInvalidTime), errors.Is(err, shardlimit.ErrInvalidCost):
		l.invalid.Add(1)
	case errors.Is(err, shardlimit.ErrClosed):
		l.closedErrs.Add(1)
	default:
		l.otherErrs.Add(1)
	}
}

// apply gives l default limits def and exactly the per-key limits want,
// changing only what differs. A per-key limit that cannot be stored (the
// table is full) is left out, to be tried again by the next Reload; the
// errors say which. A limiter of one rate gets them through SetLimit and
// SetDefaultLimit, one of several through SetLimits and SetDefaultLimits.
func (l *limiter) apply(def limits, want map[string]limits) []error {
	var errs []error
	n := l.id.rates()
	if l.def != def {
		var err error
		if n == 1 {
			err = l.lim.SetDefaultLimit(def[0])
		} else {
			err = l.lim.SetDefaultLimits(def[:n]...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %q: %w", l.id.name, err))
		} else {
			l.def = def
		}
	}
	for key := range l.overrides {
		if _, keep := want[key]; keep {
			continue
		}
		if err := l.lim.ClearLimit(l.ns + key); err != nil {
			errs = append(errs, fmt.Errorf("rule %q: override: %w", l.id.name, err))
			continue
		}
		delete(l.overrides, key)
	}
	for key, lim := range want {
		if prev, ok := l.overrides[key]; ok && prev == lim {
			continue
		}
		var err error
		if n == 1 {
			err = l.lim.SetLimit(l.ns+key, lim[0])
		} else {
			err = l.lim.SetLimits(l.ns+key, lim[:n]...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %q: override: %w", l.id.name, err))
			continue
		}
		l.overrides[key] = lim
	}
	return errs
}

// Reload replaces the rules in force by r, atomically for requests (see
// "Reloading rules" in package httplimit): every decision is taken
// entirely under the old rules or entirely under the new, because the
// limits of the limiters both sets use change, and the new set is
// published, while no decision is under way.
//
// A rule gets the limiter of its name, algorithm, windows and buckets,
// whether the rules in force use it or a reload set it aside, and so its
// clients' counters; otherwise a new one. Limiters the new rules do not use
// are set aside, their per-key limits cleared so that the janitor can
// empty them; each Reload closes those whose every key is back to a fresh
// key's state (Sweep), which a rule coming back could not tell from a new
// limiter.
//
// An invalid r returns an error wrapping shardlimit.ErrInvalidConfig (and
// httplimit.ErrNoRules for a rule set without rules that does not say
// limiting is off) and leaves the rules in force untouched. Reload after
// Close returns shardlimit.ErrClosed. If an override cannot be stored (the
// rule's table is full) the new rules are in force without it and the
// error, wrapping the limiter's, is returned.
func (e *Engine) Reload(r *httplimit.Rules) error {
	if r == nil {
		return errNoRules
	}
	check := httplimit.Options{Rules: r, DefaultAlgorithm: e.defAlg}
	if err := check.Validate(); err != nil {
		return err
	}
	if err := e.checkOverrideKeys(r); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return shardlimit.ErrClosed
	}
	p := reload{
		e:     e,
		ns:    &ruleSet{rules: map[string]*rule{}, byID: map[string]*tier{}, tiers: map[string]*tier{}},
		avail: e.availLimiters(),
		used:  map[limiterID]bool{},
	}
	err := p.addRules("", r.Rules)
	for i := 0; err == nil && i < len(r.Tiers); i++ {
		err = p.addRules(r.Tiers[i].Name, r.Tiers[i].Rules)
	}
	if err != nil {
		for _, l := range p.created {
			l.lim.Close()
		}
		return err
	}
	p.ns.route(r)
	errs := p.publish(e.overrideKeys(r, p.ns.rules))
	errs = append(errs, p.retire()...)
	return errors.Join(errs...)
}

// reload is a Reload under way: the rule set it builds and the limiters
// its rules take. Its methods require e.mu held.
type reload struct {
	e       *Engine
	ns      *ruleSet               // the new rules
	avail   map[limiterID]*limiter // the limiters a rule may take over
	created []*limiter             // the new limiters, serving no request yet
	used    map[limiterID]bool     // the limiters ns uses
}

// availLimiters returns the limiters a rule may take over: those in force
// and those set aside. It requires e.mu held.
func (e *Engine) availLimiters() map[limiterID]*limiter {
	avail := map[limiterID]*limiter{}
	if old := e.set.Load(); old != nil {
		for _, or := range old.rules {
			avail[or.l.id] = or.l
		}
	}
	for id, l := range e.retired {
		avail[id] = l
	}
	return avail
}

// addRules adds the rules of the tier named tierName ("" for the default
// rules) to p.ns, each with the limiter of its identity if one is
// available, else a new one.
func (p *reload) addRules(tierName string, rules []httplimit.Rule) error {
	for _, ru := range rules {
		nr := p.e.newRule(tierName, ru)
		id := nr.id()
		if l := p.avail[id]; l != nil {
			nr.l = l
		} else {
			lim, err := p.e.build(ru.Name, p.e.limiterConfig(nr))
			if err != nil {
				return fmt.Errorf("rule %q: %w", ru.Name, err)
			}
			nr.l = &limiter{id: id, lim: lim, def: nr.defaults(), overrides: map[string]limits{}}
			if p.e.newLimiter != nil {
				nr.l.ns = httplimit.KeyNamespace(ru.Name)
			}
			p.created = append(p.created, nr.l)
		}
		p.used[id] = true
		p.ns.rules[ru.Name] = nr
	}
	return nil
}

// route indexes the rules of ns (those of r, validated, so its networks
// parse) by tier, route, client identity and network.
func (ns *ruleSet) route(r *httplimit.Rules) {
	ns.def = compileTier("", r.Rules, ns.rules)
	ns.routePolicies(r)
	for _, t := range r.Tiers {
		ct := compileTier(t.Name, t.Rules, ns.rules)
		ns.tiers[t.Name] = ct
		for _, c := range t.Clients {
			ns.byID[c] = ct
		}
		for _, n := range t.Networks {
			p, _ := netprefix.Parse(n)
			ns.nets = append(ns.nets, netTier{net: p, tier: ct})
		}
	}
	for _, o := range r.Overrides {
		if _, ok := ns.byID[o.ID]; o.ID != "" && !ok {
			ns.byID[o.ID] = nil // listed, in no tier
		}
	}
}

// publish gives each rule's limiter its limits and the per-key limits of
// overrides (by rule name), and makes p.ns the rules in force. New
// limiters serve no request yet; the others may, under the rules in
// force: their limits change, and the new set is published, with no
// decision under way.
func (p *reload) publish(overrides map[string]map[string]limits) []error {
	var errs []error
	isNew := map[*limiter]bool{}
	for _, l := range p.created {
		isNew[l] = true
	}
	for name, nr := range p.ns.rules {
		if isNew[nr.l] {
			errs = append(errs, nr.l.apply(nr.defaults(), overrides[name])...)
		}
	}
	p.e.gate.lock()
	for name, nr := range p.ns.rules {
		if !isNew[nr.l] {
			errs = append(errs, nr.l.apply(nr.defaults(), overrides[name])...)
		}
	}
	p.e.set.Store(p.ns)
	p.e.gate.unlock()
	return errs
}

// retire sets aside the limiters the published rules do not use (no
// decision uses them any more), and closes the ones set aside whose
// counters all equal fresh ones.
func (p *reload) retire() []error {
	var errs []error
	e := p.e
	for id, l := range p.avail {
		switch {
		case p.used[id]:
			delete(e.retired, id)
		case e.retired[id] == nil:
			errs = append(errs, l.apply(l.def, nil)...) // per-key limits are never evicted
			e.retired[id] = l
		}
	}
	now := e.clock.Now()
	for id, l := range e.retired {
		if l.lim.Sweep(now); l.lim.Len() == 0 {
			l.lim.Close()
			delete(e.retired, id)
		}
	}
	return errs
}
