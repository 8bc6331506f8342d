package outbound

import (
	"container/heap"
	"sync"
	"sync/atomic"
)

// holdTable is the Pacer's holds: key -> the Unix nanosecond until which
// the key is held, at most max keys. The holds form a min-heap by their
// end (holdQueue), so the hold that ends soonest is at the top: a full
// table removes it, and the expired holds, in O(log max) each. Expired
// holds are also removed by the lookup that finds them; there is no
// goroutine. Safe for concurrent use.
type holdTable struct {
	live atomic.Int64  // len(q.holds), read without the lock by the fast path
	sets atomic.Uint64 // calls of set: unchanged, no hold began or grew
	mu   sync.RWMutex
	q    holdQueue // requires mu
	max  int
}

func newHoldTable(max int) *holdTable {
	return &holdTable{q: holdQueue{pos: make(map[string]int)}, max: max}
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
	i, ok := h.q.pos[key]
	if ok {
		until = h.q.holds[i].until
	}
	h.mu.RUnlock()
	if !ok {
		return 0, 0
	}
	at = now()
	if until > at {
		return until, at
	}
	h.expire(key, at)
	return 0, at
}

// expire removes key's hold if it ended by now.
func (h *holdTable) expire(key string, now int64) {
	h.mu.Lock()
	if i, ok := h.q.pos[key]; ok && h.q.holds[i].until <= now {
		heap.Remove(&h.q, i)
		h.live.Store(int64(h.q.Len()))
	}
	h.mu.Unlock()
}

// set holds key until until (Unix nanoseconds), or keeps its hold if that
// ends later: a hold is never shortened. A new key in a full table first
// removes the holds expired at now or, if none is, the hold that ends
// soonest (it costs the least time), so the table never holds more than
// max keys: O(log max) per hold removed, each removed once.
//
// sets counts the call only once the hold is stored and live counts it:
// a waiter that reads the new count must then find the hold (counted
// first, a waiter could read the new count, find live still 0, and
// later take the unchanged count as "no hold began" and go out during
// the hold).
func (h *holdTable) set(key string, until, now int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i, ok := h.q.pos[key]; ok {
		if until > h.q.holds[i].until {
			h.q.holds[i].until = until
			heap.Fix(&h.q, i)
		}
	} else {
		if h.q.Len() >= h.max {
			h.makeRoom(now)
		}
		h.q.add(hold{key: key, until: until})
		h.live.Store(int64(h.q.Len()))
	}
	h.sets.Add(1)
}

// makeRoom removes the holds expired at now, or if none is, the hold that
// ends soonest: the top of the heap either way, then the expired holds
// under it. Requires h.mu held and a table that is not empty.
func (h *holdTable) makeRoom(now int64) {
	heap.Pop(&h.q)
	for h.q.Len() > 0 && h.q.holds[0].until <= now {
		heap.Pop(&h.q)
	}
}

// len returns the number of holds stored (expired ones not yet removed
// included).
func (h *holdTable) len() int {
	return int(h.live.Load())
}

// hold is one key's hold: held until until, Unix nanoseconds.
type hold struct {
	key   string
	until int64
}

// holdQueue is a min-heap of holds by until (container/heap), indexed by
// position: pos[key] is the index of key's hold in holds, kept by Swap,
// so a key's hold is found, changed (heap.Fix) or removed (heap.Remove)
// in O(log n). Not safe for concurrent use (holdTable's mu guards it).
type holdQueue struct {
	pos   map[string]int
	holds []hold
}

func (q *holdQueue) Len() int           { return len(q.holds) }
func (q *holdQueue) Less(i, j int) bool { return q.holds[i].until < q.holds[j].until }

func (q *holdQueue) Swap(i, j int) {
	q.holds[i], q.holds[j] = q.holds[j], q.holds[i]
	q.pos[q.holds[i].key] = i
	q.pos[q.holds[j].key] = j
}

// Push appends x, a hold, as heap.Interface requires; the table calls
// add instead, which does not box the hold in an any.
func (q *holdQueue) Push(x any) {
	if h, ok := x.(hold); ok {
		q.pos[h.key] = len(q.holds)
		q.holds = append(q.holds, h)
	}
}

// Pop removes the last hold for heap.Pop and heap.Remove, and returns
// nil: callers that need the hold read it first.
func (q *holdQueue) Pop() any {
	last := len(q.holds) - 1
	delete(q.pos, q.holds[last].key)
	q.holds[last] = hold{} // drop the key's string for the collector
	q.holds = q.holds[:last]
	return nil
}

// add pushes h onto the heap (heap.Push without boxing h in an any).
func (q *holdQueue) add(h hold) {
	q.pos[h.key] = len(q.holds)
	q.holds = append(q.holds, h)
	heap.Fix(q, len(q.holds)-1)
}
