package core

import (
	"fmt"
	"math"
	"time"
)

// Settle settles a decision made for key at at to its final cost: delta >
// 0 charges delta more units, delta < 0 gives -delta back, in every rate
// of the key (package shardlimit's Limiter.Settle documents the rules).
// It returns an error wrapping ErrInvalidKey, ErrInvalidCost (|delta| >
// MaxLimit), ErrInvalidTime, ErrTooManyKeys (a charge for a new key in a
// full table) or ErrClosed.
func (l *limiter[E]) Settle(key string, at time.Time, delta int) error {
	return l.settle(key, l.tab.hash(key), l.tl.instant(at), delta, noEvent)
}

// SettleAt is Settle at instant t, Unix ns on the limiter's timeline.
func (l *limiter[E]) SettleAt(key string, h uint64, t int64, delta int) error {
	return l.settle(key, h, t, delta, noEvent)
}

// Cancel gives back the n units of a reservation of key that count at
// at, as Settle(key, at, -n) does; prev is the Reserved's Prev. If the
// reservation is the key's latest held one (GCRA: its instant is the
// key's latest reservation instant), the key's latest reservation instant
// goes back to prev, the one before it (x/time/rate's lastEvent), so
// the reservations made before it can be given back as exactly. A
// reservation must be cancelled at most once, and not also settled.
func (l *limiter[E]) Cancel(key string, at time.Time, n int, prev int64) error {
	return l.settle(key, l.tab.hash(key), l.tl.instant(at), -n, prev)
}

// noEvent is the prev of a settle that is not a reservation's cancel.
const noEvent = math.MinInt64

// settle is Settle for key, whose hash is h, at instant t. One lock, one
// lookup; a refund for a key not stored does nothing, a charge stores it.
//
// The rules, per rate (algorithm.settle): a decision at t was made at
// max(t, the key's latest instant then), so its units lie at t or later.
// A charge is an overdraft, never refused: it counts at the key's latest
// instant, which is at least the decision's (so it counts no shorter than
// the decision's units would), and it shows in the next decisions. A
// charge at a t after the key's latest instant (a decision this limiter
// did not make, such as a store's) first moves the key to t, as a
// decision of no units at t does, and counts there: time never goes back,
// and a charge never lands in a window or bucket that has ended. A
// refund takes units back from t's window (fixed window, while current),
// bucket (counter) or stamp (log), which hold the decision's own units or
// older ones, never newer ones: taking back an older unit instead of the
// decision's own frees less room, never more. GCRA takes back at most
// what the bucket cannot have drained since t. A unit already expired, or
// no longer told apart from later ones, is not given back: when in doubt,
// a refund gives back less. A key's usage forgotten (Reset, or the
// eviction of a key in use when the table is full) takes its decisions'
// units with it: a refund of a decision at an instant not after the
// latest instant a settle of a forgotten key of the shard could name (its
// latest instant, or a reservation's after it) gives nothing back
// (shard.forgot), as the units the key holds now may all be
// later decisions'. Forgetting is rare (an administrator's Reset, a full
// table), and the rule is per shard: a decision of another key of the
// shard made before it gives back nothing either, which is less, never
// more.
func (l *limiter[E]) settle(key string, h uint64, t int64, delta int, prev int64) error {
	switch {
	case l.closed.Load():
		return ErrClosed
	case len(key) == 0 || len(key) > l.tab.maxKeyBytes:
		return fmt.Errorf("%w: length %d", ErrInvalidKey, len(key))
	case delta < -MaxLimit || delta > MaxLimit:
		return fmt.Errorf("%w: delta %d outside [-MaxLimit, MaxLimit] ([%d, %d])", ErrInvalidCost, delta, -MaxLimit, MaxLimit)
	case t < 0:
		return ErrInvalidTime
	case delta == 0:
		return nil
	}
	s := l.tab.shardFor(h)
	s.mu.Lock()
	slot, ok := findHome(s, h, key)
	if !ok || delta < 0 && t < s.forgot {
		if delta < 0 {
			s.mu.Unlock()
			return nil
		}
		first := max(t, s.floor)
		var err error
		if slot, err = insert(&l.tab, s, h, key, first); err != nil {
			s.refused++
			s.mu.Unlock()
			return err
		}
		l.alg.init(s, s.rec(slot), slot, first)
	}
	rec := s.rec(slot)
	if delta > 0 && t > l.alg.lastSeen(rec) {
		// A charge at t after the key's latest instant (a decision made
		// elsewhere, as a store's) counts at t: a decision of no units
		// brings every rate to t first, or it would count in a window
		// or bucket that has ended.
		l.decide(s, rec, slot, t, 0, consume)
	}
	if l.rates.n == 1 {
		l.alg.settle(s, rec, slot, t, delta, 0)
	} else {
		extra := l.tab.extrasOf(s, slot)
		l.alg.settle(s, rec, slot, t, delta, 0)
		for k := range extra {
			l.alg.settle(s, &extra[k], slot, t, delta, k+1)
		}
	}
	if e := l.events; e != nil && prev != noEvent && e.event(rec) == t {
		e.setEvent(rec, prev) // the latest reservation is cancelled
	}
	if y := l.tab.sync; y != nil {
		side, _ := l.tab.sideOf(s, slot)
		markTouched(s, y, slot, side)
	}
	s.mu.Unlock()
	return nil
}

// satAdd adds delta > 0 to *c, at most up to math.MaxUint32 (an overdraft
// that large denies every request as surely), and returns what it added.
func satAdd(c *uint32, delta int) uint32 {
	n := uint32(min(uint64(delta), math.MaxUint32-uint64(*c)))
	*c += n
	return n
}

// deferred returns the verdict of n units at t for a rate whose units are
// reserved from instant at > t on, from v, the full verdict of the same
// request at at: only a peek is admitted, and the durations are measured
// from t.
func deferred(v verdict, t, at int64, n int) verdict {
	d := time.Duration(at - t)
	v.reset += d
	if n == 0 {
		return v
	}
	switch {
	case v.allowed():
		v.retry = d
	case v.retry != Never:
		v.retry += d
	}
	v.word &^= verdictAllowed | verdictMask30<<verdictRemShift
	return v
}

// takeBackAt takes back up to n of the units this node has not yet sent
// from rate k's bucket holding instant t, if the layer still keeps it: a
// refund must never take units from a bucket other than its own, nor
// units already sent (the store keeps those, so the cluster's count never
// drops below what was admitted).
func (p *peerLayer) takeBackAt(side []uint32, k int, t int64, n uint32) {
	y := &p.set.rate[k]
	id, h := floorDiv(t, y.bucket), y.head(side)
	if id > h || id <= h-int64(y.m) {
		return
	}
	d := &y.deltas(side)[y.idx(id)]
	*d -= min(*d, n)
}

// findHome is find, checking the key's home position first, where most
// keys sit (decideStored's lookup). Requires s.mu held.
func findHome[E any](s *shard[E], h uint64, key string) (uint32, bool) {
	slot := s.home(h)
	if r := &s.recs[slot]; len(key) <= inlineKey && int(r.klen) == len(key) &&
		r.tag == tagOf(h) && string(r.key[:len(key)]) == key {
		return slot, true
	}
	return find(s, h, key)
}

// WaitStored decides n > 0 units of key at the limiter's Clock, if key is
// stored, and reports whether they were admitted: WaitN's fast path, a
// decision without a Result. A denial is not counted in Stats (WaitN's
// reservation decides again, and counts that).
func (l *limiter[E]) WaitStored(key string, n int) bool {
	h, t := l.tab.hash(key), l.now()
	v, ok := decideStored(l, key, h, t, n, consume)
	switch {
	case !ok:
		return false
	case v.allowed():
		return true
	case v.word&verdictFull == 0:
		s := l.tab.shardFor(h)
		s.mu.Lock()
		s.denied--
		s.mu.Unlock()
	}
	return false
}
