package shardlimit

import (
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"
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
// (the lesson of bigcache and fastcache), and a lookup of a key not in the
// CPU cache touches about two cache lines: one of the index, one of the
// record, which holds the key itself when it is short.
//
//	index  []uint64      open addressing, linear probing: each entry is
//	                     fingerprint<<32 | slot (0 empty, tombstone deleted)
//	recs   []slotRec[E]  per-key slot: the key (inline up to 14 bytes, else
//	                     its place in the arena), flags and the algorithm's
//	                     record
//	side   []uint32      per-key fixed-size extra state (stride words)
//	arena  []byte        keys longer than 14 bytes
//
// A lookup compares the stored key in full, so two keys with one hash never
// share a budget: they are two entries whose fingerprints match. The index
// doubles when 3/4 full (entries plus tombstones) and is rebuilt when
// tombstones or dead slots pile up.

// rehash computes a stored key's xxhash on the cold paths (eviction, index
// growth, rebuild); the hot path hashes with xxhash directly. Tests replace
// it to force collisions.
var rehash = xxhash.Sum64

// mix turns a key's xxhash into its table hash with the limiter's secret
// seed (the splitmix64 finalizer, a bijection), so that keys an attacker
// crafted offline to share a shard and a probe run do not share them here.
// Two keys collide after mixing only if their xxhashes collide.
func mix(h, seed uint64) uint64 {
	h ^= seed
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// hashOf returns the table hash of a stored key. Requires s.mu held.
func (s *shard[E]) hashOf(key []byte) uint64 {
	return mix(rehash(key), s.seed)
}

// Index entries and slot key lengths.
const (
	emptyEntry = 0
	tombstone  = math.MaxUint64
	inlineKey  = 14  // longest key kept in its slot
	longKey    = 255 // klen of a slot whose key is in the arena
	freeSlot   = 254 // klen of a free slot
	minIndex   = 16  // smallest index, entries
)

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

// slotRec is one key's slot: its key, flags and algorithm record. A key of
// up to inlineKey bytes is kept in key; a longer one in the arena, with key
// holding its offset (bytes 0-3) and length (bytes 4-7).
type slotRec[E any] struct {
	klen  uint8
	flags uint8 // stepPending
	key   [inlineKey]byte
	rec   E
}

// stepPending marks a key whose latest decision came with an instant more
// than stepTolerance before the key's latest one (see stepCheck).
const stepPending = 1

// stepCheck applies the clock rule of CASES.md C11 to a decision at t on
// the stored key in slot, whose latest instant is last, and returns the
// instant to decide at. An instant at most stepTolerance back is the jitter
// of concurrent callers: the algorithm decides at last (time stands still).
// One instant further back is taken as a stale caller (a request time read
// long before the decision), decided at last as well, durations measured
// from last. Only a second such instant in a row is taken as a clock that
// stepped back, and passed on for the algorithm to move the key's state back
// by the step, keeping its usage and the waits it had left. A stale caller
// therefore never moves a key's state, and a clock step costs its first
// caller nothing. Peeks (consume false) change no flag. Requires s.mu held.
func (s *shard[E]) stepCheck(slot uint32, last, t int64, consume bool) int64 {
	sr := &s.recs[slot]
	switch {
	case t >= last:
		if sr.flags != 0 && consume {
			sr.flags = 0
		}
	case last-t <= stepTolerance:
	case sr.flags&stepPending == 0:
		if consume {
			sr.flags |= stepPending
		}
		return last
	case consume:
		sr.flags = 0
	}
	return t
}

// shard is one lock stripe of the table. Fields below mu are guarded by mu;
// the atomic counters may be read without it.
type shard[E any] struct {
	mu        sync.Mutex
	defLimit  uint32 // the default limit for keys without their own
	index     []uint64
	indexBits uint8 // len(index) == 1<<indexBits
	used      int   // index entries that are not empty (live + tombstones)
	recs      []slotRec[E]
	side      []uint32
	arena     []byte
	free      []uint32
	live      int    // stored keys
	peak      int    // most keys stored since the last rebuild
	deadBytes int    // arena bytes of evicted keys
	rng       uint64 // xorshift state for sampling
	seed      uint64 // the table's hash seed (see mix)
	scratch   E      // a fresh record for peeks at missing keys
	scratchSd []uint32
	rings     ringPool // ring buffers of SlidingLog keys
	dirty     []uint32 // slots with sync state to collect (see shared.go)

	allowed     uint64 // under mu
	denied      uint64 // under mu
	evicted     atomic.Uint64
	keys        atomic.Int64
	syncDropped atomic.Uint64

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
	seed        uint64 // secret hash seed (see mix)
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
	t.seed = rand.Uint64()
	if cfg.MaxKeys > 0 {
		t.perShard = (cfg.MaxKeys + cfg.Shards - 1) / cfg.Shards
	}
	for i := range t.shards {
		s := &t.shards[i]
		s.defLimit = uint32(cfg.Limit)
		s.resetIndex(minIndex)
		s.rng = 0x9E3779B97F4A7C15 ^ uint64(i+1)*0xBF58476D1CE4E5B9
		s.scratchSd = make([]uint32, stride)
		s.rings.cur = -1
		s.seed = t.seed
	}
}

// hash returns the table hash of key.
func (t *table[E]) hash(key string) uint64 {
	return mix(xxhash.Sum64String(key), t.seed)
}

// hashBytes returns the table hash of key.
func (t *table[E]) hashBytes(key []byte) uint64 {
	return mix(xxhash.Sum64(key), t.seed)
}

func (t *table[E]) shardFor(h uint64) *shard[E] {
	return &t.shards[h&t.mask]
}

// rec returns the record of slot. Requires s.mu held.
func (s *shard[E]) rec(slot uint32) *E {
	return &s.recs[slot].rec
}

// stored reports whether slot holds a key. Requires s.mu held.
func (s *shard[E]) stored(slot int) bool {
	return s.recs[slot].klen != freeSlot
}

// keyOf returns the key of a stored slot, aliasing the shard's storage:
// valid only while s.mu is held and s is not rebuilt.
func (s *shard[E]) keyOf(slot uint32) []byte {
	r := &s.recs[slot]
	if r.klen <= inlineKey {
		return r.key[:r.klen]
	}
	off := binary.LittleEndian.Uint32(r.key[0:4])
	n := binary.LittleEndian.Uint32(r.key[4:8])
	return s.arena[off : off+n]
}

// fingerprint and home return the index fingerprint of hash h (bits 8-38,
// never 0) and the index position its probe starts at (the top bits; the
// low bits pick the shard).
func fingerprint(h uint64) uint64 { return (h>>8&0x7FFFFFFF | 1) << 32 }

func (s *shard[E]) home(h uint64) uint64 { return h >> (64 - s.indexBits) }

// find returns the slot of key, whose hash is h. Requires s.mu held.
func find[E any, K keyBytes](s *shard[E], h uint64, key K) (uint32, bool) {
	fp := fingerprint(h)
	mask := uint64(len(s.index) - 1)
	for i := s.home(h); ; i = (i + 1) & mask {
		e := s.index[i]
		if e == emptyEntry {
			return 0, false
		}
		if e&^math.MaxUint32 != fp || e == tombstone {
			continue
		}
		slot := uint32(e)
		r := &s.recs[slot]
		if len(key) <= inlineKey {
			if int(r.klen) == len(key) && string(r.key[:len(key)]) == string(key) {
				return slot, true
			}
		} else if r.klen == longKey && string(s.keyOf(slot)) == string(key) {
			return slot, true
		}
	}
}

// place adds an index entry for slot, whose key hashes to h, in the first
// empty or deleted position of its probe. Requires s.mu held and room.
func (s *shard[E]) place(h uint64, slot uint32) {
	mask := uint64(len(s.index) - 1)
	for i := s.home(h); ; i = (i + 1) & mask {
		if e := s.index[i]; e == emptyEntry || e == tombstone {
			if e == emptyEntry {
				s.used++
			}
			s.index[i] = fingerprint(h) | uint64(slot)
			return
		}
	}
}

// resetIndex replaces the index with an empty one of n entries (a power of
// two).
func (s *shard[E]) resetIndex(n int) {
	s.index = make([]uint64, n)
	s.indexBits = uint8(bits.TrailingZeros(uint(n)))
	s.used = 0
}

// reindex rebuilds the index at the smallest size that keeps it at most half
// full, dropping tombstones. Requires s.mu held.
func (s *shard[E]) reindex() {
	n := minIndex
	for n < 2*s.live {
		n *= 2
	}
	s.resetIndex(n)
	for slot := range s.recs {
		if s.stored(slot) {
			s.place(s.hashOf(s.keyOf(uint32(slot))), uint32(slot))
		}
	}
}

// insert stores key (hash h) in a free slot and returns the slot, whose
// record is zero. It evicts to make room when the shard is full, or fails
// with ErrTooManyKeys. Requires s.mu held and key not stored.
func insert[E any, K keyBytes](t *table[E], s *shard[E], h uint64, key K, now int64) (uint32, error) {
	if t.perShard > 0 && s.live >= t.perShard && !t.makeRoom(s, now) {
		return 0, ErrTooManyKeys
	}
	if 4*(s.used+1) > 3*len(s.index) {
		s.live++ // size the new index for the key being added
		s.reindex()
		s.live--
	}
	var slot uint32
	if n := len(s.free); n > 0 {
		slot = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		if len(s.recs) >= math.MaxUint32 {
			return 0, ErrTooManyKeys
		}
		slot = uint32(len(s.recs))
		s.recs = append(s.recs, slotRec[E]{})
		if t.stride > 0 {
			s.side = slices.Grow(s.side, t.stride)
			s.side = s.side[:len(s.side)+t.stride]
			clear(s.side[len(s.side)-t.stride:])
		}
	}
	r := &s.recs[slot]
	if len(key) <= inlineKey {
		r.klen = uint8(copy(r.key[:], key))
	} else {
		off := len(s.arena)
		if off > math.MaxUint32-len(key) {
			// The arena's offsets are 32-bit: 4 GiB of long keys in one shard.
			r.klen = freeSlot
			s.free = append(s.free, slot)
			return 0, ErrTooManyKeys
		}
		s.arena = append(s.arena, key...)
		r.klen = longKey
		binary.LittleEndian.PutUint32(r.key[0:4], uint32(off))
		binary.LittleEndian.PutUint32(r.key[4:8], uint32(len(key)))
	}
	s.place(h, slot)
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
	key := s.keyOf(slot)
	h := s.hashOf(key)
	mask := uint64(len(s.index) - 1)
	for i := s.home(h); ; i = (i + 1) & mask {
		e := s.index[i]
		if e == emptyEntry {
			break // not indexed: cannot happen while the index is kept whole
		}
		if e != tombstone && uint32(e) == slot {
			s.index[i] = tombstone
			break
		}
	}
	if s.recs[slot].klen == longKey {
		s.deadBytes += len(key)
	}
	if y := t.sync; y != nil {
		delta, _, _ := y.arrays(t.sideOf(s, slot))
		var lost uint64
		for _, d := range delta {
			lost += uint64(d)
		}
		s.syncDropped.Add(lost)
	}
	t.alg.release(s, s.rec(slot))
	s.recs[slot] = slotRec[E]{klen: freeSlot}
	clear(t.sideOf(s, slot))
	s.free = append(s.free, slot)
	s.live--
	s.keys.Add(-1)
	s.evicted.Add(1)
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
	victim, oldest := uint32(math.MaxUint32), int64(math.MaxInt64)
	for range sampleSize {
		s.rng ^= s.rng << 13
		s.rng ^= s.rng >> 7
		s.rng ^= s.rng << 17
		slot := uint32(s.rng % uint64(n))
		if !s.stored(int(slot)) {
			continue
		}
		rec := s.rec(slot)
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
	if t.policy == EvictLeastRecent && victim != math.MaxUint32 {
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
				if s.stored(slot) && t.alg.idle(s, s.rec(uint32(slot)), t.sideOf(s, uint32(slot)), now) {
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

// maybeRebuild rebuilds s when most of its slots or arena bytes are dead,
// and its index when tombstones fill much of it: Go slices never shrink.
// Requires s.mu held.
func (t *table[E]) maybeRebuild(s *shard[E]) {
	switch {
	case s.live == 0 && (len(s.recs) > 0 || len(s.index) > minIndex):
		s.resetIndex(minIndex)
		s.recs, s.side, s.arena, s.free, s.dirty = nil, nil, nil, nil, nil
		s.peak, s.deadBytes = 0, 0
	case s.peak >= 1024 && s.live*4 < s.peak,
		len(s.arena) >= 1<<16 && s.deadBytes*2 > len(s.arena):
		t.rebuild(s)
	case s.used-s.live > len(s.index)/4:
		s.reindex()
	}
	t.alg.compact(s)
}

// rebuild copies the live keys of s into fresh, tightly sized storage.
// Requires s.mu held.
func (t *table[E]) rebuild(s *shard[E]) {
	n := s.live
	recs := make([]slotRec[E], 0, n)
	side := make([]uint32, 0, n*t.stride)
	arena := make([]byte, 0, len(s.arena)-s.deadBytes)
	for slot := range s.recs {
		if !s.stored(slot) {
			continue
		}
		r := s.recs[slot]
		if r.klen == longKey {
			key := s.keyOf(uint32(slot))
			binary.LittleEndian.PutUint32(r.key[0:4], uint32(len(arena)))
			arena = append(arena, key...)
		}
		recs = append(recs, r)
		side = append(side, t.sideOf(s, uint32(slot))...)
	}
	s.recs, s.side, s.arena = recs, side, arena
	s.free = nil
	s.peak, s.deadBytes = n, 0
	s.reindex()
	if y := t.sync; y != nil {
		// Slots moved: queue again every key with uncollected sync state.
		s.dirty = s.dirty[:0]
		for slot := range s.recs {
			if t.sideOf(s, uint32(slot))[y.off]&syncTouched != 0 {
				s.dirty = append(s.dirty, uint32(slot))
			}
		}
	}
}
