package shardlimit

import "time"

// fixedRec is a FixedWindow key's state: 24 bytes.
type fixedRec struct {
	lim   uint32 // lim word, see ownLimit
	count uint32 // units admitted in the current window
	last  int64  // latest instant seen, Unix ns
	start int64  // start of the window of last, Unix ns
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
	l := &fixedLimiter{}
	l.init(cfg, &fixedWindow{window: int64(cfg.Window)}, 0, nil)
	return l, nil
}

// fixedLimiter is the fixed window's Limiter.
type fixedLimiter struct{ limiter[fixedRec] }

func (a *fixedWindow) init(r *fixedRec, t int64, w uint32) {
	*r = fixedRec{lim: w, last: t, start: t - t%a.window}
}

func (a *fixedWindow) decide(s *shard[fixedRec], r *fixedRec, side []uint32, t int64, n int, mode decideMode) verdict {
	te := max(t, r.last) // per key, time never goes back
	r.last = te
	if te-r.start >= a.window {
		r.start = te - te%a.window
		r.count = 0
	}
	lim := effectiveLimit(r.lim, s.defLimit)
	if lim != 0 {
		r.lim = r.lim&^limitMask | lim
	}
	reset := r.start + a.window - t // from the caller's t
	used := int64(r.count)
	var id int64
	if a.sync != nil {
		// Other nodes' units of this window count too.
		id = a.sync.bucketOf(side, r.start)
		if d := a.sync.rotate(side, id); d != 0 && mode&consume != 0 {
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
		r.count += uint32(n)
		if a.sync != nil {
			a.sync.add(side, id, uint32(n))
		}
	default:
		retry = time.Duration(reset)
	}
	return makeVerdict(allowed, lim, int(max(0, int64(lim)-used)), time.Duration(reset), retry)
}

func (a *fixedWindow) idle(_ *shard[fixedRec], r *fixedRec, side []uint32, t int64) bool {
	t = max(t, r.last)
	if r.lim&ownLimit != 0 || a.sync != nil && a.sync.holds(side, t) {
		return false
	}
	return r.count == 0 || t-r.start >= a.window
}

func (a *fixedWindow) limitWord(r *fixedRec) *uint32 { return &r.lim }
func (a *fixedWindow) lastSeen(r *fixedRec) int64    { return r.last }
