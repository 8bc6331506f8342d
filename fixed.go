package shardlimit

import "time"

// fixedRec is a FixedWindow key's state: 24 bytes.
type fixedRec struct {
	lim   uint32 // lim word, see ownLimit
	count uint32 // units admitted in the current window
	last  int64  // latest instant seen, Unix ns
	start int64  // start of the key's current window, Unix ns
}

// fixedWindow is the fixed window counter: window k is [k*W, (k+1)*W) in
// Unix time, and a key may consume limit units per window.
type fixedWindow struct {
	window int64       // W, ns
	sync   *syncLayout // nil unless shared (one bucket: the window)
}

// NewFixedWindow returns a fixed window limiter: each key may consume
// cfg.Limit units in each window [k*W, (k+1)*W) of Unix time. It is the
// cheapest algorithm (24 bytes of state per key) and the least accurate: a
// client can consume the limit at the end of one window and again at the
// start of the next, up to twice the limit within one window's length.
//
// It returns an error wrapping ErrInvalidConfig if cfg is invalid. The
// limiter is safe for concurrent use; Close stops its janitor.
func NewFixedWindow(cfg Config) (Limiter, error) {
	cfg, err := cfg.withDefaults(FixedWindow)
	if err != nil {
		return nil, err
	}
	l := &fixedLimiter{alg: &fixedWindow{window: int64(cfg.Window)}}
	l.init(cfg, 0, l.alg)
	return l, nil
}

func (a *fixedWindow) init(r *fixedRec, t int64, w uint32) {
	*r = fixedRec{lim: w, last: t, start: t - t%a.window}
}

// advance brings r to instant t and returns the instant to decide at. A
// step back within stepTolerance decides at the key's latest instant; a
// larger one (a clock step, confirmed by shard.stepCheck) moves the window
// back by the step, so the key keeps its usage and the wait it had left
// (CASES.md C11). A shared key decides at its latest instant after a step
// too: the other nodes' units are kept by absolute window, so its time
// stands still until the clock catches up. At the window's end the next
// window is aligned to Unix time again.
func (a *fixedWindow) advance(r *fixedRec, t int64) int64 {
	if t < r.last {
		if r.last-t <= stepTolerance || a.sync != nil {
			t = r.last
		} else {
			r.start -= r.last - t
		}
	}
	r.last = t
	if t-r.start >= a.window {
		r.start = t - t%a.window
		r.count = 0
	}
	return t
}

func (a *fixedWindow) decide(s *shard[fixedRec], r *fixedRec, side []uint32, t int64, n int, consume, full bool) verdict {
	// Durations are measured from the caller's t, which may precede the
	// instant decided at (by up to stepTolerance, or by a shared key's
	// step): t+RetryAfter is when the same request fits.
	a.advance(r, t)
	lim := effectiveLimit(r.lim, s.defLimit)
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	reset := r.start + a.window - t
	used := int64(r.count)
	var id int64
	if a.sync != nil {
		// Other nodes' units of this window count too.
		id = a.sync.bucketOf(side, r.start)
		if d := a.sync.rotate(side, id); d != 0 && consume {
			s.syncDropped.Add(uint64(d))
		}
		used += int64(a.sync.remote(side, id))
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
		if consume {
			r.count += uint32(n)
			if a.sync != nil {
				a.sync.add(side, id, uint32(n))
			}
		}
	default:
		retry = time.Duration(reset)
	}
	return makeVerdict(allowed, lim, int(max(0, int64(lim)-used)), time.Duration(reset), retry)
}

func (a *fixedWindow) idle(_ *shard[fixedRec], r *fixedRec, side []uint32, t int64) bool {
	if r.lim&ownLimit != 0 || a.sync != nil && a.sync.holds(side, max(t, r.last)) {
		return false
	}
	return r.count == 0 || max(t, r.last)-r.start >= a.window
}

// standsStill: a shared key decides at its latest instant after a clock
// step back instead of moving its window (see advance).
func (a *fixedWindow) standsStill() bool { return a.sync != nil }

func (a *fixedWindow) relimit(*shard[fixedRec], *fixedRec, []uint32, uint32, uint32) {}
func (a *fixedWindow) limitWord(r *fixedRec) uint32                                  { return r.lim }
func (a *fixedWindow) setLimitWord(r *fixedRec, w uint32)                            { r.lim = w }
func (a *fixedWindow) lastSeen(r *fixedRec) int64                                    { return r.last }
func (a *fixedWindow) release(*shard[fixedRec], *fixedRec)                           {}
func (a *fixedWindow) syncLayout() *syncLayout                                       { return a.sync }
func (a *fixedWindow) compact(*shard[fixedRec])                                      {}
func (a *fixedWindow) sideRef(*fixedRec) *uint32                                     { return nil }
