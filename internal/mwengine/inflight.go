package mwengine

import "sync/atomic"

// inflightState is a key's count of requests in flight on its rule.
type inflightState struct{ n int32 }

// reclaimable reports whether the key has no request in flight.
func (s *inflightState) reclaimable(int64) bool { return s.n == 0 }

// inflight counts the requests each (rule, client key) has in flight
// (httplimit.Concurrency). Safe for concurrent use.
type inflight struct {
	t *ptable[inflightState, *inflightState]
	// refused counts requests over their limit, full those refused
	// because the table had no room for their key.
	refused, full atomic.Uint64
}

// InFlight is a request's slot in the table of requests in flight, taken
// by Decide when the matched rule has a Concurrency: the middleware gives
// it back with Engine.Release once the next handler has returned, however
// it returned. The zero value holds nothing.
type InFlight struct{ ref slotRef }

// Held reports whether f holds a slot.
func (f InFlight) Held() bool { return f.ref != 0 }

// acquire takes a slot of key, whose rule allows limit in flight. ok is
// false if the key has limit in flight already, or if the table has no
// room for it (full). It does not allocate for a key stored before.
func (f *inflight) acquire(key []byte, limit int) (ref slotRef, ok bool) {
	h := f.t.hash(key)
	s := f.t.shard(h)
	s.mu.Lock()
	i, stored := f.t.put(s, h, key, 0)
	if !stored {
		s.mu.Unlock()
		f.full.Add(1)
		return 0, false
	}
	v := &s.slots[i].val
	if int(v.n) >= limit {
		s.mu.Unlock()
		f.refused.Add(1)
		return 0, false
	}
	v.n++
	s.mu.Unlock()
	return makeRef(f.t.shardIndex(h), i), true
}

// release gives back the slot ref, which acquire returned.
func (f *inflight) release(ref slotRef) {
	si, i := ref.parts()
	s := &f.t.shards[si]
	s.mu.Lock()
	if v := &s.slots[i].val; v.n > 0 {
		v.n--
	}
	s.mu.Unlock()
}

// Release gives back the in-flight slot f, which Decide put in an
// Outcome (Outcome.InFlight); a zero f is a no-op. Call it exactly once
// per slot, after the next handler returned (deferred, so that a panic
// releases it too).
func (e *Engine) Release(f InFlight) {
	if f.ref != 0 {
		e.pol.inflight.release(f.ref)
	}
}

// InFlightCount returns the number of requests client key (as listed by
// Bans and TopDenied) has in flight on the rule named rule: 0 if none or
// no such rule is in force. Safe for concurrent use.
func (e *Engine) InFlightCount(rule, key string) int {
	k := policyKey(rule, key)
	t := e.pol.inflight.t
	h := t.hash(k)
	s := t.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := t.get(s, h, k); v != nil {
		return int(v.n)
	}
	return 0
}
