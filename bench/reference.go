package bench

import "time"

// ExactLog is the reference of the accuracy report: an exact sliding window
// log, written to be obviously correct rather than fast. A request for key
// at t is admitted iff fewer than Limit requests of key were admitted at
// instants s with t-Window < s <= t, i.e. a request admitted at s counts
// for decisions at t with s <= t < s+Window. Instants must not decrease
// per key. Not safe for concurrent use.
type ExactLog struct {
	limit  int
	window int64
	keys   map[string][]int64 // admitted instants in the window, oldest first
}

// NewExactLog returns an ExactLog admitting limit requests per window.
func NewExactLog(limit int, window time.Duration) *ExactLog {
	return &ExactLog{limit: limit, window: int64(window), keys: make(map[string][]int64)}
}

// AllowAt reports whether a request for key may happen at now (Unix ns),
// recording it if so.
func (e *ExactLog) AllowAt(key string, now int64) bool {
	ok := e.Would(key, now)
	if ok {
		e.Record(key, now)
	}
	return ok
}

// Would reports whether a request for key at now (Unix ns) would be
// admitted, recording nothing.
func (e *ExactLog) Would(key string, now int64) bool {
	return e.Count(key, now) < e.limit
}

// Count returns how many recorded requests of key count at now (Unix ns):
// those at instants s with now-Window < s <= now.
func (e *ExactLog) Count(key string, now int64) int {
	log := e.keys[key]
	i := 0
	for i < len(log) && log[i] <= now-e.window {
		i++
	}
	if i == len(log) {
		delete(e.keys, key)
	} else if i > 0 {
		e.keys[key] = log[i:]
	}
	return len(log) - i
}

// Record records a request of key at now (Unix ns), whether or not the
// limit allows it: the accuracy report records what another limiter
// admitted, to judge its next decision by the exact count.
func (e *ExactLog) Record(key string, now int64) {
	e.keys[key] = append(e.keys[key], now)
}

// MaxInWindow returns the largest number of the sorted instants ts (Unix
// ns) that fall in one half-open interval [s, s+window).
func MaxInWindow(ts []int64, window time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i]-ts[j] >= int64(window) {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}
