package core

import (
	"math"
	"math/bits"
	"time"
)

// logRec is a SlidingLog key's state: 32 bytes plus its ring buffer. With
// several rates, the key's record holds the ring, which covers the longest
// window, and extra records the others, of which only lim and head are
// used: head counts the ring's oldest entries that no longer count in
// that rate's window.
type logRec struct {
	lim   uint32 // lim word, see ownLimit
	ref   uint32 // the ring's location in the shard's ringPool
	cap   uint32 // the ring's capacity, 0 if it has none
	head  uint32 // ring index of the oldest timestamp
	count uint32 // timestamps in the ring
	side  uint32 // the key's entry in the shard's slab (shared or several rates only)
	last  int64  // the key's latest instant seen, Unix ns
}

// slidingLog keeps one timestamp per admitted unit for the longest window
// and admits n units at t iff, for every rate, fewer than limit-n+1
// timestamps lie in (t-W, t].
//
// Timestamps are 4 bytes: ceil(t/unit) modulo 2^32, unit the smallest power
// of ten nanoseconds with unit*2^31 > 2W for the longest window W. Every
// stored timestamp lies within 2W of the key's current instant, so the age
// of an entry is the int32 difference of the two. Rounding timestamps up
// keeps every unit counted for at least W (never admits early) and at most
// one unit longer.
type slidingLog struct {
	rates  int
	window [MaxRates]int64 // W of each rate, ns, longest first
	unit   int64           // timestamp resolution, ns
}

// NewSlidingLog returns a new limiter of the algorithm, as package shardlimit's
// NewSlidingLog (documented there) does, with its errors.
func NewSlidingLog(cfg Config) (Limiter, error) { return build[LogLimiter](cfg) }

// Init sets up l, whose zero value it requires, as NewSlidingLog(cfg)
// would, and returns NewSlidingLog's errors.
func (l *LogLimiter) Init(cfg Config) error {
	cfg, err := cfg.withDefaults(SlidingLog)
	if err != nil {
		return err
	}
	rs := newRateSet(cfg)
	l.init(cfg, &rs, newSlidingLog(&rs), 0, rs.n-1, nil)
	return nil
}

// newSlidingLog returns the log of rs's rates.
func newSlidingLog(rs *rateSet) *slidingLog {
	return &slidingLog{rates: rs.n, window: rs.window, unit: logUnit(rs.window[0])}
}

// LogLimiter is the sliding log's Limiter.
type LogLimiter struct{ limiter[logRec] }

// logUnit returns the timestamp resolution for window w: the smallest power
// of ten nanoseconds u with u*2^31 > 2w.
func logUnit(w int64) int64 {
	u := int64(1)
	for u*(1<<31) <= 2*w {
		u *= 10
	}
	return u
}

func (a *slidingLog) init(s *shard[logRec], r *logRec, slot uint32, t int64) {
	if r.cap > 0 && slot != scratchSlot {
		a.setExcess(s, r, 0)
	}
	r.head, r.count, r.last = 0, 0, t
	if a.rates > 1 {
		_, extra := s.keyState(slot, r.side)
		for k := range extra {
			extra[k].head = 0
		}
	}
}

// stamp returns the stored form of instant t, rounded up.
func (a *slidingLog) stamp(t int64) uint32 {
	return uint32((t + a.unit - 1) / a.unit)
}

// age returns how many units before tq (= t/unit, rounded down) the entry
// e was stamped; -1 for an entry stamped in the current unit but rounded up.
func age(tq int64, e uint32) int32 {
	return int32(uint32(tq) - e)
}

// expiry returns the instant at which entry e stops counting in window w,
// seen from t: its stamp plus w, so a unit counts less than one step past
// its own instant plus w, whatever w's remainder modulo the resolution.
func (a *slidingLog) expiry(t int64, e uint32, w int64) int64 {
	tq := t / a.unit
	return (tq-int64(age(tq, e)))*a.unit + w
}

// expiredUpTo returns the newest stamp, in stored units, that no longer
// counts at t in window w: entry e has expired at t iff
// age(expiredUpTo(t, w), e) >= 0, that is iff e*unit + w <= t (see expiry).
func (a *slidingLog) expiredUpTo(t, w int64) int64 {
	return floorDiv(t-w, a.unit)
}

// advance brings the key in slot, record r, to instant te, its latest,
// dropping the timestamps that have expired in the longest window, and
// moves the other rates' skips (in its extra records) past those expired
// in theirs. Every stamp is below r.last+unit but a reservation's (see
// reserve), so all have expired from r.last+W+unit on unless the newest
// has not: no scan then.
func (a *slidingLog) advance(s *shard[logRec], r *logRec, slot uint32, te int64) {
	count := r.count
	switch {
	case r.count == 0:
	case te-r.last >= a.window[0]+a.unit && a.newestAt(s, r)+a.window[0] <= te:
		r.head, r.count = 0, 0
	default:
		buf := s.rings.ring(r.ref, r.cap)
		if te-r.last >= a.window[0]+a.unit {
			// Only a reservation's stamps, after the latest instant's,
			// still count: drop the others by their age from it, as their
			// age from te may not fit in 32 bits.
			lq := a.stamp(r.last)
			for r.count > 0 && int32(buf[r.head]-lq) <= 0 {
				r.head++
				if r.head == r.cap {
					r.head = 0
				}
				r.count--
			}
		}
		tx := a.expiredUpTo(te, a.window[0])
		for r.count > 0 && age(tx, buf[r.head]) >= 0 {
			r.head++
			if r.head == r.cap {
				r.head = 0
			}
			r.count--
		}
	}
	r.last = te
	dropped := count - r.count
	if dropped > 0 && slot != scratchSlot {
		// The oldest stamp expired, and its excess with it (a peek's copy
		// of the record, in scratchSlot, shares the key's ring and excess,
		// and keeps them).
		a.setExcess(s, r, 0)
	}
	if a.rates == 1 {
		return
	}
	_, extra := s.keyState(slot, r.side)
	for k := range extra {
		p := &extra[k]
		p.head -= min(p.head, dropped)
		if p.head < r.count {
			buf := s.rings.ring(r.ref, r.cap)
			tx := a.expiredUpTo(te, a.window[k+1])
			for p.head < r.count && age(tx, buf[wrap(r.head+p.head, r.cap)]) >= 0 {
				p.head++
			}
		}
	}
}

func (a *slidingLog) decide(s *shard[logRec], r *logRec, slot uint32, t int64, n int, mode decideMode) verdict {
	k := mode.rate()
	key := r // the key's record; r is that of its rate k
	if k > 0 {
		key = s.keyRec(slot)
	}
	te := max(t, key.last) // per key, time never goes back
	if te != key.last {
		// The first decision at te, of whichever rate: every rate's
		// expired timestamps go (the key's latest instant is the one its
		// ring was last brought to).
		a.advance(s, key, slot, te)
	}
	var side []uint32 // a shared key's side words
	var others int64
	p := s.peers // a shared key's other nodes' units, nil if not shared
	if p != nil {
		// The other nodes' units in rate k's window, by its own buckets.
		side = s.sideWords(slot, key.side)
		others = p.at(side, k, te)
	}
	lim0 := effectiveLimit(key.lim, s.defLimits[0]) // the ring's capacity
	if lim0 != 0 {
		key.lim = key.lim&^limitMask | lim0
		if mode&consume != 0 && key.cap > lim0 {
			a.shrink(s, key, lim0) // the limit shrank: give memory back
		}
	}
	lim, skip := lim0, uint32(0)
	if k > 0 {
		lim, skip = a.rateLimit(s, r, k)
	}
	allowed := fits(n, lim, a.counted(s, key, skip)+others)
	pushed := false // this decision's units are in the ring
	if allowed && n > 0 && mode&consume != 0 {
		if k == 0 && !a.push(s, key, te, uint32(n), lim0) {
			return verdict{word: verdictFull} // no memory for the timestamps
		}
		pushed = k == 0
		if p != nil {
			p.add(side, k, uint32(n))
		}
	}
	if mode&full == 0 {
		return verdict{word: b2u(allowed)}
	}
	// Field by field, not a composite literal (see the counter's decide).
	var v logView
	v.r, v.slot, v.k, v.skip = key, slot, k, skip
	v.others, v.allowed, v.pushed = others, allowed, pushed
	rem, reset, retry := a.numbers(s, &v, t, n, lim)
	return makeVerdict(allowed, k, lim, int(max(0, rem)), reset, retry)
}

// rateLimit returns the limit in force for rate k > 0 of a key, whose
// extra record is r, recording it in r's lim word, and how many of the
// ring's oldest entries no longer count in the rate's window.
func (a *slidingLog) rateLimit(s *shard[logRec], r *logRec, k int) (lim, skip uint32) {
	lim = effectiveLimit(r.lim, s.defLimits[k])
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	return lim, r.head
}

// shrink gives back the memory of r's ring above capacity lim, if its
// units fit.
func (a *slidingLog) shrink(s *shard[logRec], r *logRec, lim uint32) {
	if r.count <= lim {
		a.resize(s, r, max(lim, r.count))
	}
}

// refund drops the n newest timestamps for the ring's rate (its push);
// the other rates keep theirs in the ring.
func (a *slidingLog) refund(s *shard[logRec], r *logRec, slot uint32, n int, k int) {
	key := r // the key's record; r is that of its rate k
	if k > 0 {
		key = s.keyRec(slot)
	} else if key.count -= uint32(n); key.count == 0 {
		a.setExcess(s, key, 0)
	}
	if p := s.peers; p != nil {
		side, _ := s.keyState(slot, key.side)
		p.takeBack(side, k, uint32(n))
	}
}

// newest returns the newest stamp of r's ring, which holds one.
func (a *slidingLog) newest(s *shard[logRec], r *logRec) uint32 {
	return s.rings.ring(r.ref, r.cap)[wrap(r.head+r.count-1, r.cap)]
}

// newestAt returns the instant of the newest stamp of r's ring, which
// holds one, Unix ns: its age is taken from the key's latest instant's
// stamp, within a window and the horizon of it (see reserve), so it fits
// in 32 bits however long ago that instant was.
func (a *slidingLog) newestAt(s *shard[logRec], r *logRec) int64 {
	lq := (r.last + a.unit - 1) / a.unit
	return (lq + int64(int32(a.newest(s, r)-uint32(lq)))) * a.unit
}

// dropOldest drops the d oldest stamps of the key in slot (record r),
// moving the other rates' skips with them.
func (a *slidingLog) dropOldest(s *shard[logRec], r *logRec, slot uint32, d uint32) {
	r.head, r.count = wrap(r.head+d, r.cap), r.count-d
	if a.rates > 1 {
		_, extra := s.keyState(slot, r.side)
		for k := range extra {
			extra[k].head -= min(extra[k].head, d)
		}
	}
}

// room returns how many of n more stamps the key's ring (record r) may
// take under limit lim: it holds at most twice the limit (a window's
// units and a window's reservations, or an overdraft of a window's worth),
// an overdraft's excess counted in. Stamps are never dropped to make
// room: a refund could then give back units that the dropped ones still
// held.
func (a *slidingLog) room(s *shard[logRec], r *logRec, n, lim uint32) uint32 {
	held := uint64(r.count) + uint64(a.excessOf(s, r))
	return uint32(min(uint64(n), 2*uint64(lim)-min(2*uint64(lim), held)))
}

// counted returns the units the key's ring (record r) counts after its
// skip oldest stamps: those stamps, and an overdraft's excess while the
// oldest stamp, which holds it, still counts (skip 0).
func (a *slidingLog) counted(s *shard[logRec], r *logRec, skip uint32) int64 {
	c := int64(r.count - skip)
	if skip == 0 {
		c += int64(a.excessOf(s, r))
	}
	return c
}

// excessOf returns the units the oldest stamp of r's ring holds besides
// itself: an overdraft's (see overdraw), 0 for a key that never overdrew.
func (a *slidingLog) excessOf(s *shard[logRec], r *logRec) uint32 {
	if s.rings.excess == nil || r.count == 0 {
		return 0
	}
	x, ok := s.rings.excess[r.ref]
	if !ok || s.rings.ring(r.ref, r.cap)[r.head] != x.stamp {
		return 0 // the stamp that held it has expired
	}
	return x.units
}

// setExcess sets the units the oldest stamp of r's ring, which has one,
// holds besides itself to x. The shard's map is nil again once no ring
// has any.
func (a *slidingLog) setExcess(s *shard[logRec], r *logRec, x uint32) {
	m := &s.rings.excess
	switch {
	case x != 0:
		if *m == nil {
			*m = make(map[uint32]excess)
		}
		(*m)[r.ref] = excess{stamp: s.rings.ring(r.ref, r.cap)[r.head], units: x}
	case *m != nil:
		delete(*m, r.ref)
		if len(*m) == 0 {
			*m = nil
		}
	}
}

// settle, for the ring's rate (k = 0, which settles every rate's shared
// units too), stamps a charge at the key's latest instant (what the ring
// has no room for, see room, is an overdraft's excess: see overdraw), or refunds up to |delta| stamps of at's
// own stamp: a decision at at or later stamped its units there or later,
// so these are the decision's own or older ones, never newer. A refund of
// a decision whose instant was after at (a stale at) finds fewer, and
// gives back less.
func (a *slidingLog) settle(s *shard[logRec], r *logRec, slot uint32, at int64, delta int, k int) {
	if k > 0 {
		return
	}
	// The ring's capacity: the limit in force, or under a ban the one
	// encoded (a charge made under a ban counts once it is lifted).
	lim := effectiveLimit(r.lim, s.defLimits[0])
	if lim == 0 {
		if lim = r.lim & limitMask; lim == 0 {
			lim = encodingLimit(r.lim, s.defLimits[0])
		}
	}
	r.lim = r.lim&^limitMask | lim
	var n uint32
	if delta > 0 {
		n = uint32(delta)
		room := a.room(s, r, n, lim)
		if room > 0 && !a.push(s, r, r.last, room, 2*lim) {
			room = 0 // no memory for the stamps
		}
		if room < n {
			a.overdraw(s, r, slot, n-room) // the ring is full
		}
	} else if n = a.unstamp(s, r, slot, a.stamp(at), uint32(-delta)); n == 0 {
		return
	}
	if p := s.peers; p != nil {
		side := s.sideWords(slot, r.side)
		for j := range a.rates {
			if delta > 0 {
				p.add(side, j, n)
			} else {
				p.takeBackAt(side, j, at, n)
			}
		}
	}
}

// overdraw records x units of a charge the key's ring (record r, in
// slot) has no room or memory for: every stamp moves to one step after
// the newest, or after the key's latest instant if later, and the oldest
// (now one of equals) holds the x units besides itself, as its excess,
// until it expires or the ring empties: each unit then counts no shorter
// than before, the x units count exactly as long as stamps of that step
// would, in every rate (no skip), whatever the limit becomes, and no
// refund or cancel can take any of them back: they are no decision's
// stamps any more. A refund then gives back less, never units that the
// excess holds. A key with no stamp and no memory for one (the shard's
// ring memory exhausted) cannot hold x: the charge is lost.
func (a *slidingLog) overdraw(s *shard[logRec], r *logRec, slot uint32, x uint32) {
	if r.count == 0 {
		return
	}
	x = uint32(min(uint64(a.excessOf(s, r))+uint64(x), math.MaxUint32))
	buf := s.rings.ring(r.ref, r.cap)
	e := a.newest(s, r)
	if lq := a.stamp(r.last); int32(lq-e) > 0 {
		e = lq
	}
	e++
	for i := range r.count {
		buf[wrap(r.head+i, r.cap)] = e
	}
	a.setExcess(s, r, x)
	if a.rates > 1 {
		_, extra := s.keyState(slot, r.side)
		for k := range extra {
			extra[k].head = 0
		}
	}
}

// unstamp removes up to n units stamped e from the key in slot (record
// r), the oldest stamp's excess first if that stamp is e, and returns how
// many it removed.
func (a *slidingLog) unstamp(s *shard[logRec], r *logRec, slot uint32, e, n uint32) uint32 {
	if r.count == 0 {
		return 0
	}
	buf := s.rings.ring(r.ref, r.cap)
	at := func(i uint32) uint32 { return buf[wrap(r.head+i, r.cap)] }
	newest := at(r.count - 1)
	// The first position whose stamp is not older than e (the ring is in
	// time order: ages relative to the newest stamp only grow).
	lo, hi := uint32(0), r.count
	for lo < hi {
		mid := lo + (hi-lo)/2
		if int32(at(mid)-e) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if int32(newest-e) < 0 {
		return 0
	}
	y := uint32(0) // units of the oldest stamp's excess, which are e's units too
	if lo == 0 && at(0) == e {
		xs := a.excessOf(s, r)
		y = min(n, xs)
		a.setExcess(s, r, xs-y)
		n -= y
	}
	x := uint32(0)
	for lo+x < r.count && x < n && at(lo+x) == e {
		x++
	}
	if x == 0 {
		return y
	}
	for i := lo + x; i < r.count; i++ { // close the gap: newer stamps move down
		buf[wrap(r.head+i-x, r.cap)] = at(i)
	}
	if r.count -= x; r.count == 0 {
		a.setExcess(s, r, 0)
	}
	if a.rates > 1 {
		_, extra := s.keyState(slot, r.side)
		for k := range extra {
			if h := &extra[k].head; *h > lo {
				*h -= min(*h-lo, x)
			}
		}
	}
	return x + y
}

// reserve stamps n units at t, after the key's latest instant, for the
// ring's rate (the others count the ring): the stamps may be newer than
// the key's latest instant, so a decision before t counts them (no
// window holds more than the limit with them) and stamps its own units
// no older (push). It reports false, stamping nothing, if the ring has no
// room for them (see room) or the shard no memory. t is at most W+unit after the key's latest instant
// (limiter.reserve's horizon), so every stamp's age stays inside int32.
func (a *slidingLog) reserve(s *shard[logRec], r *logRec, slot uint32, t int64, n int, k int) bool {
	if k > 0 {
		return true
	}
	lim := r.lim & limitMask
	return a.room(s, r, uint32(n), lim) == uint32(n) && a.push(s, r, t, uint32(n), 2*lim)
}

// logView is rate k of a key as a decision's numbers read it, after the
// decision (which admitted the request or not).
type logView struct {
	r       *logRec // the key's record (its ring), brought to the instant decided at
	slot    uint32  // the key's
	skip    uint32  // the ring's oldest entries, no longer counted in rate k
	k       int
	others  int64 // the other nodes' units counted at r.last
	allowed bool
	pushed  bool // the decision's units are in the ring
}

// numbers returns the verdict numbers of v for a decision of n units at
// t under limit lim: the rate counts the ring's entries after its skip,
// plus the other nodes' units. Admitted units not pushed (a peek, or a
// rate after the first) count as if stamped at the instant decided at,
// the key's latest (r.last).
func (a *slidingLog) numbers(s *shard[logRec], v *logView, t int64, n int, lim uint32) (rem int64, reset, retry time.Duration) {
	// ResetAfter is measured from t rounded up to the timestamp resolution,
	// the instant a unit admitted at t is stamped with, so a fresh unit's
	// reset is exactly W and a whole-second window reads as whole seconds.
	// RetryAfter is measured from t itself: t+RetryAfter is the first
	// instant the request fits.
	r, skip, te := v.r, v.skip, v.r.last
	tu := (t + a.unit - 1) / a.unit * a.unit
	w := a.window[v.k]
	var buf []uint32
	if r.count > 0 {
		buf = s.rings.ring(r.ref, r.cap)
	}
	used := a.counted(s, r, skip) + v.others
	if v.allowed && !v.pushed {
		used += int64(n)
	}
	switch {
	case v.allowed || n == 0:
	case int64(n) > int64(lim):
		retry = Never
	case used+int64(n) <= int64(lim): // this rate admits it
	case v.others > 0:
		retry = time.Duration(a.admitAtShared(s, v, int64(n), int64(lim)) - t)
	default:
		// The (used+n-lim)-th oldest counted unit must expire first: the
		// oldest stamp holds its excess's units besides its own.
		x := a.counted(s, r, skip) - int64(r.count-skip) // the excess counted
		j := used + int64(n) - int64(lim) - x
		i := wrap(r.head+skip+uint32(max(j, 1))-1, r.cap)
		retry = time.Duration(a.expiry(te, buf[i], w) - t)
	}
	// ResetAfter: the expiry of the oldest unit counted; of a unit admitted
	// now if none; W from te if none at all.
	reset = time.Duration(te + w - t)
	switch {
	case skip < r.count:
		reset = until(a.expiry(te, buf[wrap(r.head+skip, r.cap)], w), t, tu)
	case v.allowed && n > 0:
		reset = until(a.expiry(te, a.stamp(te), w), t, tu)
	}
	return int64(lim) - used, reset, retry
}

// wrap returns i modulo c for i < 2c, without a division.
func wrap(i, c uint32) uint32 {
	if i >= c {
		i -= c
	}
	return i
}

// until returns the time from tu (t rounded up to the resolution) until
// instant x, or from t if x is not after tu, so it is always positive for
// x > t.
func until(x, t, tu int64) time.Duration {
	if x > tu {
		return time.Duration(x - tu)
	}
	return time.Duration(x - t)
}

// admitAtShared returns the earliest instant >= te at which n units fit
// the rate of v with the other nodes' units of a shared key: local units
// in the rate's window plus its estimate of the other nodes' units, both
// non-increasing in time, so a binary search over (te, te+W+2G] finds it
// (G the length of the rate's buckets). The ring's entries that no longer
// count in the rate's window are counted expired with the rest.
func (a *slidingLog) admitAtShared(s *shard[logRec], v *logView, n, lim int64) int64 {
	r, p, k, te := v.r, s.peers, v.k, v.r.last
	side, w := s.sideWords(v.slot, r.side), a.window[k]
	var buf []uint32
	if r.count > 0 {
		buf = s.rings.ring(r.ref, r.cap)
	}
	fits := func(at int64) bool {
		// Local units still counted at instant at: the ring is in time
		// order, so count the expired prefix by binary search.
		lo, hi := uint32(0), r.count
		for lo < hi {
			mid := lo + (hi-lo)/2
			if a.expiry(te, buf[(r.head+mid)%r.cap], w) <= at {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		return a.counted(s, r, lo)+p.units(side, k, at)+n <= lim
	}
	lo, hi := te, te+w+2*p.size(k) // fits(lo) is false, fits(hi) true
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// push appends n copies of t's stamp, growing the ring if needed; false if
// the shard's ring memory is exhausted.
func (a *slidingLog) push(s *shard[logRec], r *logRec, t int64, n, lim uint32) bool {
	if need := r.count + n; need > r.cap {
		c := max(4, uint32(1)<<bits.Len32(need-1))
		if !a.resize(s, r, min(c, lim)) {
			return false
		}
	}
	buf := s.rings.ring(r.ref, r.cap)
	e := a.stamp(t)
	i := wrap(r.head+r.count, r.cap)
	if r.count > 0 {
		// A reservation's or a charge's stamps may be newer than t's:
		// stamp as the newest, so the ring stays in time order (a unit
		// counted longer, never shorter).
		if prev := buf[wrap(r.head+r.count-1, r.cap)]; int32(e-prev) < 0 {
			e = prev
		}
	}
	for range n {
		buf[i] = e
		i++
		if i == r.cap {
			i = 0
		}
	}
	r.count += n
	return true
}

// resize moves r's newest min(count, c) timestamps into a ring of capacity
// c (0 frees the ring).
func (a *slidingLog) resize(s *shard[logRec], r *logRec, c uint32) bool {
	var ref uint32
	if c > 0 {
		var ok bool
		if ref, ok = s.rings.alloc(c); !ok {
			return false
		}
	}
	keep := min(r.count, c)
	if keep > 0 {
		src, dst := s.rings.ring(r.ref, r.cap), s.rings.ring(ref, c)
		first := r.head + r.count - keep
		for i := range keep {
			dst[i] = src[(first+i)%r.cap]
		}
	}
	x, whole := a.excessOf(s, r), keep == r.count
	if r.cap > 0 {
		a.setExcess(s, r, 0)
		s.rings.free(r.ref, r.cap)
	}
	r.ref, r.cap, r.head, r.count = ref, c, 0, keep
	if whole && keep > 0 {
		a.setExcess(s, r, x) // the oldest stamp moved with its excess
	}
	return true
}

func (a *slidingLog) idle(s *shard[logRec], r *logRec, slot uint32, t int64) bool {
	if r.lim&ownLimit != 0 {
		return false
	}
	if p := s.peers; p != nil {
		if side, _ := s.keyState(slot, r.side); p.holds(side, t) {
			return false
		}
	}
	return r.count == 0 || a.newestAt(s, r)+a.window[0] <= t
}

// readState reads what idle reads: the newest timestamp, and a shared
// key's side words (see prefetchState).
func (a *slidingLog) readState(s *shard[logRec], r *logRec, slot uint32, _ int64) uint32 {
	var x uint32
	if s.peers != nil {
		x = s.sideWords(slot, r.side)[0]
	}
	if r.count == 0 {
		return x
	}
	return x + s.rings.ring(r.ref, r.cap)[wrap(r.head+r.count-1, r.cap)]
}

// relimit keeps every timestamp: a key whose limit shrank below its usage
// waits for enough of them to expire, so shrinking and growing a limit again
// never loses a count. The ring, sized for the longest window's limit,
// shrinks once the usage fits that rate's new limit.
func (a *slidingLog) relimit(s *shard[logRec], r *logRec, _ uint32, k int, _, lim uint32) {
	if k == 0 && r.cap > lim && r.count <= lim {
		a.resize(s, r, max(lim, r.count))
	}
}

// latest is the key's latest instant, or its newest stamp's if later (a
// reservation's).
func (a *slidingLog) latest(s *shard[logRec], r *logRec, _ uint32) int64 {
	if r.count == 0 {
		return r.last
	}
	return max(r.last, a.newestAt(s, r))
}

func (a *slidingLog) limitWord(r *logRec) *uint32 { return &r.lim }
func (a *slidingLog) lastSeen(r *logRec) int64    { return r.last }
func (a *slidingLog) sideRef(r *logRec) *uint32   { return &r.side }

func (a *slidingLog) release(s *shard[logRec], r *logRec) {
	if r.cap > 0 {
		a.setExcess(s, r, 0)
		s.rings.free(r.ref, r.cap)
		r.cap, r.count = 0, 0
	}
}

// compact rebuilds the shard's ring pool when it is empty or mostly free.
func (a *slidingLog) compact(s *shard[logRec]) {
	switch {
	case s.rings.liveWords == 0:
		s.rings = ringPool{cur: -1}
	case s.rings.wasteful():
		var p ringPool
		p.cur = -1
		for slot := range s.recs {
			r := s.rec(uint32(slot))
			if !s.stored(slot) || r.cap == 0 {
				continue
			}
			ref, _ := p.alloc(r.cap) // never fails: fewer pages than before
			copy(p.ring(ref, r.cap), s.rings.ring(r.ref, r.cap))
			if x, ok := s.rings.excess[r.ref]; ok {
				if p.excess == nil {
					p.excess = make(map[uint32]excess)
				}
				p.excess[ref] = x
			}
			r.ref = ref
		}
		s.rings = p
	}
}
