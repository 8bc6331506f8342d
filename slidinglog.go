package shardlimit

import (
	"math/bits"
	"time"
)

// logRec is a SlidingLog key's state: 32 bytes plus its ring buffer.
type logRec struct {
	lim   uint32 // lim word, see ownLimit
	ref   uint32 // the ring's location in the shard's ringPool
	cap   uint32 // the ring's capacity, 0 if it has none
	head  uint32 // ring index of the oldest timestamp
	count uint32 // timestamps in the ring
	side  uint32 // the key's entry in the shard's side slab (shared only)
	last  int64  // latest instant seen, Unix ns
}

// slidingLog keeps one timestamp per admitted unit for the last window and
// admits n units at t iff fewer than limit-n+1 timestamps lie in (t-W, t].
//
// Timestamps are 4 bytes: ceil(t/unit) modulo 2^32, unit the smallest power
// of ten nanoseconds with unit*2^31 > 2W. Every stored timestamp lies within
// 2W of the key's current instant, so the age of an entry is the int32
// difference of the two. Rounding timestamps up keeps every unit counted for
// at least W (never admits early) and at most one unit longer.
type slidingLog struct {
	window int64       // W, ns
	unit   int64       // timestamp resolution, ns
	sync   *syncLayout // nil unless shared: other nodes' units by bucket
	stride int         // side words per key: the sync state's, 0 unless shared
}

// NewSlidingLog returns a sliding window log limiter: exact, it admits at
// most cfg.Limit units in any interval of length cfg.Window (a unit admitted
// at s counts for decisions at t with s <= t < s+W). Each key keeps a ring
// buffer of 4-byte timestamps, grown on demand up to its limit.
//
// Timestamps have a resolution of the smallest power of ten nanoseconds
// that is at least W/2^30: 1 ns for windows up to about 1 s, 100 ns for a
// minute, 10 µs for an hour, 100 ms for a year. They are rounded up, so a
// unit counts at least W and at most one resolution step longer: the log
// never admits early. RetryAfter is exact: the same request made
// RetryAfter after now is admitted, and one made a nanosecond sooner is
// not. It includes the part of a step a stamp was rounded up by, so for
// instants between two steps a wait of whole seconds can read as the next
// second in a Retry-After header. ResetAfter is measured from
// now rounded up to the resolution, so a unit admitted now reports a reset
// of exactly W.
//
// It returns an error wrapping ErrInvalidConfig if cfg is invalid (the
// limit may be at most MaxSlidingLogLimit). The limiter is safe for
// concurrent use; Close stops its janitor.
func NewSlidingLog(cfg Config) (Limiter, error) {
	cfg, err := cfg.withDefaults(SlidingLog)
	if err != nil {
		return nil, err
	}
	w := int64(cfg.Window)
	l := &logLimiter{}
	l.init(cfg, &slidingLog{window: w, unit: logUnit(w)}, 0, nil)
	return l, nil
}

// logLimiter is the sliding log's Limiter.
type logLimiter struct{ limiter[logRec] }

// logUnit returns the timestamp resolution for window w: the smallest power
// of ten nanoseconds u with u*2^31 > 2w.
func logUnit(w int64) int64 {
	u := int64(1)
	for u*(1<<31) <= 2*w {
		u *= 10
	}
	return u
}

func (a *slidingLog) init(r *logRec, t int64, w uint32) {
	*r = logRec{lim: w, last: t, side: r.side}
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

// expiry returns the instant at which entry e stops counting, seen from
// t: its stamp plus W, so a unit counts less than one step past its own
// instant plus W, whatever W's remainder modulo the resolution.
func (a *slidingLog) expiry(t int64, e uint32) int64 {
	tq := t / a.unit
	return (tq-int64(age(tq, e)))*a.unit + a.window
}

// expiredUpTo returns the newest stamp, in stored units, that no longer
// counts at t: entry e has expired at t iff age(expiredUpTo(t), e) >= 0,
// that is iff e*unit + W <= t (see expiry).
func (a *slidingLog) expiredUpTo(t int64) int64 {
	return floorDiv(t-a.window, a.unit)
}

// advance brings r to instant te, its latest, dropping expired
// timestamps. Every stamp is below r.last+unit, so all have expired from
// r.last+W+unit on: no scan then.
func (a *slidingLog) advance(s *shard[logRec], r *logRec, te int64) {
	switch {
	case r.count == 0:
	case te-r.last >= a.window+a.unit:
		r.head, r.count = 0, 0
	default:
		buf := s.rings.ring(r.ref, r.cap)
		tx := a.expiredUpTo(te)
		for r.count > 0 && age(tx, buf[r.head]) >= 0 {
			r.head++
			if r.head == r.cap {
				r.head = 0
			}
			r.count--
		}
	}
	r.last = te
}

func (a *slidingLog) decide(s *shard[logRec], r *logRec, side []uint32, t int64, n int, mode decideMode) verdict {
	te := max(t, r.last) // per key, time never goes back
	a.advance(s, r, te)
	if side == nil && a.sync != nil {
		side = s.entry(r.side, a.stride)
	}
	consumed := mode&consume != 0
	// ResetAfter is measured from t rounded up to the timestamp resolution,
	// the instant a unit admitted at t is stamped with, so a fresh unit's
	// reset is exactly W and a whole-second window reads as whole seconds.
	// RetryAfter is measured from t itself: t+RetryAfter is the first
	// instant the request fits.
	var tu int64
	if mode&full != 0 {
		tu = (t + a.unit - 1) / a.unit * a.unit
	}
	lim := effectiveLimit(r.lim, s.defLimit)
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
		if consumed && r.cap > lim && r.count <= lim {
			// The limit shrank and enough units expired: give memory back.
			a.resize(s, r, max(lim, r.count))
		}
	}
	var allowed bool
	var retry, reset time.Duration
	noRoom := false // the table had no memory for the unit's timestamp
	remaining := 0
	used := int64(r.count)
	var remote int64 // other nodes' units in the window, when shared
	var bucket int64 // id of te's sync bucket, when shared
	if a.sync != nil {
		bucket = a.sync.bucketOf(side, te)
		if d := a.sync.rotate(side, bucket); d != 0 && consumed {
			s.syncDropped.Add(uint64(d))
		}
		remote = a.sync.estimate(side, te)
		used += remote
	}
	switch {
	case n == 0:
		allowed = true
	case int64(n) > int64(lim):
		retry = Never
	case used+int64(n) <= int64(lim):
		if consumed && !a.push(s, r, te, uint32(n), lim) {
			noRoom = true
			break
		}
		if a.sync != nil {
			a.sync.add(side, bucket, uint32(n))
		}
		allowed = true
		used += int64(n)
	case mode&full == 0:
		// Denied: the bool-returning caller needs no RetryAfter.
	case remote > 0:
		retry = time.Duration(a.admitAtShared(s, r, side, te, int64(n), int64(lim)) - t)
	default:
		// The (used+n-lim)-th oldest timestamp must expire first.
		i := wrap(r.head+uint32(used+int64(n)-int64(lim))-1, r.cap)
		retry = time.Duration(a.expiry(te, s.rings.ring(r.ref, r.cap)[i]) - t)
	}
	remaining = int(max(0, int64(lim)-used))
	switch {
	case mode&full == 0:
	case r.count > 0:
		reset = until(a.expiry(te, s.rings.ring(r.ref, r.cap)[r.head]), t, tu)
	case allowed && n > 0:
		reset = until(a.expiry(te, a.stamp(te)), t, tu)
	default:
		reset = time.Duration(te + a.window - t)
	}
	v := makeVerdict(allowed, lim, remaining, reset, retry)
	if noRoom {
		v.word |= verdictFull
	}
	return v
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
// with the other nodes' units of a shared key: local units in the window
// plus the remote estimate, both non-increasing in time, so a binary
// search over (te, te+W+G] finds it.
func (a *slidingLog) admitAtShared(s *shard[logRec], r *logRec, side []uint32, te, n, lim int64) int64 {
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
			if a.expiry(te, buf[(r.head+mid)%r.cap]) <= at {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		return int64(r.count-lo)+a.sync.estimate(side, at)+n <= lim
	}
	lo, hi := te, te+a.window+2*a.sync.bucket // fits(lo) is false, fits(hi) true
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
	e := a.stamp(t) // t never goes back, so the ring stays in time order
	i := wrap(r.head+r.count, r.cap)
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
	if r.cap > 0 {
		s.rings.free(r.ref, r.cap)
	}
	r.ref, r.cap, r.head, r.count = ref, c, 0, keep
	return true
}

func (a *slidingLog) idle(s *shard[logRec], r *logRec, side []uint32, t int64) bool {
	t = max(t, r.last)
	if r.lim&ownLimit != 0 || a.sync != nil && a.sync.holds(side, t) {
		return false
	}
	if r.count == 0 || t-r.last >= a.window+a.unit {
		return true
	}
	newest := s.rings.ring(r.ref, r.cap)[wrap(r.head+r.count-1, r.cap)]
	return age(a.expiredUpTo(t), newest) >= 0
}

// relimit keeps every timestamp: a key whose limit shrank below its usage
// waits for enough of them to expire, so shrinking and growing a limit again
// never loses a count. The ring shrinks once the usage fits the new limit.
func (a *slidingLog) relimit(s *shard[logRec], r *logRec, _, lim uint32) {
	if r.cap > lim && r.count <= lim {
		a.resize(s, r, max(lim, r.count))
	}
}

func (a *slidingLog) limitWord(r *logRec) *uint32 { return &r.lim }
func (a *slidingLog) lastSeen(r *logRec) int64    { return r.last }
func (a *slidingLog) sideRef(r *logRec) *uint32   { return &r.side }

func (a *slidingLog) release(s *shard[logRec], r *logRec) {
	if r.cap > 0 {
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
			r.ref = ref
		}
		s.rings = p
	}
}
