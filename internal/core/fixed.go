package core

import "time"

// fixedRec is a FixedWindow key's state: 24 bytes. With several rates, the
// key's record holds the first (the longest window's) and extra records
// the others, whose last only follows the key's.
type fixedRec struct {
	lim   uint32 // lim word, see ownLimit
	count uint32 // units admitted in the current window
	last  int64  // the key's latest instant seen, Unix ns
	start int64  // start of the current window, Unix ns (0: none yet)
}

// fixedWindow is the fixed window counter: window k is [k*W, (k+1)*W) in
// Unix time, and a key may consume limit units per window, for each of its
// rates.
type fixedWindow struct {
	rates  int
	window [MaxRates]int64 // W of each rate, ns, longest first
}

// NewFixedWindow returns a new limiter of the algorithm, as package shardlimit's
// NewFixedWindow (documented there) does, with its errors.
func NewFixedWindow(cfg Config) (Limiter, error) { return build[FixedLimiter](cfg) }

// FixedLimiter is the fixed window's Limiter.
type FixedLimiter struct{ limiter[fixedRec] }

// Init sets up l, whose zero value it requires, as NewFixedWindow(cfg)
// would, and returns NewFixedWindow's errors.
func (l *FixedLimiter) Init(cfg Config) error {
	cfg, err := cfg.withDefaults(FixedWindow)
	if err != nil {
		return err
	}
	rs := newRateSet(cfg)
	l.init(cfg, &rs, &fixedWindow{rates: rs.n, window: rs.window}, 0, rs.n-1, nil)
	return nil
}

func (a *fixedWindow) init(s *shard[fixedRec], r *fixedRec, slot uint32, t int64) {
	r.count, r.start, r.last = 0, 0, t
	if a.rates > 1 {
		_, extra := s.keyState(slot, 0)
		for k := range extra {
			extra[k].count, extra[k].start, extra[k].last = 0, 0, t
		}
	}
}

func (a *fixedWindow) decide(s *shard[fixedRec], r *fixedRec, slot uint32, t int64, n int, mode decideMode) verdict {
	k := mode.rate()
	key := r // the key's record; r is that of its rate k
	if k > 0 {
		key = s.keyRec(slot)
	}
	te := max(t, key.last) // per key, time never goes back
	r.last = te
	w := a.window[k]
	if d := te - r.start; d >= w {
		r.start, r.count = te-te%w, 0
	} else if d < 0 {
		return a.ahead(s, r, slot, t, n, mode)
	}
	lim := effectiveLimit(r.lim, s.defLimits[k])
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	reset := time.Duration(r.start + w - t) // from the caller's t
	used := int64(r.count)
	var side []uint32
	p := s.peers
	if p != nil {
		// Other nodes' units of this rate's window count too.
		side, _ = s.keyState(slot, 0)
		used += p.at(side, k, r.start)
	}
	var allowed bool
	var retry time.Duration
	switch {
	case n == 0:
		allowed = true
	case int64(n) > int64(lim):
		retry = Never
	case used+int64(n) <= int64(lim):
		allowed = true
		used += int64(n)
		if mode&consume != 0 {
			r.count += uint32(n)
			if p != nil {
				p.add(side, k, uint32(n))
			}
		}
	default:
		retry = reset
	}
	if mode&full == 0 {
		return verdict{word: b2u(allowed)}
	}
	return makeVerdict(allowed, k, lim, int(max(0, int64(lim)-used)), reset, retry)
}

func (a *fixedWindow) refund(s *shard[fixedRec], r *fixedRec, slot uint32, n int, k int) {
	r.count -= uint32(n)
	if p := s.peers; p != nil {
		side, _ := s.keyState(slot, 0)
		p.takeBack(side, k, uint32(n))
	}
}

// ahead decides n units at t for rate k (record r) of a key whose window
// is a reservation's, which starts after t: the windows before it count
// as full (a reservation into a later window gives up the count of the
// windows before it), so only a peek is admitted, with the numbers of the
// same request at the reserved window's start.
func (a *fixedWindow) ahead(s *shard[fixedRec], r *fixedRec, slot uint32, t int64, n int, mode decideMode) verdict {
	if mode&full == 0 {
		return verdict{word: b2u(n == 0)}
	}
	cp := *r
	return deferred(a.decide(s, &cp, slot, r.start, n, mode&^consume), t, r.start, n)
}

// settle charges the window of the key's latest instant, or refunds the
// window of at while it is the current one (a window that has ended
// holds nothing a later decision could use).
func (a *fixedWindow) settle(s *shard[fixedRec], r *fixedRec, slot uint32, at int64, delta int, k int) {
	key := r // the key's record; r is that of its rate k
	if k > 0 {
		key = s.keyRec(slot)
	}
	w, last := a.window[k], key.last
	var side []uint32
	p := s.peers
	if p != nil {
		side, _ = s.keyState(slot, 0)
	}
	if delta > 0 {
		if last-r.start >= w {
			r.start, r.count = last-last%w, 0
		}
		n := satAdd(&r.count, delta)
		if p != nil {
			p.move(side, k, r.start)
			p.add(side, k, n)
		}
		return
	}
	if at-at%w != r.start || last-r.start >= w {
		return
	}
	n := min(uint32(-delta), r.count)
	r.count -= n
	if p != nil {
		p.takeBackAt(side, k, at, n)
	}
}

// reserve moves rate k to t's window, if later than its own, and
// consumes n units there: the windows before it then count as full (see
// ahead).
func (a *fixedWindow) reserve(_ *shard[fixedRec], r *fixedRec, _ uint32, t int64, n int, k int) bool {
	if ws := t - t%a.window[k]; ws != r.start {
		r.start, r.count = ws, 0
	}
	r.count += uint32(n)
	return true
}

func (a *fixedWindow) idle(s *shard[fixedRec], r *fixedRec, slot uint32, t int64) bool {
	if r.lim&ownLimit != 0 {
		return false
	}
	var side []uint32
	var extra []fixedRec
	p := s.peers
	if p != nil || a.rates > 1 {
		side, extra = s.keyState(slot, 0)
	}
	if p != nil && p.holds(side, t) {
		return false
	}
	for k, p := 0, r; ; p = &extra[k-1] {
		if p.count != 0 && t-p.start < a.window[k] || p.start > t {
			return false
		}
		if k++; k == a.rates {
			return true
		}
	}
}

// latest is the key's latest instant, or the last instant of a window a
// reservation moved a rate to after it.
func (a *fixedWindow) latest(s *shard[fixedRec], r *fixedRec, slot uint32) int64 {
	t := r.last
	var extra []fixedRec
	if a.rates > 1 {
		_, extra = s.keyState(slot, 0)
	}
	for k, p := 0, r; ; p = &extra[k-1] {
		if p.start > r.last {
			t = max(t, p.start+a.window[k]-1)
		}
		if k++; k == a.rates {
			return t
		}
	}
}

func (a *fixedWindow) limitWord(r *fixedRec) *uint32 { return &r.lim }
func (a *fixedWindow) lastSeen(r *fixedRec) int64    { return r.last }
