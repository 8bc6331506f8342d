package outbound

import (
	"sync"
	"sync/atomic"
)

// holdTable is the Pacer's holds: key -> the Unix nanosecond until which
// the key is held, at most max keys. Expired holds are removed by the
// lookup that finds them and by an insert into a full table; there is no
// goroutine. Safe for concurrent use.
type holdTable struct {
	live atomic.Int64  // len(m), read without the lock by the fast path
	sets atomic.Uint64 // calls of set: unchanged, no hold began or grew
	mu   sync.RWMutex
	m    map[string]int64 // requires mu
	max  int
}

func newHoldTable(max int) *holdTable {
	return &holdTable{m: make(map[string]int64), max: max}
}

// until returns the instant (Unix nanoseconds) until which key is held
// after now() and now()'s reading, or 0 if it is not held then. It reads
// now only if key has a hold stored, and with no holds at all it takes
// no lock either.
func (h *holdTable) until(key string, now func() int64) (until, at int64) {
	if h.live.Load() == 0 {
		return 0, 0
	}
	h.mu.RLock()
	u, ok := h.m[key]
	h.mu.RUnlock()
	if !ok {
		return 0, 0
	}
	at = now()
	if u > at {
		return u, at
	}
	h.expire(key, at)
	return 0, at
}

// expire removes key's hold if it ended by now.
func (h *holdTable) expire(key string, now int64) {
	h.mu.Lock()
	if u, ok := h.m[key]; ok && u <= now {
		delete(h.m, key)
		h.live.Store(int64(len(h.m)))
	}
	h.mu.Unlock()
}

// set holds key until until (Unix nanoseconds), or keeps its hold if that
// ends later: a hold is never shortened. A new key in a full table first
// removes the holds expired at now and then, if none was, the hold that
// ends soonest (it costs the least time), so the table never holds more
// than max keys. That scan is O(max) and runs only when the table is full.
//
// sets counts the call only once the hold is stored and live counts it:
// a waiter that reads the new count must then find the hold (counted
// first, a waiter could read the new count, find live still 0, and
// later take the unchanged count as "no hold began" and go out during
// the hold).
func (h *holdTable) set(key string, until, now int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u, ok := h.m[key]; ok {
		h.m[key] = max(u, until)
	} else {
		if len(h.m) >= h.max {
			h.makeRoom(now)
		}
		h.m[key] = until
		h.live.Store(int64(len(h.m)))
	}
	h.sets.Add(1)
}

// makeRoom removes the holds expired at now, or if none is, the hold that
// ends soonest. Requires h.mu held.
func (h *holdTable) makeRoom(now int64) {
	var soonest string
	first := true
	var end int64
	for k, u := range h.m {
		switch {
		case u <= now:
			delete(h.m, k)
		case first || u < end:
			soonest, end, first = k, u, false
		}
	}
	if len(h.m) >= h.max && !first {
		delete(h.m, soonest)
	}
}

// len returns the number of holds stored (expired ones not yet removed
// included).
func (h *holdTable) len() int {
	return int(h.live.Load())
}
