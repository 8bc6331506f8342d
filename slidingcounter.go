package shardlimit

import (
	"math/bits"
	"time"
)

// counterRec is a SlidingCounter key's state: 40 bytes, plus Buckets+1
// 4-byte counters in the shard's side slab.
type counterRec struct {
	lim  uint32 // lim word, see ownLimit
	sum  uint32 // units in all Buckets+1 counters
	hidx uint32 // counter index of bucket head: head mod (Buckets+1)
	side uint32 // the key's entry in the shard's side slab: its counters
	last int64  // latest key time seen, ns
	skew int64  // key time minus Unix time: grows when the clock steps back
	head int64  // id of the newest bucket (key time / G) the counters are at
}

// slidingCounter splits the window W into n buckets of G = W/n, aligned to
// Unix time, and keeps the counts of the n+1 buckets that overlap the window
// (t-W, t]: the n newest count in full and the oldest, which straddles
// t-W, by the share of it still inside the window. At t in bucket j, with
// delta = t - j*G:
//
//	estimate = sum(c[j-n+1..j]) + ceil(c[j-n] * (G - delta) / G)
//
// in integer nanoseconds (no floating point), and n units are admitted iff
// estimate + n <= limit. The estimate assumes the straddling bucket's units
// were spread evenly over it, so it differs from the exact count by less
// than that one bucket's units: for traffic spread over the buckets the
// error is about limit/n, but a client that spends the limit at the very end
// of one bucket and again at the end of the window gets up to 2*limit-1
// units into one window of length W (the sliding log never exceeds limit).
// This is policy S2 of CASES.md (C4); a unit stops counting at the end of
// the bucket n+1 positions after its own.
type slidingCounter struct {
	bucket  int64       // G, ns
	buckets int64       // n
	sync    *syncLayout // nil unless shared (the same buckets)
}

// NewSlidingCounter returns a sliding window counter limiter with
// cfg.Buckets buckets per window (default 10): O(1) memory per key
// (cfg.Buckets+1 counters of 4 bytes) and an estimate that errs by less
// than the straddling bucket's units: about limit/Buckets for steady traffic
// (bench/cmd/accuracy measures it), up to limit-1 for bursts timed at bucket
// edges. It is the algorithm Cloudflare described in 2017, generalised from
// 2 to n+1 buckets.
//
// It returns an error wrapping ErrInvalidConfig if cfg is invalid (Window
// must be a multiple of Buckets nanoseconds). The limiter is safe for
// concurrent use; Close stops its janitor.
func NewSlidingCounter(cfg Config) (Limiter, error) {
	cfg, err := cfg.withDefaults(SlidingCounter)
	if err != nil {
		return nil, err
	}
	n := int64(cfg.Buckets)
	a := &slidingCounter{bucket: int64(cfg.Window) / n, buckets: n}
	l := &counterLimiter{alg: a}
	l.init(cfg, cfg.Buckets+1, a)
	return l, nil
}

func (a *slidingCounter) init(r *counterRec, t int64, w uint32) {
	*r = counterRec{lim: w, last: t, side: r.side}
	a.setHead(r, t/a.bucket)
}

// idx returns the counter index of bucket id (a division: the hot path
// derives indexes from r.hidx instead).
func (a *slidingCounter) idx(id int64) int {
	i := id % (a.buckets + 1)
	if i < 0 { // ids below 0 occur only within a window of the epoch
		i += a.buckets + 1
	}
	return int(i)
}

// next returns the counter index after i.
func (a *slidingCounter) next(i int) int {
	if i++; i > int(a.buckets) {
		return 0
	}
	return i
}

func (a *slidingCounter) setHead(r *counterRec, j int64) {
	r.head, r.hidx = j, uint32(a.idx(j))
}

// advance brings r to Unix instant t and returns the key time to decide at
// and the caller's key time, which durations are measured from. A step back
// within stepTolerance decides at the key's latest key time; a larger one
// grows the key's skew by the step, so key time never goes back and the key
// keeps its usage and waits (CASES.md C11). The skew is dropped once every
// counter is empty. A shared key never takes a skew: the other nodes' units
// are kept by absolute bucket, so it decides at its latest instant until the
// clock catches up, durations measured from t (as the fixed window and the
// log do; a skew jumped the key ahead when the clock was set right, and
// dropping it filed units under the wrong buckets).
func (a *slidingCounter) advance(r *counterRec, c []uint32, t int64) (kt, from int64) {
	if a.sync != nil {
		kt, from = max(t, r.last), t
	} else {
		if r.skew > maxInstant-t {
			kt = maxInstant // saturate: only clocks stepping over centuries get here
		} else {
			kt = t + r.skew
		}
		if kt < r.last {
			if r.last-kt > stepTolerance {
				r.skew += r.last - kt
			}
			kt = r.last
		}
		from = kt
		if r.skew <= maxInstant-t {
			from = min(t+r.skew, kt)
		}
	}
	if kt-r.head*a.bucket < a.bucket {
		// Still in the newest bucket: no division.
	} else if j := kt / a.bucket; j-r.head > a.buckets {
		clear(c)
		r.sum = 0
		a.setHead(r, j)
	} else {
		i := int(r.hidx)
		for id := r.head + 1; id <= j; id++ {
			i = a.next(i)
			r.sum -= c[i]
			c[i] = 0
		}
		r.head, r.hidx = j, uint32(i)
	}
	if r.sum == 0 && r.skew != 0 {
		r.skew, kt, from = 0, t, t
		a.setHead(r, t/a.bucket)
	}
	r.last = kt
	return kt, from
}

// fits reports whether n more units fit the limit lim under the weighted
// estimate (rest + ceil(straddler*(G-delta)/G)), rest being the units of
// the buckets that count in full, without the division that computing the
// estimate takes: ceil(x/G) <= k iff x <= k*G for integers k >= 0,
// compared in 128 bits.
func (a *slidingCounter) fits(straddler, delta, rest, n, lim int64) bool {
	k := lim - n - rest // what the straddling bucket may weigh at most
	if k < 0 {
		return false
	}
	if straddler == 0 {
		return true
	}
	xh, xl := bits.Mul64(uint64(straddler), uint64(a.bucket-delta))
	kh, kl := bits.Mul64(uint64(k), uint64(a.bucket))
	return xh < kh || xh == kh && xl <= kl
}

// shortcut reports whether allow and decideN may decide at t without
// decide: the limiter is not shared, the key has no skew, and t is at or
// after its latest instant and still in its newest bucket (advance would
// change nothing but last), the common case for a busy key.
func (a *slidingCounter) shortcut(r *counterRec, t int64) bool {
	return a.sync == nil && r.skew == 0 && t >= r.last && t-r.head*a.bucket < a.bucket
}

// allow is decide(s, r, side, t, n, true, false).allowed() for n > 0,
// without a call (and the spills one costs) when shortcut holds.
func (a *slidingCounter) allow(s *shard[counterRec], r *counterRec, side []uint32, t int64, n int) bool {
	if !a.shortcut(r, t) {
		return a.decide(s, r, side, t, n, true, false).allowed()
	}
	c := side[:a.buckets+1]
	r.last = t
	lim := effectiveLimit(r.lim, s.defLimit)
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	hi := int(r.hidx)
	straddler := int64(c[a.next(hi)])
	if int64(n) > int64(lim) || !a.fits(straddler, t-r.head*a.bucket, int64(r.sum)-straddler, int64(n), int64(lim)) {
		return false
	}
	c[hi] += uint32(n)
	r.sum += uint32(n)
	return true
}

// decideN is decide(s, r, side, t, n, true, true) for n > 0: the Result's
// numbers without decide's call and spills when shortcut holds.
func (a *slidingCounter) decideN(s *shard[counterRec], r *counterRec, side []uint32, t int64, n int) verdict {
	if !a.shortcut(r, t) {
		return a.decide(s, r, side, t, n, true, true)
	}
	c := side[:a.buckets+1]
	r.last = t
	lim := effectiveLimit(r.lim, s.defLimit)
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	j, hi := r.head, int(r.hidx)
	delta := t - j*a.bucket
	sum := int64(r.sum)
	straddler := int64(c[a.next(hi)])
	est := sum - straddler
	if straddler != 0 {
		est += int64(mulDivCeil(uint64(straddler), uint64(a.bucket-delta), uint64(a.bucket)))
	}
	allowed := false
	var retry time.Duration
	switch {
	case int64(n) > int64(lim):
		retry = Never
	case est+int64(n) <= int64(lim):
		allowed = true
		est += int64(n)
		c[hi] += uint32(n)
		r.sum += uint32(n)
	default:
		retry = time.Duration(a.admitAt(j, hi, c, nil, sum, t, int64(n), int64(lim)) - t)
	}
	reset := time.Duration(a.resetAt(j, hi, c, nil, int64(r.sum)) - t)
	return makeVerdict(allowed, lim, int(max(0, int64(lim)-est)), reset, retry)
}

func (a *slidingCounter) decide(s *shard[counterRec], r *counterRec, side []uint32, t int64, n int, consume, full bool) verdict {
	c := side[:a.buckets+1]
	kt, from := a.advance(r, c, t)
	lim := effectiveLimit(r.lim, s.defLimit)
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	j := r.head
	var remote []uint32 // other nodes' units per bucket, when shared
	var remoteSum int64 // their units in all buckets
	if a.sync != nil {
		if d := a.sync.rotate(side, j); d != 0 && consume {
			s.syncDropped.Add(uint64(d))
		}
		_, _, remote = a.sync.arrays(side)
		for _, v := range remote {
			remoteSum += int64(v)
		}
	}
	sum := int64(r.sum) + remoteSum
	hi := int(r.hidx)
	delta := kt - j*a.bucket
	straddler := a.count(c, remote, a.next(hi)) // bucket j-n: the index after j's
	est := sum - straddler
	var fits bool // est+n <= lim
	if full {
		if straddler != 0 {
			est += int64(mulDivCeil(uint64(straddler), uint64(a.bucket-delta), uint64(a.bucket)))
		}
		fits = est+int64(n) <= int64(lim)
	} else {
		fits = a.fits(straddler, delta, est, int64(n), int64(lim))
	}
	var allowed bool
	var retry, reset time.Duration
	remaining := 0
	switch {
	case n == 0:
		allowed = true
	case int64(n) > int64(lim):
		retry = Never
	case fits:
		allowed = true
		est += int64(n)
		if consume {
			c[hi] += uint32(n)
			r.sum += uint32(n)
			if a.sync != nil {
				a.sync.add(side, j, uint32(n))
			}
		}
	case full:
		retry = time.Duration(a.admitAt(j, hi, c, remote, sum, kt, int64(n), int64(lim)) - from)
	}
	if !full {
		return makeVerdict(allowed, lim, 0, 0, retry)
	}
	remaining = int(max(0, int64(lim)-est))
	reset = time.Duration(a.resetAt(j, hi, c, remote, int64(r.sum)+remoteSum) - from)
	return makeVerdict(allowed, lim, remaining, reset, retry)
}

// count returns the units of the bucket at counter index i: local, plus
// remote when shared.
func (a *slidingCounter) count(c, remote []uint32, i int) int64 {
	if remote != nil {
		return int64(c[i]) + int64(remote[i])
	}
	return int64(c[i])
}

// resetAt returns the key time at which the oldest non-empty bucket stops
// counting (bucket b counts until (b+n+1)*G), or at which the newest bucket
// j (counter index hi) would if all are empty; sum is the units of all
// buckets.
func (a *slidingCounter) resetAt(j int64, hi int, c, remote []uint32, sum int64) int64 {
	oldest := j
	if sum > 0 && sum != a.count(c, remote, hi) {
		for k, i := int64(0), a.next(hi); k < a.buckets; k, i = k+1, a.next(i) {
			if a.count(c, remote, i) != 0 {
				oldest = j - a.buckets + k
				break
			}
		}
	}
	return (oldest + a.buckets + 1) * a.bucket
}

// admitAt returns the earliest key time >= kt at which n units would be
// admitted, walking forward bucket by bucket: in bucket j+k the straddling
// bucket is j+k-n (counter index hi+1+k) and only buckets up to j hold
// units. sum is the units of all buckets. Requires n <= lim.
func (a *slidingCounter) admitAt(j int64, hi int, c, remote []uint32, sum, kt, n, lim int64) int64 {
	g := a.bucket
	si := a.next(hi)
	straddler := a.count(c, remote, si)
	full := sum - straddler
	for k := int64(0); ; k++ {
		if k > 0 {
			straddler = 0
			if k <= a.buckets {
				si = a.next(si)
				straddler = a.count(c, remote, si)
			}
			full -= straddler
		}
		room := lim - n - full
		if room < 0 {
			continue
		}
		var at int64 // offset into bucket j+k from which the weighted share fits
		if straddler > room {
			at = int64(mulDivCeil(uint64(g), uint64(straddler-room), uint64(straddler)))
			if at >= g {
				continue
			}
		}
		start := (j + k) * g
		return max(start+at, kt)
	}
}

func (a *slidingCounter) idle(_ *shard[counterRec], r *counterRec, c []uint32, t int64) bool {
	if r.lim&ownLimit != 0 {
		return false
	}
	kt := r.last
	if r.skew <= maxInstant-t {
		kt = max(t+r.skew, r.last)
	}
	if a.sync != nil && a.sync.holds(c, kt) {
		return false
	}
	if r.sum == 0 {
		return true
	}
	from := kt/a.bucket - a.buckets
	for id := max(from, r.head-a.buckets); id <= r.head; id++ {
		if c[a.idx(id)] != 0 {
			return false
		}
	}
	return true
}

// standsStill: a shared key decides at its latest instant after a clock
// step back instead of taking a skew (see advance).
func (a *slidingCounter) standsStill() bool { return a.sync != nil }

func (a *slidingCounter) relimit(*shard[counterRec], *counterRec, []uint32, uint32, uint32) {}
func (a *slidingCounter) limitWord(r *counterRec) uint32                                    { return r.lim }
func (a *slidingCounter) setLimitWord(r *counterRec, w uint32)                              { r.lim = w }
func (a *slidingCounter) lastSeen(r *counterRec) int64                                      { return r.last - r.skew }
func (a *slidingCounter) release(*shard[counterRec], *counterRec)                           {}
func (a *slidingCounter) compact(*shard[counterRec])                                        {}
func (a *slidingCounter) sideRef(r *counterRec) *uint32                                     { return &r.side }
func (a *slidingCounter) syncLayout() *syncLayout                                           { return a.sync }
