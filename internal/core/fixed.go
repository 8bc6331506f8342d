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
	if te-r.start >= w {
		r.start, r.count = te-te%w, 0
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
		if p.count != 0 && t-p.start < a.window[k] {
			return false
		}
		if k++; k == a.rates {
			return true
		}
	}
}

func (a *fixedWindow) limitWord(r *fixedRec) *uint32 { return &r.lim }
func (a *fixedWindow) lastSeen(r *fixedRec) int64    { return r.last }
