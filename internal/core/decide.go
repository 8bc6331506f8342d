package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// limiter is what the four limiters share: the key table and the decision
// paths, bound to one algorithm's record type E and operations. Each
// algorithm's limiter type embeds it and adds the hot decision methods
// (decisions_gen.go).
type limiter[E any] struct {
	tab     table[E]
	alg     algorithm[E]
	relimit relimiter[E]   // nil if the algorithm's state is not encoded for a limit
	events  eventKeeper[E] // nil if the algorithm keeps no latest reservation instant
	cfg     Config         // immutable but for the limits, which are defaults
	rates   rateSet
	clock   Clock
	nano    nanoClock // the clock's allocation-free form, if it has one
	tl      timeline  // where the instants of the N-forms are placed
	horizon int64     // how far after a key's latest instant a reservation may lie, ns (see reserve)

	defMu    sync.Mutex
	defaults []int // the default limits in the order of cfg.rates(), under defMu

	closed    atomic.Bool
	closeOnce sync.Once
	closing   context.Context    // done at Close: ends the waits in progress
	closeWait context.CancelFunc // ends closing
	jan       *janitorJob        // nil if the janitor is disabled
}

// init sets up l, whose zero value it requires, for alg deciding rs's
// rates, whose keys keep stride side words (sync state laid out by y
// included; y nil unless shared) and extras extra records, and registers
// it with the process's janitor (the sweeper). cfg has its defaults filled
// in.
func (l *limiter[E]) init(cfg Config, rs *rateSet, alg algorithm[E], stride, extras int, y *syncSet) {
	l.alg, l.cfg, l.rates, l.clock = alg, cfg, *rs, cfg.Clock
	l.closing, l.closeWait = context.WithCancel(context.Background())
	for _, r := range cfg.rates() {
		l.defaults = append(l.defaults, r.Limit)
	}
	l.relimit, _ = alg.(relimiter[E])
	l.events, _ = alg.(eventKeeper[E])
	l.nano, _ = cfg.Clock.(nanoClock)
	l.tl = newTimeline()
	l.horizon = maxDebt / 2 // GCRA's TAT, the windows and buckets: far
	if _, ok := any(alg).(*slidingLog); ok {
		l.horizon = rs.window[0] + logUnit(rs.window[0]) // stamps' ages in 32 bits
	}
	if c, ok := cfg.Clock.(*systemClock); ok {
		// Share the clock's timeline, so Allow and AllowN(time.Now())
		// place instants alike even if the wall clock stepped between.
		l.tl = c.tl
	}
	l.tab.init(cfg, rs, alg, stride, extras, y)
	l.tab.clock = l.now
	if cfg.JanitorInterval > 0 {
		l.jan = newJanitorJob(cfg.JanitorInterval, l.janitorSweep, l.tab.holdsKeys)
		l.tab.jan = l.jan
		sweeper.add(l.jan)
	}
}

// now returns the limiter's Clock reading on its timeline.
func (l *limiter[E]) now() int64 {
	if l.nano != nil {
		return l.nano.unixNano()
	}
	return l.tl.instant(l.clock.Now())
}

// decideStored decides cost n > 0 at t for key, whose hash is h, if key is
// stored: the hot path, one lock and one lookup. It reports false, deciding
// nothing, if the call is invalid or the key is not stored (decideKey
// handles both).
func decideStored[E any, K keyBytes](l *limiter[E], key K, h uint64, t int64, n int, mode decideMode) (verdict, bool) {
	if n <= 0 || t < 0 || len(key) == 0 || len(key) > l.tab.maxKeyBytes || l.closed.Load() {
		return verdict{}, false
	}
	s := l.tab.shardFor(h)
	s.mu.Lock()
	slot, ok := s.home(h), false
	s.prefetchHome(slot) // the key's other state, while its record is on its way
	// Most keys sit at their home position: check it before the probe loop.
	if r := &s.recs[slot]; len(key) <= inlineKey && int(r.klen) == len(key) &&
		r.tag == tagOf(h) && string(r.key[:len(key)]) == string(key) {
		ok = true
	} else {
		slot, ok = find(s, h, key)
	}
	if !ok {
		s.mu.Unlock()
		return verdict{}, false
	}
	var v verdict
	if l.rates.n == 1 {
		v = l.alg.decide(s, s.rec(slot), slot, t, n, mode) // l.decide without its call
	} else {
		v = l.decide(s, s.rec(slot), slot, t, n, mode)
	}
	s.tally(v)
	if y := l.tab.sync; y != nil {
		side, _ := l.tab.sideOf(s, slot)
		markTouched(s, y, slot, side)
	}
	s.mu.Unlock()
	return v, true
}

// decideKey decides cost n at t for key, whose hash is h, on every path
// but decideStored's: invalid calls, new keys, peeks (mode without
// consume) and costs of 0. Its Result is always full.
func decideKey[E any, K keyBytes](l *limiter[E], key K, h uint64, t int64, n int, mode decideMode) Result {
	if n < 0 || t < 0 || len(key) == 0 || len(key) > l.tab.maxKeyBytes || l.closed.Load() {
		return l.invalid(n, t)
	}
	s := l.tab.shardFor(h)
	s.mu.Lock()
	var v verdict
	slot, ok := find(s, h, key)
	keep := mode&consume != 0 && n > 0
	decided := false // on the stored key in slot
	switch {
	case ok && keep:
		// Stored since decideStored looked (a concurrent first request).
		v = l.decide(s, s.rec(slot), slot, t, n, consume|full)
		decided = true
	case ok:
		// A peek works on a copy: it changes nothing.
		s.scratch = *s.rec(slot)
		side, extra := l.tab.sideOf(s, slot)
		copy(s.scratchSd, side)
		copy(s.scratchEx, extra)
		v = l.decide(s, &s.scratch, scratchSlot, t, n, full)
	case !keep:
		// A peek of a key not stored: answer from a fresh key's state,
		// storing nothing.
		var zero E
		s.scratch = zero
		clear(s.scratchSd)
		clear(s.scratchEx)
		l.alg.init(s, &s.scratch, scratchSlot, max(t, s.floor))
		v = l.decide(s, &s.scratch, scratchSlot, t, n, full)
	default:
		first := max(t, s.floor)
		var err error
		if slot, err = insert(&l.tab, s, h, key, first); err != nil {
			s.refused++
			lim := int(s.defLimits[0]) // guarded by mu
			s.mu.Unlock()
			return Result{Limit: lim, Err: err}
		}
		l.alg.init(s, s.rec(slot), slot, first)
		v = l.decide(s, s.rec(slot), slot, t, n, consume|full)
		decided = true
	}
	if y := l.tab.sync; y != nil && decided {
		side, _ := l.tab.sideOf(s, slot)
		markTouched(s, y, slot, side)
	}
	if keep {
		s.tally(v)
	}
	s.mu.Unlock()
	return l.result(v)
}

// tally counts the verdict of a decision that kept its cost in s's
// Stats: allowed, denied, or refused for want of memory (a ring that
// could not grow). Requires s.mu held.
func (s *shard[E]) tally(v verdict) {
	switch {
	case v.allowed():
		s.allowed++
	case v.word&verdictFull != 0:
		s.refused++
	default:
		s.denied++
	}
}

// result unpacks v.
func (l *limiter[E]) result(v verdict) Result {
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err(), Window: time.Duration(l.rates.window[v.rate()])}
}

// decide decides n units at t for the key in slot, whose record is rec
// (scratchSlot and the scratch record for a peek): one call of the
// algorithm's decide for a limiter of one rate, decideRates for several.
// Requires s.mu held.
func (l *limiter[E]) decide(s *shard[E], rec *E, slot uint32, t int64, n int, mode decideMode) verdict {
	if l.rates.n > 1 {
		return decideRates(l.alg, rateCall[E]{s, rec, l.tab.extrasOf(s, slot), slot, t, n, mode})
	}
	return l.alg.decide(s, rec, slot, t, n, mode)
}

// invalid returns the error result for a call that failed validation.
func (l *limiter[E]) invalid(n int, t int64) Result {
	switch {
	case l.closed.Load():
		return Result{Err: ErrClosed}
	case n < 0:
		return Result{Err: ErrInvalidCost}
	case t < 0:
		return Result{Err: ErrInvalidTime}
	}
	return Result{Err: ErrInvalidKey}
}

//go:generate go run ../gen/decisions -pkg core

// The hot decisions (Allow, AllowAt, AllowN and their []byte twins) are
// methods of each algorithm's limiter type in decisions_gen.go, written
// from one template: each hashes its key and places its instant, then
// takes decideStored's path for a stored key and decideKey's for the rest.

func (l *limiter[E]) Peek(key string, now time.Time, n int) Result {
	return decideKey(l, key, l.tab.hash(key), l.tl.instant(now), n, 0)
}

// The decision path as package shardlimit's generated methods take it
// (decisions_gen.go in the repository's root): the same steps as this
// package's, under exported names, each a call the compiler inlines.

// Decision modes for DecideStored and DecideKey.
const (
	Consume = consume // keep the decision
	Full    = full    // compute the Result's numbers
)

// Hash returns the table hash of key.
func (l *limiter[E]) Hash(key string) uint64 { return l.tab.hash(key) }

// HashBytes returns the table hash of key.
func (l *limiter[E]) HashBytes(key []byte) uint64 { return l.tab.hashBytes(key) }

// Now returns the limiter's Clock reading on its timeline, Unix ns.
func (l *limiter[E]) Now() int64 { return l.now() }

// Instant returns now on the limiter's timeline, Unix ns (negative if
// invalid: see ErrInvalidTime).
func (l *limiter[E]) Instant(now time.Time) int64 { return l.tl.instant(now) }

// DecideStored is decideStored for a string key.
func (l *limiter[E]) DecideStored(key string, h uint64, t int64, n int, mode decideMode) (verdict, bool) {
	return decideStored(l, key, h, t, n, mode)
}

// DecideStoredBytes is decideStored for a []byte key.
func (l *limiter[E]) DecideStoredBytes(key []byte, h uint64, t int64, n int, mode decideMode) (verdict, bool) {
	return decideStored(l, key, h, t, n, mode)
}

// DecideKey is decideKey for a string key.
func (l *limiter[E]) DecideKey(key string, h uint64, t int64, n int, mode decideMode) Result {
	return decideKey(l, key, h, t, n, mode)
}

// DecideKeyBytes is decideKey for a []byte key.
func (l *limiter[E]) DecideKeyBytes(key []byte, h uint64, t int64, n int, mode decideMode) Result {
	return decideKey(l, key, h, t, n, mode)
}

// Window returns Result.Window of v, a verdict of DecideStored: the
// window of the rate that decided.
func (l *limiter[E]) Window(v verdict) time.Duration {
	return time.Duration(l.rates.window[v.rate()])
}
