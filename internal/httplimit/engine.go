package httplimit

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimit/shardlimit"
)

// Action is what a middleware does with a request after Decide.
type Action uint8

const (
	// ActionPass: no rule matched; call the next handler, write no field.
	ActionPass Action = iota
	// ActionAllow: admitted; write the fields, call the next handler.
	ActionAllow
	// ActionDeny: denied; write the fields and a 429 (or call the custom
	// denied handler).
	ActionDeny
	// ActionShadowDeny: denied in dry-run mode; write the fields (no
	// Retry-After) and call the next handler.
	ActionShadowDeny
	// ActionBadCost: the cost function returned a negative cost; answer 500
	// with BodyBadCost, nothing consumed.
	ActionBadCost
	// ActionNoIdentity: no client identity (or an unlisted one under
	// UnknownIdentityAnonymous) under EmptyKeyReject; answer 400 with
	// BodyNoIdentity, nothing consumed.
	ActionNoIdentity
	// ActionError: the decision failed (Decision.Result.Err) under
	// FailClosed; answer 503 with BodyUnavailable.
	ActionError
	// ActionErrorPass: the decision failed under FailOpen; call the next
	// handler, write no field.
	ActionErrorPass
)

// Decision is the outcome of one request: the rule that matched and the
// limiter's Result. It is passed by value to Options.OnDenied and to custom
// denied handlers.
type Decision struct {
	// Rule and Tier name the matched rule and its tier ("" for the default
	// rules). Both are empty when no rule matched.
	Rule, Tier string
	// Algorithm is the matched rule's algorithm.
	Algorithm shardlimit.Algorithm
	// Window is the matched rule's window.
	Window time.Duration
	// Cost is the request's cost in units (1 without a cost function).
	Cost int
	// DryRun reports a denial let through by Options.DryRun.
	DryRun bool
	// Result is the limiter's decision. Result.Err is set when the decision
	// failed.
	Result shardlimit.Result

	action Action
	now    time.Time
	r      *rule
}

// Action returns what the middleware is to do.
func (d *Decision) Action() Action { return d.action }

// Time returns the instant the request was decided at.
func (d *Decision) Time() time.Time { return d.now }

// Request is what a middleware extracts from its framework's request for
// Decide. S is string for net/http and []byte for fasthttp; the values must
// stay valid until Decide returns and are never retained.
type Request[S byteseq] struct {
	// Method and Path are the request method and path (decoded, cleaned).
	Method, Path S
	// Identity is the client identity (key header or key function); empty
	// if none. Decide ignores one that no tier or override lists, unless
	// KeyConfig.UnknownIdentity is UnknownIdentityOwnKey.
	Identity S
	// Client is the client address (see Engine.ClientAddr); invalid if
	// unknown.
	Client netip.Addr
	// Now is the decision instant: Engine.Clock().Now(), read when the
	// middleware runs (see Options.Clock).
	Now time.Time
	// Cost is the request's cost in units.
	Cost int
}

// Stats are a middleware's counters. Allowed, Denied and Keys are summed over
// the limiters of the rules in force (a rule replaced by Reload takes its
// counts with it); the others count since construction.
type Stats struct {
	// Allowed and Denied count decisions of positive cost; Denied includes
	// denials let through by DryRun.
	Allowed, Denied uint64
	// WouldDeny counts denials let through by DryRun.
	WouldDeny uint64
	// Errors counts failed decisions (Result.Err), handled per OnError.
	Errors uint64
	// BadCost counts requests refused with 500 for a negative cost.
	BadCost uint64
	// NoIdentity counts requests refused with 400 under EmptyKeyReject.
	NoIdentity uint64
	// Keys is the number of client keys stored over all rules.
	Keys int
	// Rules is the number of rules in force.
	Rules int
}

// Scratch holds one request's buffers. Get one from Engine.GetScratch and
// return it with PutScratch once nothing refers to its buffers.
type Scratch struct {
	Key []byte // the key being built
	ID  []byte // room for a key function's identity (pass ID[:0]; never store the result back)
	Val []byte // header values and bodies
}

// maxScratch is the capacity above which a buffer grown by an unusual
// request is dropped instead of pooled.
const maxScratch = 4096

// Engine is the shared middleware core: compiled rules, one limiter per
// rule, key extraction and response formatting. All methods are safe for
// concurrent use.
type Engine struct {
	keys       keyer
	headers    HeaderSet
	policyName string
	resetUnix  bool
	defAlg     shardlimit.Algorithm
	tmpl       shardlimit.Config
	clock      shardlimit.Clock // of every decision and every rule limiter
	dryRun     bool
	onError    ErrorPolicy
	onDenied   func(Decision)
	newLimiter func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error)

	set    atomic.Pointer[ruleSet] // nil after Close
	mu     sync.Mutex              // serialises Reload and Close
	closed bool

	wouldDeny, errs, badCost, noID atomic.Uint64

	pool sync.Pool
}

// NewEngine validates o and returns an engine with o.Rules in force.
// keyFunc tells whether the middleware has a key function (an identity
// source besides o.Keys.Header). Errors wrap shardlimit.ErrInvalidConfig.
// Close stops the limiters' janitors.
func NewEngine(o Options, keyFunc bool) (*Engine, error) {
	if o.Rules == nil {
		return nil, fmt.Errorf("%w: no rules", shardlimit.ErrInvalidConfig)
	}
	keys, err := newKeyer(o.Keys, keyFunc)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		keys:       keys,
		headers:    o.Headers,
		policyName: o.PolicyName,
		resetUnix:  o.ResetUnix,
		defAlg:     o.DefaultAlgorithm,
		tmpl:       o.Limiter,
		clock:      o.Clock,
		dryRun:     o.DryRun,
		onError:    o.OnError,
		onDenied:   o.OnDenied,
		newLimiter: o.NewLimiter,
	}
	if e.headers == 0 {
		e.headers = DefaultHeaders
	}
	if e.policyName == "" {
		e.policyName = DefaultPolicyName
	}
	if err := checkPolicyName(e.policyName); err != nil {
		return nil, fmt.Errorf("%w: %v", shardlimit.ErrInvalidConfig, err)
	}
	if e.defAlg == 0 {
		e.defAlg = shardlimit.FixedWindow
	}
	if e.defAlg < shardlimit.FixedWindow || e.defAlg > shardlimit.GCRA {
		return nil, fmt.Errorf("%w: unknown default algorithm %d", shardlimit.ErrInvalidConfig, int(e.defAlg))
	}
	if e.onError > FailOpen {
		return nil, fmt.Errorf("%w: unknown error policy %d", shardlimit.ErrInvalidConfig, e.onError)
	}
	if e.clock == nil {
		// One clock for every limiter and decision (Options.Clock).
		e.clock = shardlimit.SystemClock()
	}
	n := keys.maxKeyLen()
	e.pool.New = func() any {
		return &Scratch{Key: make([]byte, 0, n), ID: make([]byte, 0, n), Val: make([]byte, 0, 256)}
	}
	if err := e.Reload(o.Rules); err != nil {
		return nil, err
	}
	return e, nil
}

// Clock returns the clock requests are to be decided by (Request.Now):
// Options.Clock, or the shardlimit.SystemClock that NewEngine created. It is
// the Config.Clock of every rule's limiter, so their janitors judge
// idleness by the same clock.
func (e *Engine) Clock() shardlimit.Clock { return e.clock }

// IdentityHeader returns the canonical name of the key header, or "".
func (e *Engine) IdentityHeader() string { return e.keys.header }

// Trusts reports whether peer is a trusted proxy, whose ForwardedHeader is
// to be read with ClientAddr.
func (e *Engine) Trusts(peer netip.Addr) bool { return e.keys.trusts(peer) }

// ForwardedHeader returns the canonical name of the one forwarding header
// read from trusted proxies: XForwardedFor or XRealIP.
func (e *Engine) ForwardedHeader() string { return e.keys.fwdHeader }

// ClientAddr returns the client address of a request from trusted proxy
// peer, given every line of its ForwardedHeader (see
// KeyConfig.ForwardedHeader). It does not allocate.
func ClientAddr[S byteseq](e *Engine, peer netip.Addr, lines []S) netip.Addr {
	return forwardedClient(&e.keys, peer, lines)
}

// GetScratch returns a request's buffers from the engine's pool.
func (e *Engine) GetScratch() *Scratch { return e.pool.Get().(*Scratch) }

// PutScratch returns sc to the pool.
func (e *Engine) PutScratch(sc *Scratch) {
	if cap(sc.Key) > maxScratch || cap(sc.ID) > maxScratch || cap(sc.Val) > maxScratch {
		return
	}
	e.pool.Put(sc)
}

// Decide decides request q into d, overwriting it, and builds the
// request's key in sc.Key. It consumes the request's cost from the matched
// rule's limiter unless the cost is negative, and never allocates for a
// known client on a matched rule. It calls Options.OnDenied for denials.
// q and d are pointers only so that neither is copied: Decide keeps
// neither.
func Decide[S byteseq](e *Engine, sc *Scratch, q *Request[S], d *Decision) {
	*d = Decision{}
	d.now, d.Cost = q.Now, q.Cost
	for attempt := 0; ; attempt++ {
		set := e.set.Load()
		if set == nil {
			d.Result = shardlimit.Result{Err: shardlimit.ErrClosed}
			e.failed(d)
			return
		}
		id := q.Identity
		idTier, listed := lookupID(set, id)
		if !listed && e.keys.unknownID == UnknownIdentityAnonymous {
			id = id[:0] // keyed as a request without identity
		}
		r := matchFrom(set, idTier, q.Client, q.Method, q.Path)
		if r == nil {
			d.action = ActionPass
			return
		}
		d.r, d.Rule, d.Tier, d.Algorithm, d.Window = r, r.name, r.tier, r.alg, r.window
		if q.Cost < 0 {
			e.badCost.Add(1)
			d.action = ActionBadCost
			return
		}
		key, ok := buildKey(&e.keys, sc.Key[:0], id, q.Client)
		sc.Key = key
		if !ok {
			e.noID.Add(1)
			d.action = ActionNoIdentity
			return
		}
		d.Result = r.lim.AllowBytesN(key, q.Now, q.Cost)
		switch {
		case d.Result.Err != nil:
			// A Reload closed this rule's limiter after we loaded the set:
			// decide again against the new set.
			if errors.Is(d.Result.Err, shardlimit.ErrClosed) && attempt < 3 && e.set.Load() != set {
				continue
			}
			e.failed(d)
			return
		case d.Result.Allowed:
			d.action = ActionAllow
			return
		case e.dryRun:
			d.action, d.DryRun = ActionShadowDeny, true
			e.wouldDeny.Add(1)
		default:
			d.action = ActionDeny
		}
		if e.onDenied != nil {
			e.onDenied(*d)
		}
		return
	}
}

// buildKey appends the key of a request with identity id from client to
// dst; false when the request has no identity under EmptyKeyReject.
func buildKey[S byteseq](k *keyer, dst []byte, id S, client netip.Addr) ([]byte, bool) {
	switch {
	case len(id) > 0:
		return appendIDKey(k, dst, id), true
	case k.identity && k.emptyKey == EmptyKeyReject:
		return dst, false
	case k.identity && k.emptyKey == EmptyKeyShared, !usableAddr(client):
		return append(dst, tagShared), true
	}
	return k.appendAddrKey(dst, client), true
}

// failed completes a decision whose Result.Err is set.
func (e *Engine) failed(d *Decision) {
	e.errs.Add(1)
	if e.onError == FailOpen {
		d.action = ActionErrorPass
	} else {
		d.action = ActionError
	}
	d.r = nil // no rate-limit fields for a failed decision
}

// Reload replaces the rules in force by r, atomically for requests: each
// request is decided entirely under the old rules or entirely under the new.
// A rule whose name, algorithm, window and buckets are unchanged keeps its
// limiter and so every client's counters; a changed limit is applied with
// SetDefaultLimit. Overrides are applied to the rules' limiters, and removed
// overrides cleared. Removed rules' limiters are closed.
//
// An invalid r returns an error wrapping shardlimit.ErrInvalidConfig and
// leaves the rules in force untouched. Reload after Close returns
// shardlimit.ErrClosed. If an override cannot be stored (the rule's table
// is full) the new rules are in force without it and the error, wrapping the
// limiter's, is returned.
func (e *Engine) Reload(r *Rules) error {
	if r == nil {
		return fmt.Errorf("%w: no rules", shardlimit.ErrInvalidConfig)
	}
	if err := r.validate(e.defAlg); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return shardlimit.ErrClosed
	}
	old := e.set.Load()
	ns := &ruleSet{rules: map[string]*rule{}, byID: map[string]*tier{}}
	var created []shardlimit.Limiter
	var reused []*rule
	fail := func(err error) error {
		for _, l := range created {
			l.Close()
		}
		return err
	}
	build := func(tierName string, rules []Rule) error {
		for _, ru := range rules {
			nr := e.newRule(tierName, ru)
			if old != nil {
				if or := old.rules[ru.Name]; or != nil && or.alg == nr.alg && or.window == nr.window && or.buckets == nr.buckets {
					nr.lim = or.lim
					reused = append(reused, nr)
				}
			}
			if nr.lim == nil {
				lim, err := e.build(ru.Name, e.limiterConfig(nr))
				if err != nil {
					return fmt.Errorf("rule %q: %w", ru.Name, err)
				}
				nr.lim = lim
				created = append(created, lim)
			}
			ns.rules[ru.Name] = nr
		}
		return nil
	}
	if err := build("", r.Rules); err != nil {
		return fail(err)
	}
	for _, t := range r.Tiers {
		if err := build(t.Name, t.Rules); err != nil {
			return fail(err)
		}
	}
	// Validated: SetDefaultLimit below cannot fail but for ErrClosed, and
	// only Close closes a published limiter, under e.mu.
	ns.def = compileTier("", r.Rules, ns.rules)
	for _, t := range r.Tiers {
		ct := compileTier(t.Name, t.Rules, ns.rules)
		for _, c := range t.Clients {
			ns.byID[c] = ct
		}
		for _, n := range t.Networks {
			p, _ := parsePrefix(n)
			ns.nets = append(ns.nets, netTier{net: p, tier: ct})
		}
	}
	for _, o := range r.Overrides {
		if _, ok := ns.byID[o.ID]; o.ID != "" && !ok {
			ns.byID[o.ID] = nil // listed, in no tier
		}
	}
	ns.overrides = e.overrideKeys(r, ns.rules)
	for _, nr := range reused {
		if nr.lim.Config().Limit != nr.limit {
			if err := nr.lim.SetDefaultLimit(nr.limit); err != nil {
				return fail(fmt.Errorf("rule %q: %w", nr.name, err))
			}
		}
	}
	var errs []error
	for name, nr := range ns.rules {
		want := ns.overrides[name]
		var had map[string]int // overrides already applied to nr.lim
		if old != nil {
			if or := old.rules[name]; or != nil && or.lim == nr.lim {
				had = old.overrides[name]
			}
		}
		for key := range had {
			if _, keep := want[key]; !keep {
				if err := nr.lim.ClearLimit(key); err != nil {
					errs = append(errs, fmt.Errorf("rule %q: %w", name, err))
				}
			}
		}
		for key, lim := range want {
			if prev, ok := had[key]; ok && prev == lim {
				continue
			}
			if err := nr.lim.SetLimit(key, lim); err != nil {
				errs = append(errs, fmt.Errorf("rule %q: override: %w", name, err))
				delete(want, key) // not applied: the next Reload tries again
			}
		}
	}
	e.set.Store(ns)
	if old != nil {
		for name, or := range old.rules {
			if nr := ns.rules[name]; nr == nil || nr.lim != or.lim {
				or.lim.Close()
			}
		}
	}
	return errors.Join(errs...)
}

// build returns a new limiter for rule: Options.NewLimiter's, else
// shardlimit.New's.
func (e *Engine) build(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
	if e.newLimiter == nil {
		return shardlimit.New(cfg)
	}
	lim, err := e.newLimiter(rule, cfg)
	if err == nil && lim == nil {
		err = errors.New("NewLimiter returned a nil limiter")
	}
	return lim, err
}

// Close closes every rule's limiter, stopping their janitors. Afterwards
// decisions fail with shardlimit.ErrClosed (answered per OnError). It is
// idempotent and returns nil.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if old := e.set.Swap(nil); old != nil {
		for _, r := range old.rules {
			r.lim.Close()
		}
	}
	return nil
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	st := Stats{
		WouldDeny:  e.wouldDeny.Load(),
		Errors:     e.errs.Load(),
		BadCost:    e.badCost.Load(),
		NoIdentity: e.noID.Load(),
	}
	if set := e.set.Load(); set != nil {
		st.Rules = len(set.rules)
		for _, r := range set.rules {
			ls := r.lim.Stats()
			st.Allowed += ls.Allowed
			st.Denied += ls.Denied
			st.Keys += ls.Keys
		}
	}
	return st
}

// RuleStats returns the limiter counters of each rule in force, by rule
// name.
func (e *Engine) RuleStats() map[string]shardlimit.Stats {
	out := map[string]shardlimit.Stats{}
	if set := e.set.Load(); set != nil {
		for name, r := range set.rules {
			out[name] = r.lim.Stats()
		}
	}
	return out
}
