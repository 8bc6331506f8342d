package mwengine

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// banState is a (rule, client key)'s record of violations and bans.
// Instants are Unix nanoseconds on the engine clock's timeline.
type banState struct {
	until    int64 // when the current or last ban ends; 0 if none
	win      int64 // when the current window of violations started
	last     int64 // the latest instant a violation was counted at
	forget   int64 // from this instant the state equals a fresh key's
	count    int32 // violations in the window
	offences int32 // bans counted for growth
}

// reclaimable reports whether b holds nothing at now: no ban in force,
// no violation in a window, no offence remembered.
func (b *banState) reclaimable(now int64) bool { return now >= b.forget && now >= b.until }

// policies are an engine's bans and requests in flight.
type policies struct {
	bans     *ptable[banState, *banState]
	inflight inflight
	any      atomic.Bool // a ban was ever set: rules without Ban check the table too
	share    *banShare   // nil without Options.BanStore

	banned, started, untracked, setFull atomic.Uint64
}

// init sizes the tables for o and keys of at most keyLen bytes.
func (p *policies) init(o *httplimit.Options, keyLen int) {
	n := cmp.Or(o.MaxPolicyKeys, httplimit.DefaultMaxPolicyKeys)
	p.bans = newPtable[banState](n, httplimit.KeyNamespaceLen+keyLen)
	p.inflight.t = newPtable[inflightState](n, httplimit.KeyNamespaceLen+keyLen)
}

// policyKey returns the policy table key of client key on rule.
func policyKey(rule, key string) []byte {
	return []byte(httplimit.KeyNamespace(rule) + key)
}

// banRest returns how long the ban of key lasts after now, 0 if none.
func (p *policies) banRest(key []byte, now int64) int64 {
	t := p.bans
	h := t.hash(key)
	s := t.shard(h)
	s.mu.Lock()
	var rest int64
	if v := t.get(s, h, key); v != nil && v.until > now {
		rest = v.until - now
	}
	s.mu.Unlock()
	return rest
}

// violate counts a denial of key at now under ban policy b, and bans the
// key when it makes b.After within b.Within. It returns the end of a ban
// it started, 0 if none.
func (p *policies) violate(key []byte, now int64, b *httplimit.Ban) int64 {
	t := p.bans
	h := t.hash(key)
	s := t.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := t.put(s, h, key, now)
	if !ok {
		p.untracked.Add(1)
		return 0
	}
	v := &s.slots[i].val
	now = max(now, v.last) // per key, time never goes back
	v.last = now
	if v.until > now {
		return 0 // banned already (set while this request was decided)
	}
	memory := int64(b.MaxLength())
	if v.until != 0 && now-v.until >= memory {
		v.offences = 0 // a clean spell as long as the longest ban
	}
	if v.count == 0 || now-v.win >= int64(b.Within) {
		v.win, v.count = now, 0
	}
	v.count++
	var started int64
	if int(v.count) >= b.After {
		v.offences = min(v.offences+1, 1<<20)
		v.until = now + int64(b.Length(int(v.offences)))
		v.count = 0
		started = v.until
		p.any.Store(true)
		p.started.Add(1)
	}
	v.forget = max(v.forget, v.win+int64(b.Within), v.until+memory)
	return started
}

// setBan bans key until until (Unix ns) unless a ban in force ends later;
// false if the table has no room.
func (p *policies) setBan(key []byte, until, now int64) bool {
	t := p.bans
	h := t.hash(key)
	s := t.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := t.put(s, h, key, now)
	if !ok {
		p.setFull.Add(1)
		return false
	}
	v := &s.slots[i].val
	v.until = max(v.until, until)
	v.forget = max(v.forget, v.until)
	p.any.Store(true)
	return true
}

// liftBan ends the ban of key, if any, and forgets its violations and
// offences; it reports whether a ban was in force at now. Only a ban
// ending no later than upTo is lifted (math.MaxInt64: any).
func (p *policies) liftBan(key []byte, now, upTo int64) bool {
	t := p.bans
	h := t.hash(key)
	s := t.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	v := t.get(s, h, key)
	if v == nil || v.until > upTo {
		return false
	}
	was := v.until > now
	*v = banState{}
	return was
}

// decidePolicies applies the ban and the concurrency of rule r to the
// request of client key sc.Key (limiter key sc.lkey) for cost units at
// now before its limiter is asked, with the policy key sc.pkey it builds
// (r's namespace, then the client key): it reports false when the request
// is answered already (o set: banned, or over its in-flight limit), else
// true with o.InFlight holding the slot taken, if any. Without slot the
// request takes none (its concurrency is not checked: Request.SlotHeld).
func decidePolicies(e *Engine, r *rule, sc *Scratch, now time.Time, cost int, slot bool, o *Outcome) bool {
	sc.pkey = append(append(sc.pkey[:0], r.pns...), sc.Key...)
	pkey := sc.pkey
	p := &e.pol
	if p.any.Load() {
		if rest := p.banRest(pkey, now.UnixNano()); rest > 0 && !e.dryRun {
			banned(r, sc.lkey, now, cost, time.Duration(rest), o)
			p.banned.Add(1)
			return false
		}
	}
	if c := r.conc; c != nil && slot {
		ref, ok := p.inflight.acquire(pkey, c.Limit)
		if !ok && !e.dryRun {
			o.Result = shardlimit.Result{Limit: c.Limit, RetryAfter: c.RetryAfterOrDefault()}
			o.Action = httplimit.ActionTooManyInFlight
			return false
		}
		o.InFlight = InFlight{ref: ref}
	}
	return true
}

// banned answers into o the request for cost units at now of the client
// of rule r with limiter key lkey, banned for rest after now. RetryAfter is
// the later of the ban's end and the limiter's own wait for the request (a
// Peek, which consumes nothing), so that a retry after it is admitted
// unless another denial arises meanwhile; ResetAfter is the rest of the
// ban. A Peek that fails (its error is the limiter's to report on an
// admitted request) leaves RetryAfter the rest of the ban.
func banned(r *rule, lkey []byte, now time.Time, cost int, rest time.Duration, o *Outcome) {
	rt := &r.rates[len(r.rates)-1]
	o.Result = shardlimit.Result{Limit: rt.limit, ResetAfter: rest, RetryAfter: rest, Window: rt.window}
	if w := r.l.peek(lkey, now, cost); w.Err == nil && !w.Allowed {
		o.Result.RetryAfter = max(rest, w.RetryAfter) // w.RetryAfter may be shardlimit.Never
	}
	o.rate, o.Window = len(r.rates)-1, rt.window
	o.Action = httplimit.ActionBanned
}

// peek reports what l's limiter would decide for n units of key at now,
// consuming nothing and creating no key. A limiter the engine built
// (shardlimit.New's, whose Peek keeps no reference to its key) is passed
// a view of key, so a banned request allocates nothing; a NewLimiter's
// limiter, whose Peek may keep its key, is passed a copy.
func (l *limiter) peek(key []byte, now time.Time, n int) shardlimit.Result {
	if l.ns == "" && len(key) > 0 {
		return l.lim.Peek(unsafe.String(&key[0], len(key)), now, n)
	}
	return l.lim.Peek(string(key), now, n)
}

// afterLimiter completes the policies of a request that the limiter
// decided into o: a denial counts towards a ban, and a request that will
// not reach the next handler gives its in-flight slot back. A failed
// decision keeps its slot, as the middleware's error hook may still let it
// through (SetErrorStatus); Reply gives it back if it does not.
func afterLimiter(e *Engine, r *rule, pkey []byte, now time.Time, o *Outcome) {
	switch o.Action {
	case httplimit.ActionAllow, httplimit.ActionFailOpen, httplimit.ActionFailClosed, httplimit.ActionDryRunDeny:
		return
	}
	e.Release(o.InFlight)
	o.InFlight = InFlight{}
	if o.Action == httplimit.ActionDeny && r.ban != nil {
		if until := e.pol.violate(pkey, now.UnixNano(), r.ban); until != 0 && e.pol.share != nil {
			e.pol.share.put(string(pkey), until)
		}
	}
}

// Bans returns the bans in force at the engine clock's now on the rules
// in force, by rule and key. Bans of rules no longer in force are not
// listed (they end with their rule's name). Safe for concurrent use; it
// locks the ban table one stripe at a time.
func (e *Engine) Bans() []httplimit.BanEntry {
	set := e.set.Load()
	if set == nil {
		return nil
	}
	names := make(map[string]string, len(set.rules))
	for name, r := range set.rules {
		names[r.pns] = name
	}
	now := e.clock.Now().UnixNano()
	var out []httplimit.BanEntry
	e.pol.bans.each(func(key []byte, v *banState) {
		if v.until <= now || len(key) < httplimit.KeyNamespaceLen {
			return
		}
		name, ok := names[string(key[:httplimit.KeyNamespaceLen])]
		if !ok {
			return
		}
		out = append(out, httplimit.BanEntry{
			Rule: name, Key: string(key[httplimit.KeyNamespaceLen:]),
			Until: time.Unix(0, v.until), Remaining: time.Duration(v.until - now), Offences: int(v.offences),
		})
	})
	slices.SortFunc(out, func(a, b httplimit.BanEntry) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// SetBan bans client key on the rule named rule for d from the engine
// clock's now, or keeps a ban in force that ends later. key is a client
// key as Bans and TopDenied list it ("ip:192.0.2.1", "id:client-1"); an
// "ip:" key of an address, or of a network no wider than a group, names
// the group the middleware keys it by (KeyConfig.IPv4Prefix, IPv6Prefix),
// so "ip:2001:db8::1" bans 2001:db8::/64 under the default, and a wider
// network is refused. An "id:" key must be one requests have: an identity
// the rules in force list, unless KeyConfig.UnknownIdentity is
// UnknownIdentityOwnKey. The rule need not have a Ban, but must not be a
// shadow rule (which enforces no ban). Errors
// wrap shardlimit.ErrInvalidConfig (no rule of that name in force, a
// shadow rule, a malformed key, d outside (0, httplimit.MaxBanDuration]) or
// shardlimit.ErrTooManyKeys (the ban table is full of state that may not
// be reclaimed), or are shardlimit.ErrClosed.
func (e *Engine) SetBan(rule, key string, d time.Duration) error {
	pkey, err := e.banKey(rule, key)
	if err != nil {
		return err
	}
	if err := e.checkBanMet(rule, key); err != nil {
		return err
	}
	if d <= 0 || d > httplimit.MaxBanDuration {
		return fmt.Errorf("%w: ban of %v outside (0, %v]", shardlimit.ErrInvalidConfig, d, httplimit.MaxBanDuration)
	}
	now := e.clock.Now().UnixNano()
	until := now + int64(d)
	if !e.pol.setBan(pkey, until, now) {
		return fmt.Errorf("%w: the ban table is full (Options.MaxPolicyKeys)", shardlimit.ErrTooManyKeys)
	}
	if e.pol.share != nil {
		e.pol.share.put(string(pkey), until)
	}
	return nil
}

// LiftBan ends the ban of client key (as SetBan takes it) on the rule
// named rule and forgets its violations and offences, so its next ban is
// a first one; it reports whether a ban was in force. Errors are SetBan's,
// but it lifts the bans SetBan refuses to set as unmet (on a shadow rule,
// of an identity the rules no longer list), which a reload can leave.
// With Options.BanStore the lift is queued for the store in the same step,
// and no read of the store restores the ban until the lift is written.
func (e *Engine) LiftBan(rule, key string) (bool, error) {
	pkey, err := e.banKey(rule, key)
	if err != nil {
		return false, err
	}
	now := e.clock.Now().UnixNano()
	if e.pol.share != nil {
		return e.pol.share.liftAndQueue(string(pkey), now), nil
	}
	return e.pol.liftBan(pkey, now, 1<<63-1), nil
}

// banKey returns the ban table key of client key on the rule named rule,
// which must be in force.
func (e *Engine) banKey(rule, key string) ([]byte, error) {
	set := e.set.Load()
	if set == nil {
		return nil, shardlimit.ErrClosed
	}
	if _, ok := set.rules[rule]; !ok {
		return nil, fmt.Errorf("%w: no rule %q in force", shardlimit.ErrInvalidConfig, rule)
	}
	if a, ok := strings.CutPrefix(key, keyAddr); ok {
		k, err := e.addrBanKey(a)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", shardlimit.ErrInvalidConfig, key, err)
		}
		key = k
	} else if !isClientKey(key) {
		return nil, fmt.Errorf("%w: key %q is not a client key (%q and an identity, %q and 64 hex digits, %q or %q)", shardlimit.ErrInvalidConfig, key, keyID, keyDigest, keyAddr, keyShared)
	}
	if len(key) > e.keys.maxKeyLen() {
		return nil, fmt.Errorf("%w: key of %d bytes, longer than %d", shardlimit.ErrInvalidConfig, len(key), e.keys.maxKeyLen())
	}
	return policyKey(rule, key), nil
}

// PolicyStats returns the counters of bans and concurrency limits.
func (e *Engine) PolicyStats() httplimit.PolicyStats {
	p := &e.pol
	st := httplimit.PolicyStats{
		Banned: p.banned.Load(), BansStarted: p.started.Load(),
		ViolationsUntracked: p.untracked.Load(), BanTableFull: p.setFull.Load(),
		InFlightRefused: p.inflight.refused.Load(), InFlightTableFull: p.inflight.full.Load(),
	}
	if p.share != nil {
		st.StoreErrors, st.StoreDropped = p.share.errs.Load(), p.share.dropped.Load()
		st.StoreWrites, st.StoreReads = p.share.writes.Load(), p.share.reads.Load()
	}
	return st
}

// compilePolicies sets the ban and concurrency fields of r, compiled from
// ru (validated). A rule without either still checks the ban table once
// any ban was set (SetBan needs no Ban on the rule): see decideLocked.
func (e *Engine) compilePolicies(r *rule, ru httplimit.Rule) {
	if ru.Ban != nil {
		b := *ru.Ban
		r.ban = &b
	}
	if ru.Concurrency != nil {
		c := *ru.Concurrency
		r.conc = &c
	}
	r.pns = httplimit.KeyNamespace(ru.Name)
	r.policies = r.ban != nil || r.conc != nil
}

// checkBanMet returns an error wrapping shardlimit.ErrInvalidConfig if a
// ban of client key (valid, as banKey took it) on the rule named rule (in
// force) would meet no request: the rule is a shadow rule, which answers
// none; or key is an identity or digest key when the middleware reads no
// identity, or an identity the rules in force do not list under
// UnknownIdentityAnonymous, whose requests are keyed by address. LiftBan
// does not check it, so that a ban a reload made unmet can be lifted.
func (e *Engine) checkBanMet(rule, key string) error {
	set := e.set.Load()
	if set == nil {
		return shardlimit.ErrClosed
	}
	if r, ok := set.rules[rule]; ok && r.shadow {
		return fmt.Errorf("%w: rule %q is a shadow rule: it answers no request, so it enforces no ban", shardlimit.ErrInvalidConfig, rule)
	}
	id, isID := strings.CutPrefix(key, keyID)
	if !isID && !strings.HasPrefix(key, keyDigest) {
		return nil
	}
	if !e.keys.identity {
		return fmt.Errorf("%w: key %q: the middleware reads no identity (KeyConfig.Header or a key function): clients are keyed by address", shardlimit.ErrInvalidConfig, key)
	}
	if _, known := lookupID(set, id); isID && !known && e.keys.unknownID == httplimit.UnknownIdentityAnonymous {
		return fmt.Errorf("%w: key %q: no tier or override of the rules in force lists this identity: under UnknownIdentityAnonymous its requests are keyed by address", shardlimit.ErrInvalidConfig, key)
	}
	return nil
}

// isClientKey reports whether key, not an address key, is one a request
// can have: an identity key of a non-empty identity, a digest key of 64
// lowercase hex digits (as hex.AppendEncode writes them), or the shared
// key.
func isClientKey(key string) bool {
	if id, ok := strings.CutPrefix(key, keyID); ok {
		return id != ""
	}
	if d, ok := strings.CutPrefix(key, keyDigest); ok {
		return len(d) == 2*sha256.Size && strings.Trim(d, "0123456789abcdef") == ""
	}
	return key == keyShared
}

// addrBanKey returns the client key of a, an address or a network no
// wider than the clients' grouping (KeyConfig.IPv4Prefix, IPv6Prefix):
// the key of the group holding it.
func (e *Engine) addrBanKey(a string) (string, error) {
	addr, err := netip.ParseAddr(a)
	if err != nil {
		p, perr := netip.ParsePrefix(a)
		if perr != nil {
			return "", fmt.Errorf("neither an address nor a network after %q", keyAddr)
		}
		addr = p.Addr().Unmap()
		bits, pbits := e.keys.v6Bits, p.Bits()
		if addr.Is4() {
			bits = e.keys.v4Bits
		}
		if p.Addr().Is4In6() {
			pbits -= 96 // ::ffff:10.0.0.0/104 is 10.0.0.0/8
		}
		if pbits < bits {
			return "", fmt.Errorf("a network wider than the /%d clients are grouped by", bits)
		}
	}
	return string(e.keys.appendAddrKey(nil, addr)), nil
}

// clonePtr returns a copy of *p, nil for nil.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
