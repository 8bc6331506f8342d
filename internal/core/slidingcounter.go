package core

import (
	"math/bits"
	"time"
)

// counterRec is a SlidingCounter key's state: 32 bytes, plus Buckets+1
// 4-byte counters per rate in the shard's side words. With several rates,
// the key's record holds the first (the longest window's) and extra
// records the others, of which only lim, sum, hidx and head are used.
//
// The side words and extra records are laid out by table position, not in
// a slab the record names (the sliding log's layout): a decision reads the
// home position's words while the record's cache line is on its way (see
// prefetchHome), where a slab entry could be read only after the record.
// At a million keys read in an order other than their arrival's, that
// took the counter's decision from about 600 to about 400 ns of CPU time
// (about fixed window's), for about 20 more bytes per key with one rate
// (the words of the table's empty positions).
type counterRec struct {
	lim  uint32 // lim word, see ownLimit
	sum  uint32 // units in all Buckets+1 counters
	hidx uint32 // counter index of bucket head: head mod (Buckets+1)
	last int64  // the key's latest instant seen, Unix ns
	head int64  // id of the newest bucket the counters are at (last / G once decided)
}

// counterRef is the slab entry the counter passes to keyState and
// sideWords: none, as its shard keeps no slab.
const counterRef = 0

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
// own. Each rate has its own buckets. A shared key's buckets hold the other
// nodes' units too (shard.peers, by the same buckets): the estimate weighs
// each bucket's units, this node's and theirs, together, so the straddling
// bucket is rounded up once, as a key that is not shared would be.
type slidingCounter struct {
	rates   int
	bucket  [MaxRates]int64 // G of each rate, ns, longest window first
	buckets int64           // n
	stride  int             // side words per key of the counters: n+1 per rate (a shared key's layer words follow)
}

// NewSlidingCounter returns a new limiter of the algorithm, as package shardlimit's
// NewSlidingCounter (documented there) does, with its errors.
func NewSlidingCounter(cfg Config) (Limiter, error) { return build[CounterLimiter](cfg) }

// Init sets up l, whose zero value it requires, as NewSlidingCounter(cfg)
// would, and returns NewSlidingCounter's errors.
func (l *CounterLimiter) Init(cfg Config) error {
	cfg, err := cfg.withDefaults(SlidingCounter)
	if err != nil {
		return err
	}
	rs := newRateSet(cfg)
	a := newSlidingCounter(&rs, int64(cfg.Buckets))
	l.init(cfg, &rs, a, a.stride, rs.n-1, nil)
	return nil
}

// newSlidingCounter returns the counter of rs's rates with n buckets each.
func newSlidingCounter(rs *rateSet, n int64) *slidingCounter {
	a := &slidingCounter{rates: rs.n, buckets: n, stride: rs.n * int(n+1)}
	for k := range rs.n {
		a.bucket[k] = rs.window[k] / n
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
	side, extra := s.keyState(slot, counterRef)
	for k := range a.rates {
		p, c := a.rate(r, side, extra, k)
		clear(c)
		p.sum, p.last = 0, t
		a.setHead(p, t/a.bucket[k])
		if s.peers != nil {
			s.peers.start(side, k, t)
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
	side := s.sideWords(slot, counterRef)
	m := int(a.buckets + 1)
	c := side[k*m : (k+1)*m : (k+1)*m]
	g := a.bucket[k]
	kt := max(t, key.last) // per key, time never goes back
	r.last = kt
	p := s.peers // a shared key's other nodes' units, nil if not shared
	if d := kt - r.head*g; d >= g {
		a.advance(r, c, kt/g)
		if p != nil {
			p.move(side, k, kt)
		}
	} else if d < 0 {
		return a.ahead(s, r, slot, t, n, mode)
	}
	lim := effectiveLimit(r.lim, s.defLimits[k])
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	hi := int(r.hidx)
	si := a.next(hi) // the bucket straddling the window's start
	straddler, whole := int64(c[si]), int64(r.sum)-int64(c[si])
	if p != nil {
		// The other nodes' units weigh with this node's, bucket by bucket.
		ps, pw := p.window(side, k)
		straddler, whole = straddler+ps, whole+pw
	}
	allowed := n == 0 || int64(n) <= int64(lim) && fitsWeighted(g, straddler, kt-r.head*g, whole, int64(n), int64(lim))
	sum := straddler + whole
	if allowed && n > 0 && mode&consume != 0 {
		c[hi] += uint32(n)
		r.sum += uint32(n)
		sum += int64(n)
		if p != nil {
			p.add(side, k, uint32(n))
		}
	}
	if mode&full == 0 {
		return verdict{word: b2u(allowed)}
	}
	// Field by field, not a composite literal: the literal is built in a
	// temporary and copied with wide loads that span its narrower stores,
	// which stalls on store forwarding.
	var v counterView
	v.c, v.side, v.peers, v.r = c, side, p, r
	v.k, v.straddler, v.sum = k, straddler, sum
	return a.explain(&v, t, n, lim, allowed, mode&consume != 0)
}

// advance moves a rate of a key (record r, counters c) past its newest
// bucket to bucket j, clearing the buckets that leave the window.
func (a *slidingCounter) advance(r *counterRec, c []uint32, j int64) {
	i := int(r.hidx)
	for d := min(j-r.head, a.buckets+1); d > 0; d-- {
		i = a.next(i)
		r.sum -= c[i]
		c[i] = 0
	}
	if j-r.head > a.buckets {
		i = a.idx(j)
	}
	r.head, r.hidx = j, uint32(i)
}

func (a *slidingCounter) refund(s *shard[counterRec], r *counterRec, slot uint32, n int, k int) {
	side := s.sideWords(slot, counterRef)
	m := int(a.buckets + 1)
	r.sum -= uint32(n)
	side[k*m+int(r.hidx)] -= uint32(n)
	if p := s.peers; p != nil {
		p.takeBack(side, k, uint32(n))
	}
}

// ahead decides n units at t for rate k (record r) of a key whose newest
// bucket is a reservation's, which starts after t: the buckets were
// moved to it, dropping units that still count before it, so only a peek
// is admitted before it, with the numbers of the same request at its
// start.
func (a *slidingCounter) ahead(s *shard[counterRec], r *counterRec, slot uint32, t int64, n int, mode decideMode) verdict {
	if mode&full == 0 {
		return verdict{word: b2u(n == 0)}
	}
	cp, at := *r, r.head*a.bucket[mode.rate()]
	return deferred(a.decide(s, &cp, slot, at, n, mode&^consume), t, at, n)
}

// settle charges the bucket of the key's latest instant, or refunds the
// bucket of at while the key keeps it. The decision's own units are in
// that bucket or a later one, which weighs at least as much in every
// later estimate, so taking units from at's bucket never frees more room
// than the decision's own would.
func (a *slidingCounter) settle(s *shard[counterRec], r *counterRec, slot uint32, at int64, delta int, k int) {
	key := r // the key's record; r is that of its rate k
	if k > 0 {
		key = s.keyRec(slot)
	}
	side := s.sideWords(slot, counterRef)
	m := int(a.buckets + 1)
	c := side[k*m : (k+1)*m : (k+1)*m]
	g, p := a.bucket[k], s.peers
	if delta > 0 {
		if key.last-r.head*g >= g {
			a.advance(r, c, key.last/g)
			if p != nil {
				p.move(side, k, key.last)
			}
		}
		n := satAdd(&r.sum, delta)
		c[r.hidx] += n
		if p != nil {
			p.add(side, k, n)
		}
		return
	}
	j := at / g
	if j > r.head || j < r.head-a.buckets {
		return
	}
	i := a.idx(j)
	n := min(uint32(-delta), c[i])
	c[i] -= n
	r.sum -= n
	if p != nil {
		p.takeBackAt(side, k, at, n)
	}
}

// reserve moves rate k's buckets to t's, if later than its newest, and
// consumes n units there (see ahead).
func (a *slidingCounter) reserve(s *shard[counterRec], r *counterRec, slot uint32, t int64, n int, k int) bool {
	side := s.sideWords(slot, counterRef)
	m := int(a.buckets + 1)
	c := side[k*m : (k+1)*m : (k+1)*m]
	if j := t / a.bucket[k]; j > r.head {
		a.advance(r, c, j)
	}
	c[r.hidx] += uint32(n)
	r.sum += uint32(n)
	return true
}

// counterView is rate k of a key as a decision's numbers read it, after
// the decision: the n+1 buckets of the window at the key's latest
// instant, this node's units and, for a shared key, the other nodes'.
type counterView struct {
	c         []uint32   // the rate's counters
	side      []uint32   // the key's side words
	peers     *peerLayer // the other nodes' units, nil if not shared
	r         *counterRec
	k         int
	straddler int64 // units of the bucket straddling the window's start (r.head-n)
	sum       int64 // units of all n+1 buckets
}

// explain returns the full verdict of a decision of n units at t on the
// rate v describes, under limit lim, which admitted them or not:
// Remaining from the weighted estimate, ResetAfter and RetryAfter measured
// from t. Admitted units not kept (consumed false) count as if they were.
func (a *slidingCounter) explain(v *counterView, t int64, n int, lim uint32, allowed, consumed bool) verdict {
	g, j := a.bucket[v.k], v.r.head
	est := v.sum - v.straddler // the weighted estimate, this decision's units included
	if v.straddler != 0 {
		est += int64(mulDivCeil(uint64(v.straddler), uint64(g-(v.r.last-j*g)), uint64(g)))
	}
	var retry time.Duration
	switch {
	case allowed && !consumed:
		est += int64(n)
	case allowed:
	case int64(n) > int64(lim):
		retry = Never
	default:
		retry = time.Duration(a.admitAt(v, int64(n), int64(lim)) - t)
	}
	// Units admitted now are in bucket j, which never makes it the oldest.
	reset := time.Duration(a.resetAt(v) - t)
	return makeVerdict(allowed, v.k, lim, int(max(0, int64(lim)-est)), reset, retry)
}

// resetAt returns the instant at which the oldest non-empty bucket of v
// stops counting (bucket b counts until (b+n+1)*G), or at which the newest
// bucket j would if all are empty.
func (a *slidingCounter) resetAt(v *counterView) int64 {
	r := v.r
	j, hi := r.head, int(r.hidx)
	oldest := j
	if r.sum != 0 && r.sum != v.c[hi] { // units here before bucket j
		for k, i := int64(0), a.next(hi); k < a.buckets; k, i = k+1, a.next(i) {
			if v.c[i] != 0 {
				oldest = j - a.buckets + k
				break
			}
		}
	}
	if v.peers != nil {
		oldest = min(oldest, v.peers.oldest(v.side, v.k))
	}
	return (oldest + a.buckets + 1) * a.bucket[v.k]
}

// admitAt returns the earliest instant, not before the key's latest, at
// which n units would be admitted, walking forward bucket by bucket: in
// bucket j+k the straddling bucket is j+k-n (counter index hi+1+k) and
// only buckets up to j hold units. Requires n <= lim.
func (a *slidingCounter) admitAt(v *counterView, n, lim int64) int64 {
	g, j, c, p := a.bucket[v.k], v.r.head, v.c, v.peers
	si := a.next(int(v.r.hidx))
	straddler := v.straddler
	whole := v.sum - straddler // units of the buckets that count in full
	for k := int64(0); ; k++ {
		if k > 0 {
			straddler = 0
			if k <= a.buckets {
				si = a.next(si)
				straddler = int64(c[si])
				if p != nil {
					straddler += p.bucket(v.side, v.k, j-a.buckets+k)
				}
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
		return max(start+at, v.r.last)
	}
}

// readState reads what idle(t) reads: nothing but the record if the first
// rate's units are all in t's bucket, else the counters and extra records
// (see prefetchState).
func (a *slidingCounter) readState(s *shard[counterRec], r *counterRec, slot uint32, t int64) uint32 {
	if r.sum != 0 && t/a.bucket[0] == r.head {
		return 0
	}
	side, extra := s.keyState(slot, counterRef)
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
	side, extra := s.keyState(slot, counterRef)
	for k := range a.rates {
		p, c := a.rate(r, side, extra, k)
		if p.head > t/a.bucket[k] {
			return false // a reservation's buckets: see ahead
		}
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
	return s.peers == nil || !s.peers.holds(side, t)
}

// latest is the last instant of each rate's newest bucket: a
// reservation may lie there after the key's latest instant, even in the
// latest instant's own bucket (the estimate drops as the oldest bucket
// slides out, so a request denied now may fit later in the same bucket).
func (a *slidingCounter) latest(s *shard[counterRec], r *counterRec, slot uint32) int64 {
	t := r.last
	_, extra := s.keyState(slot, counterRef)
	for k := range a.rates {
		p := r
		if k > 0 {
			p = &extra[k-1]
		}
		if end := (p.head+1)*a.bucket[k] - 1; end > r.last {
			t = max(t, end)
		}
	}
	return t
}

func (a *slidingCounter) limitWord(r *counterRec) *uint32 { return &r.lim }
func (a *slidingCounter) lastSeen(r *counterRec) int64    { return r.last }
