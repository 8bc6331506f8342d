package shardlimit

import (
	"math/bits"
	"time"
)

// counterRec is a SlidingCounter key's state: 32 bytes, plus Buckets+1
// 4-byte counters in the shard's side slab.
type counterRec struct {
	lim  uint32 // lim word, see ownLimit
	sum  uint32 // units in all Buckets+1 counters
	hidx uint32 // counter index of bucket head: head mod (Buckets+1)
	side uint32 // the key's entry in the shard's side slab: its counters
	last int64  // latest instant seen, Unix ns
	head int64  // id of the bucket of last (last / G) the counters are at
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
// own.
type slidingCounter struct {
	bucket  int64       // G, ns
	buckets int64       // n
	sync    *syncLayout // nil unless shared (the same buckets)
	stride  int         // side words per key: n+1 counters, then the sync state's
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
	a := &slidingCounter{bucket: int64(cfg.Window) / n, buckets: n, stride: int(n) + 1}
	l := &counterLimiter{}
	l.init(cfg, a, a.stride, nil)
	return l, nil
}

// counterLimiter is the sliding counter's Limiter.
type counterLimiter struct{ limiter[counterRec] }

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

func (a *slidingCounter) decide(s *shard[counterRec], r *counterRec, side []uint32, t int64, n int, mode decideMode) verdict {
	if side == nil {
		side = s.entry(r.side, a.stride)
	}
	c := side[:a.buckets+1]
	kt := max(t, r.last) // per key, time never goes back
	if kt-r.head*a.bucket >= a.bucket {
		// Past the newest bucket: clear the buckets that leave the
		// window (no call, so the common path spills nothing).
		j := kt / a.bucket
		i := int(r.hidx)
		for k := min(j-r.head, a.buckets+1); k > 0; k-- {
			i = a.next(i)
			r.sum -= c[i]
			c[i] = 0
		}
		if j-r.head > a.buckets {
			i = a.idx(j)
		}
		r.head, r.hidx = j, uint32(i)
	}
	r.last = kt
	lim := effectiveLimit(r.lim, s.defLimit)
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	j, hi := r.head, int(r.hidx)
	si := a.next(hi) // bucket j-n, which straddles the window's start
	straddler, whole := int64(c[si]), int64(r.sum)-int64(c[si])
	if a.sync != nil {
		remote, sum := a.remote(s, side, j, mode)
		straddler += int64(remote[si])
		whole += sum - int64(remote[si])
	}
	allowed := n == 0 || int64(n) <= int64(lim) && a.fits(straddler, kt-j*a.bucket, whole, int64(n), int64(lim))
	if allowed && n > 0 {
		c[hi] += uint32(n)
		r.sum += uint32(n)
		if a.sync != nil {
			a.sync.add(side, j, uint32(n))
		}
	}
	if mode&full == 0 {
		return makeVerdict(allowed, lim, 0, 0, 0)
	}
	return a.explain(r, side, allowed, t, n, lim)
}

// explain returns the full verdict of a decision on r (side words side)
// that admitted n units under limit lim or not, from r's state after it:
// Remaining from the weighted estimate, RetryAfter and ResetAfter measured
// from the caller's t.
func (a *slidingCounter) explain(r *counterRec, side []uint32, allowed bool, t int64, n int, lim uint32) verdict {
	c := side[:a.buckets+1]
	var remote []uint32
	var remoteSum int64
	if a.sync != nil {
		_, _, remote = a.sync.arrays(side)
		for _, v := range remote {
			remoteSum += int64(v)
		}
	}
	j, hi, kt := r.head, int(r.hidx), r.last
	sum := int64(r.sum) + remoteSum
	straddler := a.count(c, remote, a.next(hi))
	est := sum - straddler // the weighted estimate, the decision's units included
	if straddler != 0 {
		est += int64(mulDivCeil(uint64(straddler), uint64(a.bucket-(kt-j*a.bucket)), uint64(a.bucket)))
	}
	var retry time.Duration
	switch {
	case allowed:
	case int64(n) > int64(lim):
		retry = Never
	default:
		retry = time.Duration(a.admitAt(j, hi, c, remote, sum, kt, int64(n), int64(lim)) - t)
	}
	reset := time.Duration(a.resetAt(j, hi, c, remote, sum) - t)
	return makeVerdict(allowed, lim, int(max(0, int64(lim)-est)), reset, retry)
}

// remote rotates a shared key's sync rings to bucket j and returns the
// other nodes' units per bucket and in all. Units the rotation dropped
// unsent are counted when mode keeps the decision.
func (a *slidingCounter) remote(s *shard[counterRec], side []uint32, j int64, mode decideMode) ([]uint32, int64) {
	if d := a.sync.rotate(side, j); d != 0 && mode&consume != 0 {
		s.syncDropped.Add(uint64(d))
	}
	_, _, remote := a.sync.arrays(side)
	var sum int64
	for _, v := range remote {
		sum += int64(v)
	}
	return remote, sum
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

func (a *slidingCounter) idle(_ *shard[counterRec], r *counterRec, c []uint32, t int64) bool {
	if r.lim&ownLimit != 0 {
		return false
	}
	kt := max(t, r.last)
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

func (a *slidingCounter) limitWord(r *counterRec) *uint32 { return &r.lim }
func (a *slidingCounter) lastSeen(r *counterRec) int64    { return r.last }
func (a *slidingCounter) sideRef(r *counterRec) *uint32   { return &r.side }
