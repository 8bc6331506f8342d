package core

import "math"

// Eviction: making room in a full shard (makeRoom), the janitor's sweep
// of idle keys, and how a key leaves the table (evict, closeGap).

// sweepChunk is how many slots a sweep examines per lock hold.
const sweepChunk = 1024

// What makeRoom's hand passes per call: the next sampleSize stored keys,
// or sampleReach positions if fewer keys lie in them.
const (
	sampleSize  = 16
	sampleReach = 64
)

// idleAt reports whether the key in slot is idle at now: its state then
// equals a fresh key's, and now is not before its latest instant (a key
// whose time runs ahead of now is not judged at an earlier instant).
// Requires s.mu held.
func (t *table[E]) idleAt(s *shard[E], slot uint32, now int64) bool {
	rec := s.rec(slot)
	return t.alg.lastSeen(rec) <= now && t.alg.idle(s, rec, slot, now)
}

// evictAt evicts the key in slot and raises s.floor to at: the key's next
// request is a new key's, decided no earlier than at. Every eviction
// passes an at not before the key's latest instant unless that lies ahead
// of the limiter's clock (then the clock's reading): a key's usage may be
// forgotten, its time is not. Requires s.mu held.
func (t *table[E]) evictAt(s *shard[E], slot uint32, at int64) {
	t.evict(s, slot)
	s.floor = max(s.floor, at)
}

// forget records that the usage of a key was forgotten while it may
// still count, latest being the algorithm's latest for it (see
// shard.forgot). Requires s.mu held.
func (s *shard[E]) forget(latest int64) {
	s.forgot = max(s.forgot, latest+1)
}

// evict removes the key in slot and closes the gap (keys after it in its
// probe run may move back, slot among them). Requires s.mu held.
func (t *table[E]) evict(s *shard[E], slot uint32) {
	r := &s.recs[slot]
	if r.klen == longKey {
		s.deadBytes += len(s.keyOf(slot))
	}
	side, extra := t.sideOf(s, slot)
	if y := t.sync; y != nil {
		s.syncDropped.Add(y.unsent(side))
	}
	if t.owner != nil {
		t.owner.release(s, &r.rec)
	}
	clear(side)
	clear(extra)
	if t.slab != nil {
		s.sideFree = append(s.sideFree, *t.slab.sideRef(&r.rec))
	}
	*r = slotRec[E]{}
	t.closeGap(s, slot)
	s.live--
	s.keys.Add(-1)
	s.evicted.Add(1)
}

// closeGap fills the empty position hole from the probe run after it:
// each key of the run that may sit at hole (its probe passes it) moves
// there, leaving its own position as the next hole, until the run ends
// (Knuth's deletion for linear probing, Algorithm R): no tombstone is
// left. Requires s.mu held.
func (t *table[E]) closeGap(s *shard[E], hole uint32) {
	n := uint32(len(s.recs))
	for j := hole + 1; ; j++ {
		if j == n {
			j = 0
		}
		r := &s.recs[j]
		if r.klen == emptySlot {
			return
		}
		home := s.home(s.hashOf(keyIn(r, s.arena)))
		if (hole+n-home)%n < (j+n-home)%n {
			t.move(s, j, hole)
			hole = j
		}
	}
}

// move moves the key in position from to the empty position to, with its
// side words and extras where they are per position. Requires s.mu held.
func (t *table[E]) move(s *shard[E], from, to uint32) {
	s.recs[to] = s.recs[from]
	s.recs[from] = slotRec[E]{}
	if !s.slab {
		fs, fe := s.keyState(from, 0)
		ts, te := s.keyState(to, 0)
		copy(ts, fs)
		copy(te, fe)
		clear(fs)
		clear(fe)
	}
	if y := t.sync; y != nil {
		if side, _ := t.sideOf(s, to); y.touched(side) {
			s.dirty = append(s.dirty, to)
		}
	}
}

// makeRoom tries to free one position in the full shard s. Its hand
// (s.hand) reads the table in order from where the last call left it and
// passes the next sampleSize stored keys (or sampleReach positions, if
// fewer keys lie in them): it evicts the first of them that is idle, else
// (EvictLeastRecent) the least recently used of those without a limit of
// their own. Requires s.mu held.
//
// The work per call is bounded whatever the table's size: at most
// sampleReach positions, read in order (a few cache lines after the
// first), and sampleSize keys judged. A full shard's table holds keys in
// about 5/8 of its positions or more (it is never longer than
// tableLen(perShard)), so sampleSize keys lie within about 26 positions,
// and sampleReach only cuts short a call where keys are unusually sparse.
// A shard capped at sampleSize keys or fewer has a table of
// tableLen(sampleSize) = 26 positions or fewer, which every call reads
// whole, judging every key.
//
// What the bound costs: a call judges sampleSize keys, not all, so under
// RejectNewKeys an idle key elsewhere in the table does not save this new
// key from ErrTooManyKeys. But the hand passes every stored key within
// ceil(live/sampleSize) + ceil(len/sampleReach) calls, whatever they find:
// a key that stays idle that long is found (unless a rebuild moved it
// behind the hand meanwhile), and under EvictLeastRecent every key is
// judged once per turn.
//
// The hand passes sampleSize keys per call even when the first is idle.
// A hand that stopped after its victim would evict at its front, one key
// per call where keys are idle, while new keys land anywhere: the
// positions ahead of it would fill up and probes there grow long
// (measured on a million keys: 50-100 us per new key). Nor does
// it pass a fixed number of positions: it would then take one key per
// span however few the span holds, and sparse spans drift empty while
// dense ones crowd. Passing sampleSize keys, it takes at most one key in
// sampleSize wherever it is, as new keys arrive everywhere, and the load
// stays even.
func (t *table[E]) makeRoom(s *shard[E], now int64) bool {
	// Keys are judged at the request's instant, but no later than the
	// limiter's clock: one request's far-future instant must not make the
	// others idle and move the shard's floor.
	clock := t.clock()
	now = min(now, clock)
	n := uint32(len(s.recs))
	i := s.hand
	if i >= n {
		i = 0 // the table shrank
	}
	var keys [sampleSize]uint32
	k := 0
	for range min(n, sampleReach) {
		s.examined++
		if s.stored(int(i)) {
			keys[k] = i
			k++
		}
		if i++; i == n {
			i = 0
		}
		if k == sampleSize {
			break
		}
	}
	s.hand = i
	victim, oldest := uint32(math.MaxUint32), int64(math.MaxInt64)
	for j, slot := range keys[:k] {
		if j == 1 {
			// The first key was not idle: likely, others are not either.
			t.prefetchState(s, keys[1:k], now)
		}
		if t.idleAt(s, slot, now) {
			// Idle: its state is a fresh key's, so a refund of its
			// decisions finds nothing in the new key's either.
			t.evictAt(s, slot, now)
			return true
		}
		rec := s.rec(slot)
		if *t.alg.limitWord(rec)&ownLimit == 0 {
			if last := t.alg.lastSeen(rec); last < oldest {
				victim, oldest = slot, last
			}
		}
	}
	if t.policy == EvictLeastRecent && victim != math.MaxUint32 {
		// Not idle: its usage is forgotten, its time is not. Its next
		// request is a new key's, decided no earlier than its latest
		// instant (capped by the clock, so that one key's far-future
		// instant cannot move the floor of the others) and now.
		s.forget(t.alg.latest(s, s.rec(victim), victim))
		t.evictAt(s, victim, max(now, min(oldest, clock)))
		return true
	}
	return false
}

// prefetchState reads, for every key in slots, the memory outside its
// record that makeRoom's judging it idle at now will read (by default a
// word at each end of its side words and the lim word of its extra
// records; a stateReader says which), before makeRoom judges them: the
// reads do not depend on one another, so their cache misses overlap,
// where judging the keys one by one would wait for each in turn.
// Requires s.mu held.
func (t *table[E]) prefetchState(s *shard[E], slots []uint32, now int64) {
	st, _ := t.alg.(stateReader[E])
	if st == nil && s.stride == 0 && s.extras == 0 {
		return
	}
	var sum uint32
	for _, slot := range slots {
		if st != nil {
			sum += st.readState(s, s.rec(slot), slot, now)
			continue
		}
		side, extra := t.sideOf(s, slot)
		if len(side) > 0 {
			sum += side[0] + side[len(side)-1]
		}
		for x := range extra {
			sum += *t.alg.limitWord(&extra[x])
		}
	}
	s.sink = sum
}

// stateReader is implemented by algorithms that know which memory outside
// a key's record their idle reads: readState reads it for idle(now), for
// prefetchState. Requires s.mu held.
type stateReader[E any] interface {
	readState(s *shard[E], rec *E, slot uint32, now int64) uint32
}

// sweep evicts idle keys of every shard, one shard and sweepChunk slots at
// a time, rebuilding shards that are mostly empty. It returns how many keys
// it evicted, early (between two chunks) if stop is closed. A key evicted
// may pull the keys after it back, into its own position among others: the
// sweep looks at that position again. A table that grows between two
// chunks moves keys: the sweep may then skip some, which the next one
// finds.
func (t *table[E]) sweep(now int64, stop <-chan struct{}) int {
	evicted := 0
	for i := range t.shards {
		s := &t.shards[i]
		if s.keys.Load() == 0 {
			continue // nothing to evict, and no lock taken: idle limiters cost little
		}
		for start := 0; ; start += sweepChunk {
			select {
			case <-stop:
				return evicted
			default:
			}
			s.mu.Lock()
			end := min(start+sweepChunk, len(s.recs))
			for slot := start; slot < end; {
				if s.stored(slot) && t.idleAt(s, uint32(slot), now) {
					t.evictAt(s, uint32(slot), now)
					evicted++
					continue // another key may have moved into slot
				}
				slot++
			}
			done := end >= len(s.recs)
			if done {
				t.maybeRebuild(s)
			}
			s.mu.Unlock()
			if done {
				break
			}
		}
	}
	return evicted
}
