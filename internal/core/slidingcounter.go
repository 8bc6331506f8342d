package core

import (
	"math/bits"
	"time"
)

// counterRec is a SlidingCounter key's state: 32 bytes, plus Buckets+1
// 4-byte counters per rate in the shard's side slab. With several rates,
// the key's record holds the first (the longest window's) and extra
// records the others, of which only lim, sum, hidx and head are used.
type counterRec struct {
	lim  uint32 // lim word, see ownLimit
	sum  uint32 // units in all Buckets+1 counters
	hidx uint32 // counter index of bucket head: head mod (Buckets+1)
	side uint32 // the key's entry in the shard's slab: its counters, extra records
	last int64  // the key's latest instant seen, Unix ns
	head int64  // id of the newest bucket the counters are at (last / G once decided)
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
// A unit stops counting at the end of the bucket n+1 positions after its
// own. Each rate has its own buckets.
type slidingCounter struct {
	rates   int
	bucket  [MaxRates]int64 // G of each rate, ns, longest window first
	buckets int64           // n
	sync    *syncSet        // nil unless shared (per rate, the same buckets)
	stride  int             // side words per key: n+1 counters per rate, then the sync state's
}

// NewSlidingCounter returns a sliding window counter limiter with
// cfg.Buckets buckets per window (default 10): O(1) memory per key
// (cfg.Buckets+1 counters of 4 bytes per rate) and an estimate that errs
// by less than the straddling bucket's units: about limit/Buckets for
// steady traffic (bench/cmd/accuracy measures it), up to limit-1 for
// bursts timed at bucket edges. It is the algorithm Cloudflare described
// in 2017, generalised from 2 to n+1 buckets.
//
// It returns an error wrapping ErrInvalidConfig if cfg is invalid (each
// window must be a multiple of Buckets nanoseconds). The limiter is safe
// for concurrent use; Close ends its sweeps by the janitor.
func NewSlidingCounter(cfg Config) (Limiter, error) {
	l := &CounterLimiter{}
	if err := l.Init(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// Init sets up l, whose zero value it requires, as NewSlidingCounter(cfg)
// would, and returns NewSlidingCounter's errors.
func (l *CounterLimiter) Init(cfg Config) error {
	cfg, err := cfg.withDefaults(SlidingCounter)
	if err != nil {
		return err
	}
	rs := newRateSet(cfg)
	a := newSlidingCounter(&rs, int64(cfg.Buckets), nil)
	l.init(cfg, &rs, a, a.stride, rs.n-1, nil)
	return nil
}

// newSlidingCounter returns the counter of rs's rates with n buckets each,
// shared through y if y is not nil.
func newSlidingCounter(rs *rateSet, n int64, y *syncSet) *slidingCounter {
	a := &slidingCounter{rates: rs.n, buckets: n, sync: y, stride: rs.n * int(n+1)}
	for k := range rs.n {
		a.bucket[k] = rs.window[k] / n
	}
	if y != nil {
		a.stride += y.words()
	}
	return a
}

// CounterLimiter is the sliding counter's Limiter.
type CounterLimiter struct{ limiter[counterRec] }

// rate returns the record and counters of rate k of the key whose record
// is r, side words side and extra records extra.
func (a *slidingCounter) rate(r *counterRec, side []uint32, extra []counterRec, k int) (*counterRec, []uint32) {
	m := int(a.buckets + 1)
	if k > 0 {
		r = &extra[k-1]
	}
	return r, side[k*m : (k+1)*m : (k+1)*m]
}

func (a *slidingCounter) init(s *shard[counterRec], r *counterRec, slot uint32, t int64) {
	side, extra := s.keyState(slot, r.side)
	for k := range a.rates {
		p, c := a.rate(r, side, extra, k)
		clear(c)
		p.sum, p.last = 0, t
		a.setHead(p, t/a.bucket[k])
		if a.sync != nil {
			a.sync.rate[k].setHead(side, p.head)
		}
	}
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

// fitsWeighted reports whether n more units fit the limit lim under the weighted
// estimate (rest + ceil(straddler*(g-delta)/g)), rest being the units of
// the buckets that count in full, without the division that computing the
// estimate takes: ceil(x/g) <= k iff x <= k*g for integers k >= 0,
// compared in 128 bits.
func fitsWeighted(g, straddler, delta, rest, n, lim int64) bool {
	k := lim - n - rest // what the straddling bucket may weigh at most
	if k < 0 {
		return false
	}
	if straddler == 0 {
		return true
	}
	xh, xl := bits.Mul64(uint64(straddler), uint64(g-delta))
	kh, kl := bits.Mul64(uint64(k), uint64(g))
	return xh < kh || xh == kh && xl <= kl
}

func (a *slidingCounter) decide(s *shard[counterRec], r *counterRec, slot uint32, t int64, n int, mode decideMode) verdict {
	k := mode.rate()
	key := r // the key's record; r is that of its rate k
	if k > 0 {
		key = s.keyRec(slot)
	}
	side := s.sideWords(slot, key.side)
	m := int(a.buckets + 1)
	c := side[k*m : (k+1)*m : (k+1)*m]
	g := a.bucket[k]
	kt := max(t, key.last) // per key, time never goes back
	r.last = kt
	if kt-r.head*g >= g {
		a.advance(s, r, c, side, k, kt/g)
	}
	var delta, remote []uint32 // a shared key's sync rings of rate k, indexed as c
	if a.sync != nil {
		delta, _, remote = a.sync.rate[k].arrays(side)
	}
	lim := effectiveLimit(r.lim, s.defLimits[k])
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	hi := int(r.hidx)
	straddler, whole := weigh(c, remote, int64(r.sum), a.next(hi))
	allowed := n == 0 || int64(n) <= int64(lim) && fitsWeighted(g, straddler, kt-r.head*g, whole, int64(n), int64(lim))
	if allowed && n > 0 && mode&consume != 0 {
		c[hi] += uint32(n)
		r.sum += uint32(n)
		if delta != nil {
			delta[hi] += uint32(n)
		}
	}
	if mode&full == 0 {
		return verdict{word: b2u(allowed)}
	}
	return a.explain(r, c, remote, k, t, n, lim, allowed, mode&consume != 0)
}

// advance moves rate k of a key (record r, counters c, side words side)
// past its newest bucket to bucket j: the buckets that leave the window
// are cleared, with their sync state, whose unsent units are counted
// dropped (see peekCopy).
func (a *slidingCounter) advance(s *shard[counterRec], r *counterRec, c, side []uint32, k int, j int64) {
	var delta, sent, remote []uint32
	if a.sync != nil {
		delta, sent, remote = a.sync.rate[k].arrays(side)
	}
	i := int(r.hidx)
	var dropped uint64 // unsent units of buckets that left
	for d := min(j-r.head, a.buckets+1); d > 0; d-- {
		i = a.next(i)
		r.sum -= c[i]
		c[i] = 0
		if delta != nil {
			dropped += uint64(delta[i])
			delta[i], sent[i], remote[i] = 0, 0, 0
		}
	}
	if j-r.head > a.buckets {
		i = a.idx(j)
	}
	r.head, r.hidx = j, uint32(i)
	if delta != nil {
		a.sync.rate[k].setHead(side, j)
		if dropped != 0 && !s.peekCopy(side) {
			s.syncDropped.Add(dropped)
		}
	}
}

// weigh returns the units of the bucket at counter index si, which
// straddles the window's start, and of the buckets that count in full,
// from the local counters c (whose units sum to sum) and a shared key's
// remote ones (nil if not shared).
func weigh(c, remote []uint32, sum int64, si int) (straddler, whole int64) {
	straddler, whole = int64(c[si]), sum-int64(c[si])
	for i, v := range remote {
		if i == si {
			straddler += int64(v)
		} else {
			whole += int64(v)
		}
	}
	return straddler, whole
}

func (a *slidingCounter) refund(s *shard[counterRec], r *counterRec, slot uint32, n int, k int) {
	key := r // the key's record; r is that of its rate k
	if k > 0 {
		key = s.keyRec(slot)
	}
	side := s.sideWords(slot, key.side)
	m := int(a.buckets + 1)
	r.sum -= uint32(n)
	side[k*m+int(r.hidx)] -= uint32(n)
	if a.sync != nil {
		delta, _, _ := a.sync.rate[k].arrays(side)
		delta[r.hidx] -= uint32(n)
	}
}

// explain returns the full verdict of a decision of n units at t on rate
// k (record r, counters c, the other nodes' units remote when shared)
// under limit lim, which admitted them or not, from the rate's state after
// it: Remaining from the weighted estimate, ResetAfter and RetryAfter
// measured from t. Admitted units not kept (consumed false) count as if
// they were.
func (a *slidingCounter) explain(r *counterRec, c, remote []uint32, k int, t int64, n int, lim uint32, allowed, consumed bool) verdict {
	g, j, hi, kt := a.bucket[k], r.head, int(r.hidx), r.last
	sum := int64(r.sum)
	for _, v := range remote {
		sum += int64(v)
	}
	straddler := a.count(c, remote, a.next(hi))
	est := sum - straddler // the weighted estimate, this decision's units included
	if straddler != 0 {
		est += int64(mulDivCeil(uint64(straddler), uint64(g-(kt-j*g)), uint64(g)))
	}
	var retry time.Duration
	switch {
	case allowed && !consumed:
		est += int64(n)
	case allowed:
	case int64(n) > int64(lim):
		retry = Never
	default:
		retry = time.Duration(a.admitAt(g, j, hi, c, remote, sum, kt, int64(n), int64(lim)) - t)
	}
	// Units admitted now are in bucket j, which never makes it the oldest.
	reset := time.Duration(a.resetAt(g, j, hi, c, remote, sum) - t)
	return makeVerdict(allowed, k, lim, int(max(0, int64(lim)-est)), reset, retry)
}

// count returns the units of the bucket at counter index i: local, plus
// remote when shared.
func (a *slidingCounter) count(c, remote []uint32, i int) int64 {
	if remote != nil {
		return int64(c[i]) + int64(remote[i])
	}
	return int64(c[i])
}

// resetAt returns the instant at which the oldest non-empty bucket stops
// counting (bucket b counts until (b+n+1)*g), or at which the newest bucket
// j (counter index hi) would if all are empty; sum is the units of all
// buckets.
func (a *slidingCounter) resetAt(g, j int64, hi int, c, remote []uint32, sum int64) int64 {
	oldest := j
	if sum > 0 && sum != a.count(c, remote, hi) {
		for k, i := int64(0), a.next(hi); k < a.buckets; k, i = k+1, a.next(i) {
			if a.count(c, remote, i) != 0 {
				oldest = j - a.buckets + k
				break
			}
		}
	}
	return (oldest + a.buckets + 1) * g
}

// admitAt returns the earliest instant >= kt at which n units would be
// admitted, walking forward bucket by bucket: in bucket j+k the straddling
// bucket is j+k-n (counter index hi+1+k) and only buckets up to j hold
// units. sum is the units of all buckets. Requires n <= lim.
func (a *slidingCounter) admitAt(g, j int64, hi int, c, remote []uint32, sum, kt, n, lim int64) int64 {
	si := a.next(hi)
	straddler := a.count(c, remote, si)
	whole := sum - straddler // units of the buckets that count in full
	for k := int64(0); ; k++ {
		if k > 0 {
			straddler = 0
			if k <= a.buckets {
				si = a.next(si)
				straddler = a.count(c, remote, si)
			}
			whole -= straddler
		}
		room := lim - n - whole
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

// readState reads what idle(t) reads: nothing but the record if the first
// rate's units are all in t's bucket, else the counters and extra records
// (see prefetchState).
func (a *slidingCounter) readState(s *shard[counterRec], r *counterRec, slot uint32, t int64) uint32 {
	if r.sum != 0 && t/a.bucket[0] == r.head {
		return 0
	}
	side, extra := s.keyState(slot, r.side)
	x := side[r.hidx] + side[len(side)-1]
	for k := range extra {
		x += extra[k].sum
	}
	return x
}

func (a *slidingCounter) idle(s *shard[counterRec], r *counterRec, slot uint32, t int64) bool {
	if r.lim&ownLimit != 0 {
		return false
	}
	side, extra := s.keyState(slot, r.side)
	for k := range a.rates {
		p, c := a.rate(r, side, extra, k)
		if p.sum == 0 {
			continue
		}
		// The buckets of rate k's window at t among those kept (head-n
		// to head): all n+1 in t's own bucket, where their sum says it
		// without reading them (as a full table judges busy keys).
		gap := t/a.bucket[k] - p.head
		if gap == 0 {
			return false
		}
		i := int(p.hidx)
		for range max(0, a.buckets+1-gap) {
			if c[i] != 0 {
				return false
			}
			if i--; i < 0 {
				i = int(a.buckets)
			}
		}
	}
	return a.sync == nil || !a.sync.holds(side, t)
}

func (a *slidingCounter) limitWord(r *counterRec) *uint32 { return &r.lim }
func (a *slidingCounter) lastSeen(r *counterRec) int64    { return r.last }
func (a *slidingCounter) sideRef(r *counterRec) *uint32   { return &r.side }
