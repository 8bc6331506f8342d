package core

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors of reservations and waits, exported and documented by
// package shardlimit under the same names.
var (
	ErrExceedsLimit        = errors.New("shardlimit: cost exceeds the limit")
	ErrNotHeld             = errors.New("shardlimit: units not held for later")
	ErrWouldExceedDeadline = errors.New("shardlimit: wait would exceed the context's deadline")
	ErrUnsupported         = errors.New("shardlimit: the limiter cannot do this")
)

// Reserved is the outcome of Reserve: package shardlimit's Reservation
// before it holds its limiter, key and times.
type Reserved struct {
	// At is the instant the units count at, Unix ns on the limiter's
	// timeline: the decision's (the key's latest instant) if they were
	// admitted at once, else the reservation's, after it. A cancel
	// settles the units there.
	At int64
	// Delay is the time from the caller's instant until the units are
	// the caller's: 0 if admitted at once. Not OK: the time until the same
	// request could succeed (Never if none can).
	Delay time.Duration
	// Err says why the reservation is not OK: ErrExceedsLimit (the cost
	// is above the limit, or the limit is 0), ErrNotHeld (the units are
	// free only after the horizon: try again after Delay),
	// ErrWouldExceedDeadline (after maxWait), or the decision's errors.
	Err error
	// OK reports whether the units are held for the caller.
	OK bool
	// Prev is, for a reservation held for later by an algorithm that
	// keeps the key's latest reservation instant (GCRA), that instant
	// before this reservation: Cancel restores it.
	Prev int64
}

// eventKeeper is implemented by algorithms that keep a key's latest
// reservation instant (x/time/rate's lastEvent): GCRA, whose refund of
// a decision may give back only what the reservations after it leave
// (see gcra.settle).
type eventKeeper[E any] interface {
	// event returns the instant of the latest reservation of the key
	// whose record is rec (not after its latest instant if none holds
	// units after it).
	event(rec *E) int64
	// setEvent sets it.
	setEvent(rec *E, t int64)
}

// Reserve reserves n units of key at now, waiting at most maxWait (see
// reserve).
func (l *limiter[E]) Reserve(key string, now time.Time, n int, maxWait time.Duration) Reserved {
	return l.reserve(key, l.tab.hash(key), l.tl.instant(now), n, maxWait)
}

// Closing returns a context done when the limiter is closed: a wait in
// progress sleeps on it, so Close ends it.
func (l *limiter[E]) Closing() context.Context { return l.closing }

// Clock returns the limiter's Clock.
func (l *limiter[E]) Clock() Clock { return l.clock }

// reserve reserves n units of key, whose hash is h, at instant t. If the
// key admits them at t, they are consumed there, as AllowN would: Delay
// 0. Otherwise they are consumed at T, the first instant not before the
// key's latest at which every rate admits them (t plus the decision's
// RetryAfter, checked), without moving the key's latest instant: each
// algorithm keeps units after it (algorithm.reserve), and every decision
// before T either counts them or is denied (the fixed window's and the
// counter's windows move to T's, so they deny until then; GCRA's TAT
// queues every later decision behind them; the sliding log counts the
// stamps at T in every decision before T and stamps its own no older).
// So no window holds more than its limit counting reservations, and
// reservations of one key are served in the order they were made, but
// for the sliding log, which admits a later request at once when it fits
// beside the units held.
//
// For the sliding log, T is at most the horizon after the key's latest
// instant (the longest window plus the stamp resolution), so stamps in
// the future keep ages that fit in 32 bits, and its ring holds at most
// twice the limit: a later T, or no room, is not held (ErrNotHeld, Delay
// the wait). The other algorithms' horizon is ten years. T after t+maxWait is not held either
// (ErrWouldExceedDeadline). A shared key (package sync) holds nothing for
// later: ErrNotHeld with Delay RetryAfter. Nothing is consumed unless OK.
func (l *limiter[E]) reserve(key string, h uint64, t int64, n int, maxWait time.Duration) Reserved {
	if n <= 0 || t < 0 || len(key) == 0 || len(key) > l.tab.maxKeyBytes || l.closed.Load() {
		if n == 0 && t >= 0 && !l.closed.Load() {
			return Reserved{At: t, OK: true}
		}
		return Reserved{Delay: Never, Err: l.invalid(n, t).Err}
	}
	s := l.tab.shardFor(h)
	s.mu.Lock()
	slot, ok := findHome(s, h, key)
	if !ok {
		first := max(t, s.floor)
		var err error
		if slot, err = insert(&l.tab, s, h, key, first); err != nil {
			s.refused++
			s.mu.Unlock()
			return Reserved{Delay: Never, Err: err}
		}
		l.alg.init(s, s.rec(slot), slot, first)
	}
	rec := s.rec(slot)
	v := l.decide(s, rec, slot, t, n, consume|full)
	s.tally(v)
	if y := l.tab.sync; y != nil {
		side, _ := l.tab.sideOf(s, slot)
		markTouched(s, y, slot, side)
	}
	te := l.alg.lastSeen(rec)
	var r Reserved
	switch {
	case v.allowed():
		r = Reserved{At: te, OK: true, Prev: noEvent}
	case v.err() != nil:
		r = Reserved{Delay: Never, Err: v.err()}
	case v.retry == Never:
		r = Reserved{Delay: Never, Err: ErrExceedsLimit}
	case s.peers != nil:
		r = Reserved{Delay: v.retry, Err: ErrNotHeld}
	default:
		r = l.reserveLater(s, slot, t, te, n, v.retry, maxWait)
	}
	s.mu.Unlock()
	return r
}

// reserveLater is reserve for a key that denied n units at t (decided at
// te, its latest instant), whose RetryAfter was retry. Requires s.mu held.
func (l *limiter[E]) reserveLater(s *shard[E], slot uint32, t, te int64, n int, retry, maxWait time.Duration) Reserved {
	at := t + int64(retry)
	prev := int64(noEvent)
	if e := l.events; e != nil {
		// After the key's latest reservation, never at its instant: the
		// latest is then the one whose instant is the key's (see Cancel).
		prev = e.event(s.rec(slot))
		at = max(at, prev+1)
	}
	for range 2 * MaxRates { // each step passes one rate's wait: bounded
		v := l.peekAt(s, slot, at, n)
		if v.allowed() {
			break
		}
		if v.retry == Never || v.retry <= 0 || at-te > l.horizon {
			return Reserved{Delay: time.Duration(at - t), Err: ErrNotHeld}
		}
		at += int64(v.retry)
	}
	delay := time.Duration(at - t)
	switch {
	case at-te > l.horizon:
		return Reserved{Delay: delay, Err: ErrNotHeld}
	case delay > maxWait:
		return Reserved{Delay: delay, Err: ErrWouldExceedDeadline}
	case !l.peekAt(s, slot, at, n).allowed():
		return Reserved{Delay: delay, Err: ErrNotHeld}
	}
	rec := s.rec(slot)
	if !l.alg.reserve(s, rec, slot, at, n, 0) {
		return Reserved{Delay: delay, Err: ErrNotHeld} // no room or memory to hold them
	}
	for k, extra := 1, l.tab.extrasOf(s, slot); k < l.rates.n; k++ {
		l.alg.reserve(s, &extra[k-1], slot, at, n, k)
	}
	s.denied-- // the decision counted a denial: it is an admission, later
	s.allowed++
	return Reserved{At: at, Delay: delay, OK: true, Prev: prev}
}

// peekAt returns the verdict of n units at t for the key in slot, as a
// peek decides it: on the shard's scratch copy of the key, so nothing
// changes. Requires s.mu held.
func (l *limiter[E]) peekAt(s *shard[E], slot uint32, t int64, n int) verdict {
	s.scratch = *s.rec(slot)
	side, extra := l.tab.sideOf(s, slot)
	copy(s.scratchSd, side)
	copy(s.scratchEx, extra)
	return l.decide(s, &s.scratch, scratchSlot, t, n, full)
}
