package core

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// harness runs one limiter and its model side by side. A limiter of K
// rates is modelled by K single-rate models combined all or nothing: a
// request is admitted iff every rate's model admits it, and then consumes
// from all of them; one any rate denies consumes from none. The Result is
// the binding rate's (the least remaining after the decision, ties to the
// longest window), its RetryAfter the latest of the rates' (Never if any
// is Never). With one rate this is the single model itself.
type harness struct {
	t      testing.TB
	alg    Algorithm
	l      Limiter
	rates  []Rate  // in the order of Config.Rates (or the one of Limit and Window)
	m      []model // one per rate, in the same order
	def    []int
	own    map[string][]int // keys with limits of their own
	enc    map[string][]int // the limit each stored key's state is encoded for, per rate
	last   map[string]int64 // each stored key's latest instant
	floor  []int64          // per shard: no new key decides earlier (see shard.floor)
	unit   int64            // instants are multiples of unit
	window int64            // the shortest window: the pace of the clock in step
	calls  int              // consuming calls so far: they rotate through the API's forms
	swept  int              // keys evicted by sweeps

	// A capped table (capTable): a new key may evict another, or be
	// refused.
	capped bool
	policy FullPolicy
	clock  *ManualClock // nil: the default clock, far ahead of the instants
	now    int64        // the limiter's clock, Unix ns
	keys   []string     // the keys step draws from; nil: "a" to "d"
	evicts int          // keys evicted by new keys
	refuse int          // new keys refused
}

// newHarness returns a harness of one rate, configured by Limit and Window.
func newHarness(tb testing.TB, alg Algorithm, limit int, window time.Duration, buckets int) *harness {
	return newRatesHarness(tb, alg, []Rate{{limit, window}}, buckets, false)
}

// newRatesHarness returns a harness of rates, configured by Config.Rates if
// asRates or several rates are given, else by Limit and Window.
func newRatesHarness(tb testing.TB, alg Algorithm, rates []Rate, buckets int, asRates bool) *harness {
	cfg := Config{Algorithm: alg, Buckets: buckets, Shards: 4, JanitorInterval: -1}
	if asRates || len(rates) > 1 {
		cfg.Rates = rates
	} else {
		cfg.Limit, cfg.Window = rates[0].Limit, rates[0].Window
	}
	l := mustNew(tb, cfg)
	h := &harness{t: tb, alg: alg, l: l, rates: slices.Clone(rates), own: map[string][]int{}, enc: map[string][]int{},
		last: map[string]int64{}, floor: make([]int64, 4), unit: 1, window: math.MaxInt64, now: math.MaxInt64}
	longest := int64(0)
	for _, r := range rates {
		h.def = append(h.def, r.Limit)
		h.window = min(h.window, int64(r.Window))
		longest = max(longest, int64(r.Window))
	}
	for _, r := range rates {
		w := int64(r.Window)
		switch alg {
		case FixedWindow:
			h.m = append(h.m, &fixedModel{w: w, win: map[string]int64{}, count: map[string]int{}})
		case SlidingLog:
			h.m = append(h.m, &logModel{w: w, units: map[string][]int64{}})
		case SlidingCounter:
			h.m = append(h.m, &counterModel{w: w, g: w / int64(buckets), n: int64(buckets), buckets: map[string]map[int64]int{}})
		case GCRA:
			h.m = append(h.m, &gcraModel{w: w, tat: map[string]*big.Rat{}})
		}
	}
	if alg == SlidingLog {
		// One ring for every window, its stamps at the longest's resolution.
		h.unit = logUnit(longest)
	}
	return h
}

func (h *harness) limitsOf(key string) []int {
	if v, ok := h.own[key]; ok {
		return v
	}
	return h.def
}

// capTable rebuilds h's limiter with a full table: one shard of at most
// maxKeys keys (40 keys to draw from when large, else 4) under policy,
// with a manual clock that runs behind or ahead of the instants if
// clocked. A new key may evict another (idle, or the least recent under
// EvictLeastRecent): the evicted key's model state is forgotten, and the
// shard's floor rises to the later of the instant it was judged at (the
// new key's) and its own latest, capped by the limiter's clock. Every
// decision still matches the models: an evicted key returning with an
// instant behind the floor is decided as a fresh key at the floor, and no
// key with limits of its own is evicted.
func (h *harness) capTable(policy FullPolicy, large, clocked bool) {
	cfg := h.l.Config()
	cfg.MaxKeys, cfg.WhenFull, cfg.Shards = 2, policy, 1
	if large {
		// 25 keys of 40 in a table of 42 positions: probe runs, keys
		// moving back.
		cfg.MaxKeys, h.keys = 25, cappedKeys
	}
	if clocked {
		h.clock = NewManualClock(time.Unix(t0Unix, 0))
		cfg.Clock = h.clock
	}
	h.l.Close()
	h.l = mustNew(h.t, cfg)
	h.floor = make([]int64, 1)
	h.capped, h.policy = true, policy
}

// cappedKeys are the keys of a large capped table: short and long (kept in
// the arena) keys, 40 of them for a shard of 25.
var cappedKeys = func() []string {
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprint("k", i), fmt.Sprintf("a-key-long-enough-for-the-arena-%d", i))
	}
	return keys
}()

// forget drops key's state from every model (its eviction).
func (h *harness) forget(key string) {
	for _, m := range h.m {
		m.forget(key)
	}
	delete(h.enc, key)
	delete(h.last, key)
}

// decide is the combined model's decision of n units for key at t (the
// key's latest), under limits lims, the key's state being encoded for enc
// (nil: none); real says whether the limiter keeps the decision.
func (h *harness) decide(key string, t int64, n int, real bool, lims, enc []int) Result {
	rates := len(h.m)
	e := make([]int, rates)
	copy(e, enc)
	if real {
		// A decision that may consume re-encodes every rate's state for
		// its limit, whatever it decides: the same decision with any
		// form (Result or bool) leaves the same state.
		for k := range rates {
			h.m[k].decide(key, t, 0, true, lims[k], e[k])
			if lims[k] > 0 {
				e[k] = lims[k]
			}
		}
	}
	rs := make([]Result, rates)
	all := true
	for k := range rates {
		rs[k] = h.m[k].decide(key, t, n, false, lims[k], e[k])
		all = all && rs[k].Allowed
	}
	for k := range rates {
		switch {
		case all && real:
			rs[k] = h.m[k].decide(key, t, n, true, lims[k], e[k])
		case !all && rs[k].Allowed:
			rs[k] = h.m[k].decide(key, t, 0, false, lims[k], e[k]) // its numbers without the cost
		}
	}
	b := 0
	for k := 1; k < rates; k++ {
		if rs[k].Remaining < rs[b].Remaining || rs[k].Remaining == rs[b].Remaining && h.rates[k].Window > h.rates[b].Window {
			b = k
		}
	}
	want := rs[b]
	want.Allowed = all
	want.Window = h.rates[b].Window
	want.RetryAfter = 0
	if !all {
		for _, r := range rs {
			want.RetryAfter = max(want.RetryAfter, r.RetryAfter)
		}
	}
	return want
}

// allow decides n units for key at t through one of the API's forms (in
// turn) and checks the Result against the models. On a capped table it
// finds the keys the call's insert evicted and a new key the table
// refused; on any other, neither may happen.
func (h *harness) allow(key string, t int64, n int, consume bool) {
	h.t.Helper()
	caller := t
	t = max(t, h.last[key])
	enc, stored := h.enc[key]
	sh, _ := keyShard(h.l, key)
	if !stored {
		t = max(t, h.floor[sh])
	}
	var got Result
	boolOnly := false // the form answers Allowed only
	now := time.Unix(0, caller)
	switch h.calls++; {
	case !consume:
		got = h.l.Peek(key, now, n)
	case n == 1 && h.calls%4 == 1:
		got.Allowed, boolOnly = h.l.AllowAt(key, now), true
	case n == 1 && h.calls%4 == 2:
		got.Allowed, boolOnly = h.l.AllowBytesAt([]byte(key), now), true
	case h.calls%4 == 3:
		got = h.l.AllowBytesN([]byte(key), now, n)
	default:
		got = h.l.AllowN(key, now, n)
	}
	lims := h.limitsOf(key)
	// The limiter stores a key, and re-encodes its state, on every
	// decision that may consume, denied ones included (a cost above the
	// limit too): its instant becomes the key's latest.
	real := consume && n > 0
	h.checkEvictions(key, sh, t, real && !stored)
	if real && !stored && h.refused(key, sh, got, boolOnly) {
		return
	}
	want := h.decide(key, t, n, real, lims, enc)
	if real {
		h.last[key] = t
		if !stored {
			enc = make([]int, len(lims))
			h.enc[key] = enc
		}
		for k, lim := range lims {
			if lim > 0 || !stored {
				enc[k] = lim
			}
		}
	}
	// Durations from the caller's instant end where the model's do.
	want.ResetAfter += time.Duration(t - caller)
	if want.RetryAfter != 0 && want.RetryAfter != Never {
		want.RetryAfter += time.Duration(t - caller)
	}
	if boolOnly {
		got = Result{Allowed: got.Allowed, Limit: want.Limit, Remaining: want.Remaining, ResetAfter: want.ResetAfter, RetryAfter: want.RetryAfter, Window: want.Window}
	}
	if got != want {
		h.t.Fatalf("%v %v key %q t=%d (caller %d) n=%d consume=%v limits %v:\n got %+v\nwant %+v", h.alg, h.rates, key, t, caller, n, consume, lims, got, want)
	}
}

// checkEvictions finds the stored keys a call on key (in shard sh, decided
// at t) evicted: only a call that inserts a new key into a capped table
// may, and never a key with limits of its own. Their model state is
// forgotten and the shard's floor rises.
func (h *harness) checkEvictions(key string, sh int, t int64, inserts bool) {
	h.t.Helper()
	evicted, evictedLast := false, int64(0)
	for k := range h.enc {
		if _, ok := keyShard(h.l, k); ok || k == key {
			continue
		}
		if _, own := h.own[k]; own {
			h.t.Fatalf("%v %v: key %q, which has limits of its own, was evicted", h.alg, h.rates, k)
		}
		if !h.capped || !inserts {
			h.t.Fatalf("%v %v: key %q was evicted by a call that inserts no key into a full table", h.alg, h.rates, k)
		}
		evictedLast = max(evictedLast, h.last[k])
		h.forget(k)
		evicted = true
		h.evicts++
	}
	if evicted {
		// An evicted key's next request is decided no earlier than its
		// latest instant, nor than the new key's, both capped by the
		// clock.
		h.floor[sh] = max(h.floor[sh], min(max(t, evictedLast), h.now))
	}
}

// refused reports whether the table refused to store the new key (in
// shard sh); the decision got must then fail with ErrTooManyKeys, which
// only a capped table answers, and under EvictLeastRecent only when every
// key of the shard has limits of its own.
func (h *harness) refused(key string, sh int, got Result, boolOnly bool) bool {
	h.t.Helper()
	if _, ok := keyShard(h.l, key); ok {
		return false
	}
	h.refuse++
	if !h.capped || got.Allowed || !boolOnly && !errors.Is(got.Err, ErrTooManyKeys) {
		h.t.Fatalf("%v %v: new key %q refused: %+v", h.alg, h.rates, key, got)
	}
	if h.policy == EvictLeastRecent {
		for k := range h.enc {
			if s, _ := keyShard(h.l, k); s == sh {
				if _, own := h.own[k]; !own {
					h.t.Fatalf("%v %v: new key %q refused while key %q could be evicted", h.alg, h.rates, key, k)
				}
			}
		}
	}
	return true
}

// settle settles a decision of key at at (the caller's instant, maybe
// behind the key's latest) by delta, in the limiter and the models; the
// next decisions compare them. A refund of a key not stored stores
// nothing; a capped table's new keys are not charged (the insert could
// evict).
func (h *harness) settle(key string, at int64, delta int) {
	h.t.Helper()
	enc, stored := h.enc[key]
	if !stored && delta > 0 && h.capped {
		return
	}
	if err := h.l.Settle(key, time.Unix(0, at), delta); err != nil {
		h.t.Fatalf("%v %v: Settle(%q, %d, %d): %v", h.alg, h.rates, key, at, delta, err)
	}
	if delta == 0 {
		return // nothing settled, nothing encoded
	}
	sh, ok := keyShard(h.l, key)
	if delta < 0 && at < shardForgot(h.l, key) {
		return // the shard forgot a key in use since: nothing given back
	}
	if !stored {
		if ok != (delta > 0) {
			h.t.Fatalf("%v %v: Settle(%q, %d, %d) of a key not stored: stored %v", h.alg, h.rates, key, at, delta, ok)
		}
		if delta <= 0 {
			return
		}
		h.last[key] = max(at, h.floor[sh])
		enc = make([]int, len(h.m))
		h.enc[key] = enc
	}
	lims := h.limitsOf(key)
	if stored && delta > 0 && at > h.last[key] {
		// A charge after the key's latest instant moves the key to at
		// first, as a decision of no units that keeps its state does.
		for k := range h.m {
			h.m[k].decide(key, at, 0, true, lims[k], enc[k])
			if lims[k] > 0 {
				enc[k] = lims[k]
			}
		}
		h.last[key] = at
	}
	longest := 0 // the log's ring: the longest window's
	for k, r := range h.rates {
		if r.Window > h.rates[longest].Window {
			longest = k
		}
	}
	// encoding returns the limit rate k's state is encoded for by the
	// settle: the one encoded, else the limit in force, else (a ban) the
	// default, or 1 (encodingLimit). A settle under a ban is kept.
	encoding := func(k int) int {
		switch {
		case enc[k] != 0:
			return enc[k]
		case lims[k] != 0:
			return lims[k]
		}
		return max(h.def[k], 1)
	}
	room := 0
	if lm, ok := h.m[longest].(*logModel); ok {
		capLim := lims[longest] // the ring's: the limit in force, or the encoding under a ban
		if capLim == 0 {
			capLim = encoding(longest)
		}
		room = lm.room(key, h.last[key], capLim)
	}
	for k := range h.m {
		e := encoding(k)
		if enc[k] == 0 || h.alg == SlidingLog && k == longest && lims[k] != 0 {
			enc[k] = e
		}
		h.m[k].settle(key, settleOp{at: at, last: h.last[key], delta: delta, enc: e})
	}
	if lm, ok := h.m[longest].(*logModel); ok && delta > room {
		h.overdraw(lm, key)
	}
}

// overdraw is the log's charge beyond its ring's room (slidingLog.overdraw):
// every unit the key holds, those of the longest window at the key's
// latest instant, the charge's included (those the ring had no room for
// too), moves to one stamp after the newest of them or of that instant,
// in every rate's model.
func (h *harness) overdraw(lm *logModel, key string) {
	last := h.last[key]
	var live []int64
	for _, s := range lm.units[key] {
		if last < s+lm.w {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return
	}
	ceil := func(t int64) int64 { return (t + h.unit - 1) / h.unit * h.unit }
	e := max(ceil(live[len(live)-1]), ceil(last)) + h.unit
	for _, m := range h.m {
		units := make([]int64, len(live))
		for i := range units {
			units[i] = e
		}
		m.(*logModel).units[key] = units
	}
}

// setLimits gives key limits of its own, one per rate (SetLimit with one).
func (h *harness) setLimits(key string, lims []int) {
	var err error
	if len(lims) == 1 {
		err = h.l.SetLimit(key, lims[0])
	} else {
		err = h.l.SetLimits(key, lims...)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.own[key] = lims
	enc, stored := h.enc[key]
	if !stored {
		enc = make([]int, len(lims))
		h.enc[key] = enc
		sh, _ := keyShard(h.l, key)
		h.last[key] = h.floor[sh] // a new key starts at its shard's floor
	}
	for k, lim := range lims {
		switch {
		case !stored:
			enc[k] = lim // a ban encodes nothing (see encodingLimit)
		case lim > 0 && enc[k] != lim:
			if enc[k] > 0 {
				h.m[k].relimit(key, h.last[key], enc[k], lim)
			}
			enc[k] = lim
		}
	}
}

// sweep sweeps the limiter at now: every key it evicts must have been
// idle, its model state that of a fresh key (the next decisions on it
// compare them), and never one with limits of its own; its shard's floor
// rises to now and the key's latest instant.
func (h *harness) sweep(now int64) {
	h.t.Helper()
	n := h.l.Sweep(time.Unix(0, now))
	gone := 0
	for key := range h.enc {
		sh, ok := keyShard(h.l, key)
		if ok {
			continue
		}
		if _, own := h.own[key]; own {
			h.t.Fatalf("%v %v: sweep at %d evicted key %q, which has limits of its own", h.alg, h.rates, now, key)
		}
		h.floor[sh] = max(h.floor[sh], now, h.last[key])
		delete(h.enc, key)
		delete(h.last, key)
		gone++
		h.swept++
	}
	if gone != n {
		h.t.Fatalf("%v %v: sweep at %d reported %d evictions, %d keys left", h.alg, h.rates, now, n, gone)
	}
}

func (h *harness) clearLimit(key string) {
	if err := h.l.ClearLimit(key); err != nil {
		h.t.Fatal(err)
	}
	delete(h.own, key)
}

func (h *harness) setDefaults(lims []int) {
	var err error
	if len(lims) == 1 {
		err = h.l.SetDefaultLimit(lims[0])
	} else {
		err = h.l.SetDefaultLimits(lims...)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.def = lims
}

// limitsFrom returns one limit in [0, 8] per rate drawn from b: rate 0's
// is b%9, as with one rate.
func (h *harness) limitsFrom(b uint8) []int {
	lims := make([]int, len(h.m))
	for k := range lims {
		lims[k] = int(b % 9)
		if k > 0 {
			lims[k] = int((uint32(b)*2654435761 + uint32(k)*40503) >> 16 % 9)
		}
	}
	return lims
}

// step runs one random operation drawn from r: a decision, a peek, a
// limit change, a settle or a sweep. One decision (or sweep) in four comes with an
// instant behind the clock, by up to two windows (gap's upper bits): a
// request read early, a stalled caller, a clock stepped back.
// The clock moves by fractions of the shortest window; a capped table's
// manual clock is up to a window behind it or ahead of it (op's upper
// bits).
func (h *harness) step(op, key, gap, n, lim uint8, clock *int64) {
	*clock += int64(gap%64) * h.window / 64 / h.unit * h.unit
	now := *clock
	if op>>4&3 == 0 {
		now -= int64(gap>>2) * h.window / 32 / h.unit * h.unit
	}
	if h.clock != nil {
		h.now = *clock + (int64(op>>6)-2)*h.window/2
		h.clock.Set(time.Unix(0, h.now))
	}
	k := string('a' + rune(key%4))
	if h.keys != nil {
		k = h.keys[int(key)%len(h.keys)]
	}
	cost := int(n) % (slices.Max(h.limitsOf(k)) + 2)
	switch op % 16 {
	case 0:
		h.allow(k, now, cost, false)
	case 1:
		if lim%4 == 0 {
			h.setDefaults(h.limitsFrom(lim))
		} else if _, stored := h.enc[k]; stored || !h.capped {
			h.setLimits(k, h.limitsFrom(lim)) // on a capped table, SetLimits of a new key could evict
		}
	case 2:
		h.clearLimit(k)
	case 14:
		if lim%2 == 0 {
			cost = -cost
		}
		h.settle(k, now, cost)
	case 15:
		h.sweep(now)
	default:
		h.allow(k, now, cost, true)
	}
}

// runModels runs seeds random sequences of steps operations on
// configuration c, each seed's rates drawn first; prepare, if not nil, may
// rebuild the harness's limiter (a capped or shared table) and returns
// what to do after each step. It returns the harnesses, for their counts.
func runModels(t *testing.T, c modelConfig, seeds uint64, steps int, salt uint64, prepare func(h *harness, seed uint64, rng *rand.Rand) func()) []*harness {
	var hs []*harness
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, salt))
		h := newRatesHarness(t, c.alg, ratesOf(c.windows, func(int) int { return 1 + rng.IntN(8) }), c.buckets, c.asRates)
		var after func()
		if prepare != nil {
			after = prepare(h, seed, rng)
		}
		clock := int64(t0Unix) * 1e9
		for range steps {
			h.step(uint8(rng.Uint32()), uint8(rng.Uint32()), uint8(rng.IntN(24)|rng.IntN(4)<<6), uint8(rng.Uint32()), uint8(rng.Uint32()), &clock)
			if after != nil {
				after()
			}
		}
		hs = append(hs, h)
	}
	return hs
}

// TestAlgorithmsMatchReferenceModels runs every configuration against the
// models on three kinds of table: one that holds any number of keys; one
// shard capped at two keys of the four the harness uses (or at 25 of 40),
// under both FullPolicy values, with a clock behind or ahead of the
// instants (see capTable); and, but for GCRA, one built for package sync,
// collected at random and told the store holds what it sent, which with
// no other node's units decides exactly as the local algorithms do,
// through refunds, limit changes, stale instants and sweeps.
func TestAlgorithmsMatchReferenceModels(t *testing.T) {
	// One goroutine: the race detector finds nothing here and makes each
	// seed about ten times slower, so under it 5 seeds run (the test
	// command's run without it takes all 20).
	seeds := uint64(20)
	if raceEnabled {
		seeds = 5
	}
	totalEvicts, cappedRuns := 0, 0
	for _, c := range modelConfigs {
		t.Run(configName(c.alg, c.windows), func(t *testing.T) {
			t.Run("any keys", func(t *testing.T) {
				swept := 0
				for _, h := range runModels(t, c, seeds, 2000, uint64(c.alg), nil) {
					swept += h.swept
				}
				t.Logf("%d keys swept", swept)
			})
			for _, policy := range []FullPolicy{RejectNewKeys, EvictLeastRecent} {
				t.Run("MaxKeys/"+policyName(policy), func(t *testing.T) {
					hs := runModels(t, c, 4, 800, uint64(c.alg)*7+uint64(policy), func(h *harness, seed uint64, _ *rand.Rand) func() {
						h.capTable(policy, seed%2 == 1, seed%3 != 0)
						return nil
					})
					evicts, refused := 0, 0
					for _, h := range hs {
						evicts += h.evicts
						refused += h.refuse
					}
					if evicts+refused < 50 {
						t.Fatalf("%d evictions and %d refusals: the test tests little", evicts, refused)
					}
					totalEvicts += evicts
					cappedRuns++
				})
			}
			if c.alg == GCRA {
				return // not shareable
			}
			t.Run("shared", func(t *testing.T) {
				runModels(t, c, 6, 1000, uint64(c.alg)+77, func(h *harness, _ uint64, rng *rand.Rand) func() {
					cfg := h.l.Config()
					h.l.Close()
					l, tab := newSharedT(t, cfg)
					h.l = l
					return func() {
						if rng.IntN(3) == 0 {
							applySent(tab)
						}
					}
				})
			})
		})
	}
	if !t.Failed() && cappedRuns == 2*len(modelConfigs) && totalEvicts < 1000 {
		t.Fatalf("%d evictions in all: the capped tables test little", totalEvicts)
	}
}

// applySent collects every shard of tab and tells it the store holds
// exactly what it sent: no other node's units.
func applySent(tab Synced) {
	for _, f := range collectAll(tab) {
		totals := make([]int64, len(f.Sent))
		for i, s := range f.Sent {
			totals[i] = int64(s)
		}
		tab.Apply(&f, totals)
	}
}

// FuzzAlgorithmsMatchReferenceModels drives every configuration with
// operations decoded from the input, five bytes each; cfg's low bits pick
// the configuration, its top bit a capped table (bit 6 its policy, bit 5
// a manual clock). Run longer by hand:
//
//	go test -run '^$' -fuzz FuzzAlgorithmsMatchReferenceModels -fuzztime 5m
func FuzzAlgorithmsMatchReferenceModels(f *testing.F) {
	f.Add(uint8(0), uint8(5), []byte("\x03\x00\x00\x01\x00\x03\x00\x00\x01\x00\x03\x00\x30\x01\x00"))
	f.Add(uint8(4), uint8(2), []byte("\x03\x01\x10\x03\x00\x01\x01\x00\x00\x05\x03\x01\x01\x07\x00"))
	// Several rates: a burst the short window denies, a tier with other
	// numbers per window, a default change and a stale call.
	f.Add(uint8(9), uint8(0x53), []byte("\x03\x00\x00\x02\x00\x03\x00\x00\x05\x00\x01\x00\x00\x00\x17\x03\x00\x40\x01\x00\x04\x00\x08\x01\x00"))
	f.Add(uint8(12), uint8(0x97), []byte("\x03\x01\x00\x03\x00\x03\x01\x01\x03\x00\x01\x01\x00\x00\x26\x03\x01\x10\x01\x00\x00\x01\x20\x02\x00"))
	f.Add(uint8(17), uint8(0x64), []byte("\x03\x02\x00\x03\x00\x01\x00\x00\x00\x0c\x03\x02\x02\x01\x00\x03\x02\x30\x01\x00"))
	// Settles: a charge past the limit, a refund of the decision's own
	// units, one with a stale instant, one of a key not stored.
	f.Add(uint8(1), uint8(3), []byte("\x03\x00\x00\x02\x00\x0e\x00\x00\x05\x01\x03\x00\x10\x01\x00\x0e\x00\x00\x02\x00\x1e\x00\x0c\x01\x00\x0e\x03\x00\x02\x00"))
	f.Add(uint8(11), uint8(0x42), []byte("\x03\x01\x00\x03\x00\x0e\x01\x00\x02\x00\x0e\x01\x20\x04\x01\x03\x01\x10\x02\x00"))
	// A capped table: two keys of four in one shard.
	f.Add(uint8(0x80|3), uint8(4), []byte("\x03\x00\x00\x01\x00\x03\x01\x00\x01\x00\x03\x02\x10\x01\x00\x03\x03\x10\x01\x00\x03\x00\x40\x01\x00"))
	f.Add(uint8(0xe0|10), uint8(0x35), []byte("\x03\x00\x00\x01\x00\x01\x01\x00\x00\x05\xc3\x02\x10\x01\x00\x43\x03\x10\x01\x00\x0f\x00\x3f\x00\x00\x03\x00\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, cfg, limit uint8, ops []byte) {
		c := modelConfigs[int(cfg&0x1f)%len(modelConfigs)]
		rates := ratesOf(c.windows, func(k int) int {
			if k == 0 {
				return int(limit % 10)
			}
			return int((uint32(limit)*2246822519 + uint32(k)*3266489917) >> 20 % 10)
		})
		h := newRatesHarness(t, c.alg, rates, c.buckets, c.asRates)
		if cfg&0x80 != 0 {
			h.capTable(FullPolicy(cfg>>6&1), false, cfg&0x20 != 0)
		}
		clock := int64(t0Unix) * 1e9
		for i := 0; i+5 <= len(ops) && i < 5*500; i += 5 {
			h.step(ops[i], ops[i+1], ops[i+2], ops[i+3], ops[i+4], &clock)
		}
	})
}
