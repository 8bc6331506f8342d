package shardlimit

import (
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// The key table.
//
// Keys are striped over a power-of-two number of shards by
// xxhash.Sum64(key) & mask; each shard has its own mutex. Inside a shard the
// layout is pointer-free, so the garbage collector never scans per-key data
// (the lesson of bigcache and fastcache):
//
//	index  map[uint64]uint64  xxhash(key) -> slot | arena offset << 32
//	recs   []E                per-key algorithm state, indexed by slot
//	side   []uint32           per-key fixed-size extra state (stride words)
//	keyOf  []uint32           slot -> arena offset of its key (freeSlot if free)
//	arena  []byte             keys, each as uvarint length then bytes
//
// A lookup compares the stored key bytes, so two keys with one hash never
// share a budget: the second is kept in spill, a map by the full key. Every
// hash in spill is also in index (eviction promotes a spilled key when the
// indexed one leaves), so a lookup that misses index misses the shard.

// rehash computes a stored key's hash on the cold paths (eviction,
// rebuild); the hot path hashes with xxhash directly. Tests replace it to
// force collisions.
var rehash = xxhash.Sum64

// freeSlot marks a free slot in keyOf.
const freeSlot = ^uint32(0)

// A record's lim word: bit 31 marks a key with a limit of its own, bit 30
// a key whose own limit is 0 (a ban), and the low 30 bits hold the positive
// limit the record's state is encoded for (GCRA's remainder, the log's ring
// capacity), or 0 if the key never had one. Keeping the encoding limit
// through a ban lets a lifted ban restore the key's usage exactly.
const (
	ownLimit  = uint32(1) << 31
	zeroLimit = uint32(1) << 30
	limitMask = zeroLimit - 1
)

// effectiveLimit returns the limit in force for a record with lim word w in
// a shard whose default limit is def.
func effectiveLimit(w, def uint32) uint32 {
	switch {
	case w&zeroLimit != 0:
		return 0
	case w&ownLimit != 0:
		return w & limitMask
	}
	return def
}

// sweepChunk is how many slots a sweep examines per lock hold.
const sweepChunk = 1024

// sampleSize is how many slots a full shard samples to find room.
const sampleSize = 16

// keyBytes is the type of keys: the string and []byte forms of the API.
type keyBytes interface{ ~string | ~[]byte }

// shard is one lock stripe of the table. Fields below mu are guarded by mu;
// the atomic counters may be read without it.
type shard[E any] struct {
	mu        sync.Mutex
	defLimit  uint32 // the default limit for keys without their own
	index     map[uint64]uint64
	spill     map[string]uint32
	recs      []E
	side      []uint32
	keyOf     []uint32
	arena     []byte
	free      []uint32
	live      int    // stored keys
	peak      int    // most keys stored since the last rebuild
	deadBytes int    // arena bytes of evicted keys
	rng       uint64 // xorshift state for sampling
	scratch   E      // a fresh record for peeks at missing keys
	scratchSd []uint32
	rings     ringPool // ring buffers of SlidingLog keys
	dirty     []uint32 // slots with sync state to collect (see shared.go)

	allowed     atomic.Uint64
	syncDropped atomic.Uint64
	denied      atomic.Uint64
	evicted     atomic.Uint64
	keys        atomic.Int64

	_ [64]byte // keeps the next shard's mutex off this shard's last line
}

// table is the sharded key table shared by the four algorithms.
type table[E any] struct {
	shards      []shard[E]
	mask        uint64
	stride      int // side words per slot
	perShard    int // most keys per shard, 0 for no cap
	policy      FullPolicy
	maxKeyBytes int
	alg         algorithm[E]
	sync        *syncLayout // nil unless built for package sync
}

func (t *table[E]) init(cfg Config, stride int, alg algorithm[E]) {
	t.shards = make([]shard[E], cfg.Shards)
	t.mask = uint64(cfg.Shards - 1)
	t.stride = stride
	t.policy = cfg.WhenFull
	t.maxKeyBytes = cfg.MaxKeyBytes
	t.alg = alg
	t.sync = alg.syncLayout()
	if cfg.MaxKeys > 0 {
		t.perShard = (cfg.MaxKeys + cfg.Shards - 1) / cfg.Shards
	}
	for i := range t.shards {
		s := &t.shards[i]
		s.defLimit = uint32(cfg.Limit)
		s.index = make(map[uint64]uint64)
		s.rng = 0x9E3779B97F4A7C15 ^ uint64(i+1)*0xBF58476D1CE4E5B9
		s.scratchSd = make([]uint32, stride)
	}
}

func (t *table[E]) shardFor(h uint64) *shard[E] {
	return &t.shards[h&t.mask]
}

// keyAt returns the key stored at arena offset off. The slice aliases the
// arena: valid only while s.mu is held and the arena is not rebuilt.
func (s *shard[E]) keyAt(off uint32) []byte {
	b := s.arena[off:]
	n, w := binary.Uvarint(b)
	return b[w : w+int(n)]
}

// find returns the slot of key, whose hash is h. Requires s.mu held.
func find[E any, K keyBytes](s *shard[E], h uint64, key K) (uint32, bool) {
	v, ok := s.index[h]
	if !ok {
		return 0, false
	}
	b := s.arena[uint32(v>>32):]
	var n, w uint64 = uint64(b[0]), 1
	if n >= 0x80 {
		var wi int
		n, wi = binary.Uvarint(b)
		w = uint64(wi)
	}
	if string(b[w:w+n]) == string(key) {
		return uint32(v), true
	}
	if len(s.spill) > 0 {
		slot, ok := s.spill[string(key)]
		return slot, ok
	}
	return 0, false
}

// insert stores key (hash h) in a free slot and returns the slot, whose
// record is zero. It evicts to make room when the shard is full, or fails
// with ErrTooManyKeys. Requires s.mu held.
func insert[E any, K keyBytes](t *table[E], s *shard[E], h uint64, key K, now int64) (uint32, error) {
	if t.perShard > 0 && s.live >= t.perShard && !t.makeRoom(s, now) {
		return 0, ErrTooManyKeys
	}
	off := len(s.arena)
	if off > math.MaxUint32-binary.MaxVarintLen64-len(key) {
		// The arena's offsets are 32-bit: 4 GiB of keys in one shard.
		return 0, ErrTooManyKeys
	}
	s.arena = binary.AppendUvarint(s.arena, uint64(len(key)))
	s.arena = append(s.arena, key...)
	var slot uint32
	if n := len(s.free); n > 0 {
		slot = s.free[n-1]
		s.free = s.free[:n-1]
		s.keyOf[slot] = uint32(off)
	} else {
		slot = uint32(len(s.recs))
		var zero E
		s.recs = append(s.recs, zero)
		s.keyOf = append(s.keyOf, uint32(off))
		if t.stride > 0 {
			s.side = slices.Grow(s.side, t.stride)
			s.side = s.side[:len(s.side)+t.stride]
			clear(s.side[len(s.side)-t.stride:])
		}
	}
	if _, taken := s.index[h]; taken {
		if s.spill == nil {
			s.spill = make(map[string]uint32)
		}
		s.spill[string(key)] = slot
	} else {
		s.index[h] = uint64(slot) | uint64(off)<<32
	}
	s.live++
	s.peak = max(s.peak, s.live)
	s.keys.Add(1)
	return slot, nil
}

// sideOf returns the side words of slot. Requires s.mu held.
func (t *table[E]) sideOf(s *shard[E], slot uint32) []uint32 {
	if t.stride == 0 {
		return nil
	}
	i := int(slot) * t.stride
	return s.side[i : i+t.stride : i+t.stride]
}

// evict removes the key in slot. Requires s.mu held.
func (t *table[E]) evict(s *shard[E], slot uint32) {
	off := s.keyOf[slot]
	key := s.keyAt(off)
	h := rehash(key)
	if v, ok := s.index[h]; ok && uint32(v) == slot {
		delete(s.index, h)
		// Keep the invariant: every spilled hash is also indexed.
		for k, sl := range s.spill {
			if rehash([]byte(k)) == h {
				s.index[h] = uint64(sl) | uint64(s.keyOf[sl])<<32
				delete(s.spill, k)
				break
			}
		}
	} else {
		delete(s.spill, string(key))
	}
	s.deadBytes += len(key) + uvarintLen(len(key))
	if y := t.sync; y != nil {
		delta, _, _ := y.arrays(t.sideOf(s, slot))
		var lost uint64
		for _, d := range delta {
			lost += uint64(d)
		}
		s.syncDropped.Add(lost)
	}
	t.alg.release(s, &s.recs[slot])
	var zero E
	s.recs[slot] = zero
	clear(t.sideOf(s, slot))
	s.keyOf[slot] = freeSlot
	s.free = append(s.free, slot)
	s.live--
	s.keys.Add(-1)
	s.evicted.Add(1)
}

func uvarintLen(n int) int {
	w := 1
	for n >= 0x80 {
		n >>= 7
		w++
	}
	return w
}

// makeRoom tries to free one slot in the full shard s: it samples up to
// sampleSize stored keys, evicts the first idle one, else (EvictLeastRecent)
// the least recently used of those without a limit of their own. Requires
// s.mu held.
func (t *table[E]) makeRoom(s *shard[E], now int64) bool {
	n := len(s.recs)
	if n == 0 {
		return false
	}
	victim, oldest := freeSlot, int64(math.MaxInt64)
	for range sampleSize {
		s.rng ^= s.rng << 13
		s.rng ^= s.rng >> 7
		s.rng ^= s.rng << 17
		slot := uint32(s.rng % uint64(n))
		if s.keyOf[slot] == freeSlot {
			continue
		}
		rec := &s.recs[slot]
		if t.alg.idle(s, rec, t.sideOf(s, slot), now) {
			t.evict(s, slot)
			return true
		}
		if t.alg.limitWord(rec)&ownLimit != 0 {
			continue
		}
		if last := t.alg.lastSeen(rec); last < oldest {
			victim, oldest = slot, last
		}
	}
	if t.policy == EvictLeastRecent && victim != freeSlot {
		t.evict(s, victim)
		return true
	}
	return false
}

// sweep evicts idle keys of every shard, one shard and sweepChunk slots at
// a time, rebuilding shards that are mostly empty. It returns how many keys
// it evicted, early if stop is closed.
func (t *table[E]) sweep(now int64, stop <-chan struct{}) int {
	evicted := 0
	for i := range t.shards {
		select {
		case <-stop:
			return evicted
		default:
		}
		s := &t.shards[i]
		for start := 0; ; start += sweepChunk {
			s.mu.Lock()
			end := min(start+sweepChunk, len(s.recs))
			for slot := start; slot < end; slot++ {
				if s.keyOf[slot] != freeSlot && t.alg.idle(s, &s.recs[slot], t.sideOf(s, uint32(slot)), now) {
					t.evict(s, uint32(slot))
					evicted++
				}
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

// maybeRebuild rebuilds s when most of its slots or arena bytes are dead:
// Go maps and slices never shrink. Requires s.mu held.
func (t *table[E]) maybeRebuild(s *shard[E]) {
	switch {
	case s.live == 0 && (len(s.recs) > 0 || len(s.arena) > 0):
		s.index = make(map[uint64]uint64)
		s.spill = nil
		s.recs, s.side, s.keyOf, s.arena, s.free = nil, nil, nil, nil, nil
		s.peak, s.deadBytes = 0, 0
	case s.peak >= 1024 && s.live*4 < s.peak,
		len(s.arena) >= 1<<16 && s.deadBytes*2 > len(s.arena):
		t.rebuild(s)
	}
	t.alg.compact(s)
}

// rebuild copies the live keys of s into fresh, tightly sized storage.
// Requires s.mu held.
func (t *table[E]) rebuild(s *shard[E]) {
	n := s.live
	recs := make([]E, 0, n)
	keyOf := make([]uint32, 0, n)
	side := make([]uint32, 0, n*t.stride)
	arena := make([]byte, 0, len(s.arena)-s.deadBytes)
	index := make(map[uint64]uint64, n)
	var spill map[string]uint32
	for slot := range s.recs {
		if s.keyOf[slot] == freeSlot {
			continue
		}
		key := s.keyAt(s.keyOf[slot])
		off := uint32(len(arena))
		arena = binary.AppendUvarint(arena, uint64(len(key)))
		arena = append(arena, key...)
		ns := uint32(len(recs))
		recs = append(recs, s.recs[slot])
		keyOf = append(keyOf, off)
		side = append(side, t.sideOf(s, uint32(slot))...)
		h := rehash(key)
		if _, taken := index[h]; taken {
			if spill == nil {
				spill = make(map[string]uint32)
			}
			spill[string(key)] = ns
		} else {
			index[h] = uint64(ns) | uint64(off)<<32
		}
	}
	s.recs, s.side, s.keyOf, s.arena, s.index, s.spill = recs, side, keyOf, arena, index, spill
	s.free = nil
	s.peak, s.deadBytes = n, 0
}
