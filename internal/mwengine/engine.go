// Package mwengine is the framework-independent core of shardlimit's HTTP
// middleware: rule matching, client keys, the per-request decision, and the
// answer to give (status, rate-limit fields, body). Packages fasthttpmw and
// httpmw are thin adapters around it that only read their framework's
// request and write its response; what users configure and read lives in
// package httplimit.
package mwengine

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/topk"
)

// Outcome is one request's decision: the public Decision and the compiled
// rule it was decided by (nil if none), which Reply formats the fields of.
type Outcome struct {
	httplimit.Decision
	r    *rule
	rate int    // the index in r.rates of the rate Result reports
	own  bool   // the key has limits of its own (an override), in lims
	lims limits // the key's limits, when own, for RateLimit-Policy

	status int // a failed decision's answer from an error hook (SetErrorStatus); 0: 503
	// InFlight is the request's in-flight slot (Rule.Concurrency), held
	// when the request goes to the next handler: give it back with
	// Engine.Release once that handler returns. Decide keeps it for a
	// failed decision until Reply, which gives it back unless the
	// decision (after SetErrorStatus) lets the request through.
	InFlight InFlight
}

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
	// Client is the client address (see ClientAddr); invalid if unknown.
	Client netip.Addr
	// Now is the decision instant: Engine.Clock().Now(), read when the
	// middleware runs (see Options.Clock).
	Now time.Time
	// Cost is the request's cost in units.
	Cost int
	// Tier, if not empty, names the request's tier (a middleware's tier
	// hook), in place of the one its identity or network gives.
	Tier string
	// SlotHeld tells that the request is part of one that holds its
	// in-flight slot already (a message of an admitted stream): Decide
	// then takes no slot for it, so Rule.Concurrency does not refuse it.
	SlotHeld bool
}

// Scratch holds one request's buffers. Get one from Engine.GetScratch and
// return it with PutScratch once nothing refers to its buffers.
type Scratch struct {
	Key    []byte // the client key built, without the rule's namespace: a view of the limiter key
	ID     []byte // room for a key function's identity (pass ID[:0]; never store the result back)
	Fields Fields // the rate-limit fields Reply formats
	Body   []byte // the 429 body Reply formats

	lkey   []byte // the limiter key: the rule's namespace (limiter.ns), then Key
	pkey   []byte // the policy key (bans, in flight): rule.pns, then Key
	stripe uint32 // the gate stripe this request takes (see gate)
}

// maxScratch is the capacity above which a buffer grown by an unusual
// request is dropped instead of pooled.
const maxScratch = 4096

// Engine is the shared middleware core: compiled rules, one limiter per
// rule, key extraction and response formatting. All methods are safe for
// concurrent use.
type Engine struct {
	keys       keyer
	hdr        httplimit.HeaderConfig // PolicyName empty: rules named after their names
	defAlg     shardlimit.Algorithm
	tmpl       shardlimit.Config
	clock      shardlimit.Clock // of every decision and every rule limiter
	dryRun     bool
	onError    httplimit.ErrorPolicy
	onDenied   func(httplimit.Decision)
	failedResp func(httplimit.Decision, int) bool // Options.FailedResponse
	costHook   bool                               // the middleware has a final cost hook (EnableCostHook)
	newLimiter func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error)
	nsLen      int // the length of the rules' key namespaces: 0 without newLimiter

	// gate makes Reload atomic for requests: a decision holds a read lock
	// from loading set to the limiter's answer; Reload holds the write
	// lock while it changes the limits of limiters in use and publishes
	// the new set, and Close while it unpublishes it.
	gate gate
	set  atomic.Pointer[ruleSet] // nil after Close; stored under gate

	mu      sync.Mutex // serialises Reload and Close; guards closed and retired
	closed  bool
	retired map[limiterID]*limiter // limiters of rules the rules in force lack

	wouldDeny, errs, badCost, noID atomic.Uint64
	listCounts                     policyCounts // the rule set's lists, the tier hook

	top *topk.Sketch // the most-denied (rule, key) pairs; nil if Options.TopDenied < 0

	stripes atomic.Uint32 // stripe of the next Scratch built
	pool    sync.Pool

	pol policies // bans and requests in flight (bans.go, inflight.go)
}

// New validates o and returns an engine with o.Rules in force. keyFunc
// tells whether the middleware has a key function (an identity source
// besides o.Keys.Header). Errors wrap shardlimit.ErrInvalidConfig (see
// httplimit.Options.Validate). Close takes the limiters off the janitor.
func New(o httplimit.Options, keyFunc bool) (*Engine, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	keys, err := newKeyer(o.Keys, keyFunc)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		keys:       keys,
		hdr:        o.Headers,
		defAlg:     o.DefaultAlgorithm,
		tmpl:       o.Limiter,
		clock:      o.Clock,
		dryRun:     o.DryRun,
		onError:    o.OnError,
		onDenied:   o.OnDenied,
		failedResp: o.FailedResponse,
		newLimiter: o.NewLimiter,
		retired:    map[limiterID]*limiter{},
	}
	if e.newLimiter != nil {
		e.nsLen = httplimit.KeyNamespaceLen
	}
	if e.defAlg == 0 {
		e.defAlg = shardlimit.FixedWindow
	}
	if e.clock == nil {
		// One clock for every limiter and decision (Options.Clock).
		e.clock = shardlimit.DefaultClock()
	}
	n := keys.maxKeyLen()
	if o.TopDenied >= 0 {
		e.top = topk.New(cmp.Or(o.TopDenied, httplimit.DefaultTopDenied), n)
	}
	e.pool.New = func() any {
		return &Scratch{
			lkey: make([]byte, 0, e.nsLen+n), ID: make([]byte, 0, n),
			pkey:   make([]byte, 0, httplimit.KeyNamespaceLen+n),
			Fields: Fields{Buf: make([]byte, 0, 256)}, Body: make([]byte, 0, 128),
			stripe: e.stripes.Add(1),
		}
	}
	e.pol.init(&o, n)
	if err := e.Reload(o.Rules); err != nil {
		return nil, err
	}
	if o.BanStore != nil {
		e.startShare(o.BanStore, cmp.Or(o.BanSyncInterval, httplimit.DefaultBanSyncInterval), cmp.Or(o.MaxPolicyKeys, httplimit.DefaultMaxPolicyKeys))
	}
	return e, nil
}

// Clock returns the clock requests are to be decided by (Request.Now):
// Options.Clock, or shardlimit.DefaultClock(). It is
// the Config.Clock of every rule's limiter, so the janitor judges their
// keys' idleness by the same clock.
func (e *Engine) Clock() shardlimit.Clock { return e.clock }

// IdentityHeader returns the canonical name of the key header, or "".
func (e *Engine) IdentityHeader() string { return e.keys.header }

// Trusts reports whether peer is a trusted proxy, whose ForwardedHeader is
// to be read with ClientAddr.
func (e *Engine) Trusts(peer netip.Addr) bool { return e.keys.trusts(peer) }

// ForwardedHeader returns the canonical name of the one forwarding header
// read from trusted proxies: httplimit.XForwardedFor or XRealIP.
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
	if cap(sc.lkey) > maxScratch || cap(sc.pkey) > maxScratch || cap(sc.ID) > maxScratch || cap(sc.Fields.Buf) > maxScratch || cap(sc.Body) > maxScratch {
		return
	}
	e.pool.Put(sc)
}

// Decide decides request q into o, overwriting it, and builds the request's
// client key in sc.Key (empty if no rule matched or the cost is negative).
// The matched rule's limiter is passed the key in the rule's namespace (see
// limiter.ns), so that no two rules count in one another's keys. It
// consumes the request's cost from the matched rule's limiter unless the
// cost is negative, and never allocates for a known
// client on a matched rule. The whole decision is taken under one rule set:
// a concurrent Reload waits for it, or it waits for the Reload. Denials are
// counted in the summary of the most-denied keys, after the decision, and
// handed to Options.OnDenied. q and o are pointers only so that neither is
// copied: Decide keeps neither.
func Decide[S byteseq](e *Engine, sc *Scratch, q *Request[S], o *Outcome) {
	*o = Outcome{}
	o.Time, o.Cost = q.Now, q.Cost
	sc.Key = sc.Key[:0]
	l := e.gate.rlock(sc.stripe)
	decideLocked(e, sc, q, o)
	l.RUnlock()
	if o.Action != httplimit.ActionAllow { // the allowed path counts nothing here
		e.count(sc, o)
	}
}

// count counts the decision o of Decide, whose client key is sc.Key, in
// the engine's counters and summary of the most-denied keys, and hands a
// denial to Options.OnDenied.
func (e *Engine) count(sc *Scratch, o *Outcome) {
	switch o.Action {
	case httplimit.ActionBadCost:
		e.badCost.Add(1)
	case httplimit.ActionNoIdentity:
		e.noID.Add(1)
	case httplimit.ActionFailClosed, httplimit.ActionFailOpen:
		e.errs.Add(1)
	case httplimit.ActionDryRunDeny:
		e.wouldDeny.Add(1)
		fallthrough
	case httplimit.ActionDeny, httplimit.ActionDenyListed, httplimit.ActionBanned, httplimit.ActionTooManyInFlight:
		if e.top != nil && !o.Listed {
			e.top.Add(o.Rule, sc.Key, 1)
		}
		if e.onDenied != nil {
			e.onDenied(o.Decision)
		}
	}
}

// decideLocked is Decide's work under the gate's read lock.
func decideLocked[S byteseq](e *Engine, sc *Scratch, q *Request[S], o *Outcome) {
	set := e.set.Load()
	if set == nil {
		o.Result.Err = shardlimit.ErrClosed
		e.failed(o)
		return
	}
	if set.lists != nil && listed(e, set.lists, nil, q, o) {
		return
	}
	id, r, sh := matchRules(e, set, q)
	if r == nil {
		o.Action = httplimit.ActionNoRule
		if sh != nil {
			decideShadow(e, sc, sh, q, id, false)
		}
		return
	}
	o.r, o.Rule, o.Tier, o.Algorithm = r, r.name, r.tier, r.alg
	o.rate = len(r.rates) - 1
	o.Window = r.rates[o.rate].window
	if r.lists != nil && listed(e, r.lists, r, q, o) {
		if sh != nil {
			decideShadow(e, sc, sh, q, id, false)
		}
		return
	}
	if q.Cost < 0 {
		r.l.badCost.Add(1)
		o.Action = httplimit.ActionBadCost
		return
	}
	lkey := sc.lkey[:0]
	if ns := r.l.ns; ns != "" {
		lkey = append(lkey, ns...)
	}
	lkey, ok := buildKey(&e.keys, lkey, id, q.Client)
	sc.lkey, sc.Key = lkey, lkey[len(r.l.ns):]
	if !ok {
		r.l.noID.Add(1)
		o.Action = httplimit.ActionNoIdentity
		return
	}
	policies := r.policies || e.pol.any.Load() // bans.go
	if policies && !decidePolicies(e, r, sc, q.Now, q.Cost, !q.SlotHeld, o) {
		if sh != nil { // banned or over its cap: the shadow rule counts it too
			decideShadow(e, sc, sh, q, id, true)
		}
		return
	}
	o.Result = r.l.lim.AllowBytesN(lkey, q.Now, q.Cost)
	if len(r.rates) > 1 {
		o.rate = r.binding(o.Result.Window)
		o.Window = r.rates[o.rate].window
		if len(r.l.overrides) > 0 && e.hdr.IETF {
			// RateLimit-Policy gives the key's limits in every window,
			// the Result only the binding one's. Overrides change only
			// under the gate's write lock.
			o.lims, o.own = r.l.overrides[string(sc.Key)]
		}
	}
	switch {
	case o.Result.Err != nil:
		r.l.countError(o.Result.Err)
		e.failed(o)
	case o.Result.Allowed:
		o.Action = httplimit.ActionAllow
	case e.dryRun:
		o.Action = httplimit.ActionDryRunDeny
	default:
		o.Action = httplimit.ActionDeny
	}
	if policies {
		afterLimiter(e, r, sc.pkey, q.Now, o)
	}
	if sh != nil {
		decideShadow(e, sc, sh, q, id, true)
	}
}

// buildKey appends the key of a request with identity id from client to
// dst; false when the request has no identity under EmptyKeyReject.
func buildKey[S byteseq](k *keyer, dst []byte, id S, client netip.Addr) ([]byte, bool) {
	switch {
	case len(id) > 0:
		return appendIDKey(k, dst, id), true
	case k.identity && k.emptyKey == httplimit.EmptyKeyReject:
		return dst, false
	case k.identity && k.emptyKey == httplimit.EmptyKeyShared, !usableAddr(client):
		return append(dst, keyShared...), true
	}
	return k.appendAddrKey(dst, client), true
}

// failed completes a decision whose Result.Err is set.
func (e *Engine) failed(o *Outcome) {
	if e.onError == httplimit.FailOpen {
		o.Action = httplimit.ActionFailOpen
	} else {
		o.Action = httplimit.ActionFailClosed
	}
	o.r = nil // no rate-limit fields for a failed decision
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

// Close closes every rule's limiter, taking them off the janitor. Afterwards
// decisions fail with shardlimit.ErrClosed (answered per OnError). It is
// idempotent and returns nil.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if e.pol.share != nil {
		e.pol.share.close()
	}
	e.gate.lock()
	old := e.set.Swap(nil)
	e.gate.unlock()
	if old != nil {
		for _, r := range old.rules {
			r.l.lim.Close()
		}
	}
	for id, l := range e.retired {
		l.lim.Close()
		delete(e.retired, id)
	}
	return nil
}

// Stats returns the engine's counters.
func (e *Engine) Stats() httplimit.Stats {
	st := httplimit.Stats{
		WouldDeny:  e.wouldDeny.Load(),
		Errors:     e.errs.Load(),
		BadCost:    e.badCost.Load(),
		NoIdentity: e.noID.Load(),
	}
	e.policyStats(&st)
	if set := e.set.Load(); set != nil {
		st.Rules = len(set.rules)
		for _, r := range set.rules {
			ls := r.l.lim.Stats()
			if r.shadow {
				st.ShadowAllowed += ls.Allowed
				st.ShadowWouldDeny += ls.Denied
				st.Keys += ls.Keys
				continue
			}
			st.Allowed += ls.Allowed
			st.Denied += ls.Denied
			st.Keys += ls.Keys
			st.Settled.Add(r.l.settle.stats())
		}
	}
	return st
}

// RuleStats returns each rule in force with its counters, by name.
func (e *Engine) RuleStats() []httplimit.RuleStats {
	set := e.set.Load()
	if set == nil {
		return nil
	}
	// Sorted by name: the rules, not the large RuleStats.
	byName := make([]*rule, 0, len(set.rules))
	for _, r := range set.rules {
		byName = append(byName, r)
	}
	slices.SortFunc(byName, func(a, b *rule) int { return cmp.Compare(a.name, b.name) })
	out := make([]httplimit.RuleStats, 0, len(set.rules))
	for _, r := range byName {
		l := r.l
		longest := r.rates[len(r.rates)-1] // shortest window first
		var lims []httplimit.Rate
		if len(r.rates) > 1 {
			for _, ra := range r.rates {
				lims = append(lims, httplimit.Rate{Limit: ra.limit, Window: ra.window})
			}
		}
		out = append(out, httplimit.RuleStats{
			Name: r.name, Tier: r.tier, Path: r.path, Prefix: r.prefix, Methods: slices.Clone(r.methods),
			Algorithm: r.alg, Limit: longest.limit, Window: longest.window, Limits: lims, Buckets: r.buckets,
			DryRun: e.dryRun,
			Stats:  l.lim.Stats(),
			Errors: httplimit.ErrorCounts{
				TooManyKeys: l.tooManyKeys.Load(), Invalid: l.invalid.Load(),
				Closed: l.closedErrs.Load(), Other: l.otherErrs.Load(),
			},
			BadCost: l.badCost.Load(), NoIdentity: l.noID.Load(),
			Count: r.out.count, CostHeader: r.out.costHeader, Settles: r.out.settles || e.costHook, Settled: l.settle.stats(),
			Limiter: l.lim, KeyPrefix: l.ns,
			Shadow: r.shadow, Exempt: l.pol.exempt.Load(), DenyListed: l.pol.denyListed.Load(),
			Ban: clonePtr(r.ban), Concurrency: clonePtr(r.conc),
		})
	}
	return out
}

// TopDenied returns up to n of the most-denied (rule, client key) pairs
// since the engine was built, most denied first by guaranteed count
// (n <= 0: every pair listed), and the number of denials counted in all;
// nil and 0 if Options.TopDenied is negative. See httplimit.DeniedKey for
// which pairs are listed and what the counts promise.
func (e *Engine) TopDenied(n int) ([]httplimit.DeniedKey, uint64) {
	if e.top == nil {
		return nil, 0
	}
	items, total := e.top.Top(n)
	out := make([]httplimit.DeniedKey, len(items))
	for i, it := range items {
		out[i] = httplimit.DeniedKey{Rule: it.Group, Key: it.Key, Count: it.Count, Error: it.Err}
	}
	return out, total
}

// errNoRules is Reload's error for nil rules.
var errNoRules = fmt.Errorf("%w: %w: nil rules", shardlimit.ErrInvalidConfig, httplimit.ErrNoRules)
