package core

import (
	"math/bits"
	"time"
)

// gcraRec is a GCRA key's state: 32 bytes. The theoretical arrival time
// (TAT) is tat + rem/L nanoseconds, L the limit the state is encoded for, so
// the emission interval W/L is kept exactly even when L does not divide W.
type gcraRec struct {
	lim  uint32 // lim word, see ownLimit
	rem  uint32 // TAT's fraction of a nanosecond, in units of 1/L ns
	last int64  // latest instant seen, Unix ns
	tat  int64  // TAT's whole nanoseconds, Unix ns
	// event is the instant of the key's latest reservation, Unix ns
	// (x/time/rate's lastEvent): no unit of the key counts after
	// max(last, event). Only the key's record (its first rate's) keeps
	// it. A refund needs it (see settle): 8 bytes per key, the price of
	// never over-admitting after a refund while reservations wait.
	event int64
}

// gcra is the generic cell rate algorithm with emission interval T = W/L
// and burst L: a request of n units at t is admitted iff
// max(TAT, t) + n*T - t <= W, which then becomes the new TAT. It is a token
// bucket of capacity L refilled at L per W, in O(1) state per rate.
type gcra struct {
	rates  int
	window [MaxRates]int64 // W of each rate, ns, longest first
}

// maxDebt caps how far a key's TAT may run ahead of its last instant after
// its limit is lowered (usage above a new, smaller limit drains at the new
// rate); it keeps every instant inside int64.
const maxDebt = 2 * int64(MaxWindow)

// NewGCRA returns a new limiter of the algorithm, as package shardlimit's
// NewGCRA (documented there) does, with its errors.
func NewGCRA(cfg Config) (Limiter, error) { return build[GCRALimiter](cfg) }

// GCRALimiter is GCRA's Limiter.
type GCRALimiter struct{ limiter[gcraRec] }

// Init sets up l, whose zero value it requires, as NewGCRA(cfg) would, and
// returns NewGCRA's errors.
func (l *GCRALimiter) Init(cfg Config) error {
	cfg, err := cfg.withDefaults(GCRA)
	if err != nil {
		return err
	}
	rs := newRateSet(cfg)
	l.init(cfg, &rs, &gcra{rates: rs.n, window: rs.window}, 0, rs.n-1, nil)
	return nil
}

func (a *gcra) init(s *shard[gcraRec], r *gcraRec, slot uint32, t int64) {
	r.rem, r.last, r.tat, r.event = 0, t, t, t
	if a.rates > 1 {
		_, extra := s.keyState(slot, 0)
		for k := range extra {
			extra[k].rem, extra[k].last, extra[k].tat = 0, t, t
		}
	}
}

// remaining returns floor((W - D) * L / W), D = TAT - t, the units that fit
// now in a bucket whose TAT is tat + rem/L; 0 if D >= W.
func (a *gcra) remaining(w, tat int64, rem uint32, t int64, lim uint32) int64 {
	d := tat - t
	if d >= w {
		return 0
	}
	hi, lo := bits.Mul64(uint64(w-d), uint64(lim))
	lo, borrow := bits.Sub64(lo, uint64(rem), 0)
	hi -= borrow
	q, _ := bits.Div64(hi, lo, uint64(w))
	return int64(q)
}

func (a *gcra) decide(s *shard[gcraRec], r *gcraRec, slot uint32, t int64, n int, mode decideMode) verdict {
	k := mode.rate()
	key := r // the key's record; r is that of its rate k
	if k > 0 {
		key = s.keyRec(slot)
	}
	te := max(t, key.last) // per key, time never goes back
	r.last = te
	if r.refilled(te) {
		r.tat, r.rem = te, 0 // a TAT in the past is a full bucket
	}
	w := a.window[k]
	lim := effectiveLimit(r.lim, s.defLimits[k])
	if old := r.lim & limitMask; lim != 0 && lim != old {
		a.rescale(r, te, key.event, old, lim)
		r.lim = r.lim&^limitMask | lim
	}
	var allowed bool
	var retry time.Duration
	tat, rem := r.tat, r.rem
	switch {
	case n == 0:
		allowed = true
	case int64(n) > int64(lim):
		retry = Never
	default:
		var q, rr uint64 // n emission intervals, whole ns and 1/lim ns
		if n == 1 {
			q, rr = s.emission(k, lim, w) // inlined: the hot path
		} else {
			q, rr = mulDiv(uint64(n), uint64(w), uint64(lim))
		}
		ntat, nrem := addTAT(r.tat, r.rem, q, rr, lim)
		if d := ntat - te; d < w || (d == w && nrem == 0) {
			allowed = true
			tat, rem = ntat, nrem
			if mode&consume != 0 {
				r.tat, r.rem = tat, rem
			}
		} else {
			retryAt := ntat - w
			if nrem > 0 {
				retryAt++
			}
			retry = time.Duration(retryAt - t)
		}
	}
	remaining := int64(0)
	if lim != 0 && mode&full != 0 {
		remaining = a.remaining(w, tat, rem, te, lim)
	}
	return makeVerdict(allowed, k, lim, int(remaining), a.until(tat, rem, t), retry)
}

// intervals returns n > 0 emission intervals of rate k under limit
// lim > 0, W*n/lim, in whole nanoseconds and 1/lim ns. Requires s.mu held.
func (a *gcra) intervals(s *shard[gcraRec], k, n int, lim uint32) (q, rr uint64) {
	if n == 1 {
		return s.emission(k, lim, a.window[k])
	}
	return mulDiv(uint64(n), uint64(a.window[k]), uint64(lim))
}

// addTAT returns the TAT tat + rem/lim plus q + rr/lim nanoseconds, for
// rem, rr < lim, as whole nanoseconds and a remainder below lim.
func addTAT(tat int64, rem uint32, q, rr uint64, lim uint32) (int64, uint32) {
	if sum := uint64(rem) + rr; sum >= uint64(lim) {
		return tat + int64(q) + 1, uint32(sum - uint64(lim))
	}
	return tat + int64(q), rem + uint32(rr)
}

// refilled reports whether the TAT of p, a rate's state, is not after t:
// its bucket is full at t.
func (p *gcraRec) refilled(t int64) bool {
	return p.tat < t || p.tat == t && p.rem == 0
}

// refund takes n emission intervals off the TAT the decision moved, in the
// limit its state is encoded for (the decision set it).
func (a *gcra) refund(s *shard[gcraRec], r *gcraRec, _ uint32, n int, k int) {
	lim := r.lim & limitMask
	q, rr := a.intervals(s, k, n, lim)
	r.tat -= int64(q)
	if uint64(r.rem) < rr {
		r.tat--
		r.rem += lim
	}
	r.rem -= uint32(rr)
}

// settle moves the TAT by delta emission intervals, in the limit its
// state is encoded for. A charge starts from the key's latest instant if
// the bucket is full then and stops at maxDebt ahead of it.
//
// A refund of n units of a decision at at gives back what the decisions
// after it leave (x/time/rate's restoreTokens, with its lastEvent): the
// TAT moves back by n intervals less the time from at to le, the latest
// instant at which any of the key's units count (the key's latest
// instant, or its latest reservation's if later), and never before the
// key's latest instant. This never frees room a later decision holds:
// every unit at an instant f keeps TAT >= f + (units at f or after)*T
// (T = W/L), so the decision's n units at at and the units after at
// leave, once the n are gone, TAT - n*T + (f - at) >= f + (units at f or
// after)*T for every later f <= le. The units drained since at, and the
// places of the decisions queued behind, are so kept. A TAT not after the
// key's latest instant holds nothing to take back.
func (a *gcra) settle(s *shard[gcraRec], r *gcraRec, slot uint32, at int64, delta int, k int) {
	key := r // the key's record; r is that of its rate k
	if k > 0 {
		key = s.keyRec(slot)
	}
	last, w := key.last, a.window[k]
	lim := r.lim & limitMask
	if lim == 0 { // no usage encoded yet
		lim = encodingLimit(r.lim, s.defLimits[k])
		r.lim |= lim
	}
	if delta > 0 {
		if r.refilled(last) {
			r.tat, r.rem = last, 0
		}
		q, rr := a.intervals(s, k, delta, lim)
		if r.tat-last+int64(q)+1 >= maxDebt {
			r.tat, r.rem = last+maxDebt, 0
			return
		}
		r.tat, r.rem = addTAT(r.tat, r.rem, q, rr, lim)
		return
	}
	if r.refilled(last) {
		return
	}
	le := max(last, key.event)
	gap := uint64(le - min(at, le))
	// In units of 1/lim ns: the n intervals, the gap, and the TAT's lead
	// over the key's latest instant plus the gap (below 2^63 ns each).
	nHi, nLo := bits.Mul64(uint64(-delta), uint64(w))
	gHi, gLo := bits.Mul64(gap, uint64(lim))
	if !less128(gHi, gLo, nHi, nLo) {
		return // the gap takes every unit
	}
	dHi, dLo := bits.Mul64(uint64(r.tat-last)+gap, uint64(lim))
	var c uint64
	dLo, c = bits.Add64(dLo, uint64(r.rem), 0)
	dHi += c
	if !less128(nHi, nLo, dHi, dLo) {
		r.tat, r.rem = last, 0 // back to a full bucket
		return
	}
	q, rr := bits.Div64(nHi, nLo, uint64(lim)) // below the lead: fits
	tat, rem := r.tat-int64(q)+int64(gap), r.rem
	if uint64(rem) < rr {
		tat--
		rem += lim
	}
	r.tat, r.rem = tat, rem-uint32(rr)
}

// encodingLimit returns the limit a record with lim word w, which
// encodes no usage yet, encodes a settle's for in a shard whose default
// limit is def: the limit in force, or under a ban (0) the default, or 1.
// A ban keeps the encoding (see ownLimit), so a charge made under it
// shows once the ban is lifted, rescaled to the limit then in force.
func encodingLimit(w, def uint32) uint32 {
	if lim := effectiveLimit(w, def); lim != 0 {
		return lim
	}
	return max(def, 1)
}

// less128 reports whether the 128-bit number aHi:aLo is below bHi:bLo.
func less128(aHi, aLo, bHi, bLo uint64) bool {
	return aHi < bHi || aHi == bHi && aLo < bLo
}

// reserve adds n emission intervals to the TAT: the units are the
// caller's once t (their TAT less W) is reached, and every later decision
// queues behind them.
func (a *gcra) reserve(s *shard[gcraRec], r *gcraRec, _ uint32, t int64, n int, k int) bool {
	if k == 0 {
		r.event = max(r.event, t) // the key's record: its latest reservation
	}
	lim := r.lim & limitMask // the decision at the key's latest instant encoded it
	if r.refilled(t) {
		r.tat, r.rem = t, 0
	}
	q, rr := a.intervals(s, k, n, lim)
	r.tat, r.rem = addTAT(r.tat, r.rem, q, rr, lim)
	return true
}

func (a *gcra) idle(s *shard[gcraRec], r *gcraRec, slot uint32, t int64) bool {
	if r.lim&ownLimit != 0 {
		return false
	}
	var extra []gcraRec
	if a.rates > 1 {
		_, extra = s.keyState(slot, 0)
	}
	for k, p := 0, r; ; p = &extra[k-1] {
		if !p.refilled(t) {
			return false
		}
		if k++; k == a.rates {
			return true
		}
	}
}

// until returns the time from t until the TAT tat + rem/L, rounded up.
func (a *gcra) until(tat int64, rem uint32, t int64) time.Duration {
	d := time.Duration(tat - t)
	if rem > 0 {
		d++
	}
	return d
}

// relimit re-encodes rate k's state for a new limit (see rescale).
func (a *gcra) relimit(s *shard[gcraRec], r *gcraRec, slot uint32, k int, old, lim uint32) {
	p := r
	if k > 0 {
		_, extra := s.keyState(slot, 0)
		p = &extra[k-1]
	}
	a.rescale(p, r.last, r.event, old, lim)
}

// rescale keeps a rate's usage, D*L/W units for debt D = TAT - last, by
// scaling the debt to D*old/lim, for the key whose latest instant is last
// and latest reservation's instant event. A raised limit scales only the
// debt after the reservation (the TAT's lead over min(event, TAT)): the
// time from last to a reservation holds no units, and scaling it would
// pull the reservation's units back towards last, beside those of
// decisions made there. Every unit at an instant f keeps TAT >= f +
// (units at f or after)*W/old, so f + (TAT-f)*old/lim, largest at the
// latest f, the reservation's, is what the new limit needs; a lowered
// limit's is largest at last.
func (a *gcra) rescale(p *gcraRec, last, event int64, old, lim uint32) {
	if old == 0 || p.refilled(last) {
		p.tat, p.rem = max(p.tat, last), 0
		return
	}
	base := last
	if lim > old && event > last {
		base = min(event, p.tat)
	}
	hi, lo := bits.Mul64(uint64(p.tat-base), uint64(old))
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(p.rem), 0)
	hi += carry
	if hi >= uint64(lim) {
		p.tat, p.rem = last+maxDebt, 0
		return
	}
	q, rr := bits.Div64(hi, lo, uint64(lim))
	if q >= uint64(maxDebt) {
		p.tat, p.rem = last+maxDebt, 0
		return
	}
	p.tat, p.rem = base+int64(q), uint32(rr)
}

func (a *gcra) latest(_ *shard[gcraRec], r *gcraRec, _ uint32) int64 { return max(r.last, r.event) }
func (a *gcra) event(r *gcraRec) int64                               { return r.event }
func (a *gcra) setEvent(r *gcraRec, t int64)                         { r.event = t }
func (a *gcra) limitWord(r *gcraRec) *uint32                         { return &r.lim }
func (a *gcra) lastSeen(r *gcraRec) int64                            { return r.last }
