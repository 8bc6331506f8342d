package shardlimit

import (
	"math/bits"
	"time"
)

// gcraRec is a GCRA key's state: 24 bytes. The theoretical arrival time
// (TAT) is tat + rem/L nanoseconds, L the limit the state is encoded for, so
// the emission interval W/L is kept exactly even when L does not divide W.
type gcraRec struct {
	lim  uint32 // lim word, see ownLimit
	rem  uint32 // TAT's fraction of a nanosecond, in units of 1/L ns
	last int64  // latest instant seen, Unix ns
	tat  int64  // TAT's whole nanoseconds, Unix ns
}

// gcra is the generic cell rate algorithm with emission interval T = W/L
// and burst L: a request of n units at t is admitted iff
// max(TAT, t) + n*T - t <= W, which then becomes the new TAT. It is a token
// bucket of capacity L refilled at L per W, in O(1) state.
type gcra struct {
	window int64 // W, ns
}

// maxDebt caps how far a key's TAT may run ahead of its last instant after
// its limit is lowered (usage above a new, smaller limit drains at the new
// rate); it keeps every instant inside int64.
const maxDebt = 2 * int64(MaxWindow)

// NewGCRA returns a GCRA limiter (generic cell rate algorithm, ATM Forum
// Traffic Management 4.0; the algorithm of go-redis/redis_rate and
// throttled): a token bucket of capacity cfg.Limit refilled smoothly at
// cfg.Limit units per cfg.Window, so a key may burst cfg.Limit units and then
// one unit every Window/Limit. Arithmetic is exact: the emission interval is
// kept as a fraction, never rounded.
//
// It returns an error wrapping ErrInvalidConfig if cfg is invalid. The
// limiter is safe for concurrent use; Close stops its janitor.
func NewGCRA(cfg Config) (Limiter, error) {
	cfg, err := cfg.withDefaults(GCRA)
	if err != nil {
		return nil, err
	}
	l := &gcraLimiter{}
	l.init(cfg, &gcra{window: int64(cfg.Window)}, 0, nil)
	return l, nil
}

// gcraLimiter is GCRA's Limiter.
type gcraLimiter struct{ limiter[gcraRec] }

func (a *gcra) init(r *gcraRec, t int64, w uint32) {
	*r = gcraRec{lim: w, last: t, tat: t}
}

// remaining returns floor((W - D) * L / W), D = TAT - t, the units that fit
// now in a bucket whose TAT is tat + rem/L; 0 if D >= W.
func (a *gcra) remaining(tat int64, rem uint32, t int64, lim uint32) int {
	d := tat - t
	if d >= a.window {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a.window-d), uint64(lim))
	lo, borrow := bits.Sub64(lo, uint64(rem), 0)
	hi -= borrow
	q, _ := bits.Div64(hi, lo, uint64(a.window))
	return int(q)
}

func (a *gcra) decide(s *shard[gcraRec], r *gcraRec, _ []uint32, t int64, n int, mode decideMode) verdict {
	te := max(t, r.last) // per key, time never goes back
	r.last = te
	if r.tat < te || (r.tat == te && r.rem == 0) {
		r.tat, r.rem = te, 0 // a TAT in the past is a full bucket
	}
	lim := effectiveLimit(r.lim, s.defLimit)
	if old := r.lim & limitMask; lim != 0 && lim != old {
		a.relimit(s, r, old, lim)
		r.lim = r.lim&^limitMask | lim
	}
	var allowed bool
	var retry, reset time.Duration
	remaining := 0
	tat, rem := r.tat, r.rem
	switch {
	case n == 0:
		allowed = true
	case int64(n) > int64(lim):
		retry = Never
	default:
		var q, rr uint64
		if n == 1 {
			q, rr = s.emission(lim, a.window)
		} else {
			q, rr = mulDiv(uint64(n), uint64(a.window), uint64(lim))
		}
		ntat, nrem := tat+int64(q), uint64(rem)+rr
		if nrem >= uint64(lim) {
			nrem -= uint64(lim)
			ntat++
		}
		if d := ntat - te; d < a.window || (d == a.window && nrem == 0) {
			allowed = true
			tat, rem = ntat, uint32(nrem)
			r.tat, r.rem = tat, rem
		} else {
			retryAt := ntat - a.window
			if nrem > 0 {
				retryAt++
			}
			retry = time.Duration(retryAt - t)
		}
	}
	if lim != 0 && mode&full != 0 {
		remaining = a.remaining(tat, rem, te, lim)
	}
	reset = time.Duration(tat - t)
	if rem > 0 {
		reset++
	}
	return makeVerdict(allowed, lim, remaining, reset, retry)
}

func (a *gcra) idle(_ *shard[gcraRec], r *gcraRec, _ []uint32, t int64) bool {
	if r.lim&ownLimit != 0 {
		return false
	}
	t = max(t, r.last)
	return r.tat < t || (r.tat == t && r.rem == 0)
}

// relimit keeps the key's usage, D*L/W units for debt D = TAT - last, by
// scaling the debt to D*old/lim.
func (a *gcra) relimit(_ *shard[gcraRec], r *gcraRec, old, lim uint32) {
	if old == 0 || r.tat < r.last || (r.tat == r.last && r.rem == 0) {
		r.tat, r.rem = max(r.tat, r.last), 0
		return
	}
	hi, lo := bits.Mul64(uint64(r.tat-r.last), uint64(old))
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(r.rem), 0)
	hi += carry
	if hi >= uint64(lim) {
		r.tat, r.rem = r.last+maxDebt, 0
		return
	}
	q, rr := bits.Div64(hi, lo, uint64(lim))
	if q >= uint64(maxDebt) {
		r.tat, r.rem = r.last+maxDebt, 0
		return
	}
	r.tat, r.rem = r.last+int64(q), uint32(rr)
}

func (a *gcra) limitWord(r *gcraRec) *uint32 { return &r.lim }
func (a *gcra) lastSeen(r *gcraRec) int64    { return r.last }
