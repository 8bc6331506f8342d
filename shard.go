package shardlimit

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"
)

// The key table.
//
// Keys are striped over a power-of-two number of shards by the low bits of
// their table hash, XXH3 (xxHash's 64-bit algorithm, github.com/zeebo/xxh3)
// seeded with a secret random per limiter, so keys an attacker crafted
// offline to share a shard and a probe run do not share them here; each
// shard has its own mutex. XXH3 hashes a short key in 7.5 ns of latency
// where XXH64 (cespare/xxhash) plus a seed mix took 17. Inside a shard the
// layout is pointer-free, so the garbage collector never scans per-key data
// (the lesson of bigcache and fastcache), and the records live in the hash
// table itself: a lookup of a short key not in the CPU cache costs one
// random cache line (two when a 40-byte record straddles lines, plus the
// next ones when it probes on), not an index line and then a record line.
//
//	recs   []slotRec[E]  open addressing, linear probing: each position
//	                     holds a key (inline up to 14 bytes, else its
//	                     place in the arena), an 8-bit tag of its hash
//	                     and the algorithm's record; or is empty, or a
//	                     tombstone
//	side   []uint32      per-key fixed-size extra state (stride words): for
//	                     the sliding counter and log a dense slab in the
//	                     order keys arrived, each record naming its entry
//	                     (so a record that moves leaves its words in place,
//	                     and keys seen in arrival order read them in
//	                     order); for the others one entry per position
//	arena  []byte        keys longer than 14 bytes
//
// A position's home is the hash's top 32 bits scaled to the table's length
// (not masked), so a table can have any length: it grows when live keys and
// tombstones would fill 13/16 of it, to 8/5 of its live keys, and is
// rebuilt at that size when tombstones or dead arena bytes pile up or most
// of its keys left. Records therefore move when the table grows: a slot
// (position) is valid only while the shard's lock is held. A lookup
// compares the stored key in full, so two keys with one hash never share a
// budget.

// rehash computes a stored key's table hash on the cold paths (eviction,
// table growth, rebuild); the hot path calls xxh3 directly. Tests replace it
// to force collisions.
var rehash = xxh3.HashSeed

// hashOf returns the table hash of a stored key. Requires s.mu held.
func (s *shard[E]) hashOf(key []byte) uint64 {
	return rehash(key, s.seed)
}

// Table positions: the klen of an empty or deleted one, and sizes.
const (
	emptySlot = 0   // klen of a position unused since the table was built (keys are never empty)
	deadSlot  = 254 // klen of a position whose key was removed (a tombstone)
	inlineKey = 14  // longest key kept in its position
	longKey   = 255 // klen of a position whose key is in the arena
	minTable  = 16  // smallest table, positions
)

// tableLen returns the table length for n live keys: 8/5 of them, so a
// rebuilt table is 5/8 full; it grows at 13/16.
func tableLen(n int) int { return max(minTable, n*8/5+1) }

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

// slotRec is one table position: a key, its tag and its algorithm record.
// A key of up to inlineKey bytes is kept in key; a longer one in the arena,
// with key holding its offset (bytes 0-3) and length (bytes 4-7).
type slotRec[E any] struct {
	klen uint8           // key length, longKey, emptySlot or deadSlot
	tag  uint8           // the key's tag, see tagOf
	key  [inlineKey]byte //
	rec  E
}

// tagOf returns the tag of hash h as kept in slotRec.tag: hash bits 16-23
// (the shard takes at most bits 0-15, a position's home bits 32-63), so a
// probe compares a key's bytes only for about one position in 256 that is
// not the key's.
func tagOf(h uint64) uint8 { return uint8(h >> 16) }

// shard is one lock stripe of the table. Every field but the atomic
// counters is guarded by mu, those above it included.
type shard[E any] struct {
	// What every decision reads and a decision on a stored key does not
	// write (written when the table grows or is rebuilt, a new key takes a
	// slab entry or arena bytes, the default limit changes, or GCRA
	// decides for a limit other than the last one it cached), on cache
	// lines of their own, a pad away from mu and the counters that every
	// decision writes: another core's decision in this shard then leaves
	// these lines in this core's cache, so the lookup's address is known,
	// and its cache miss under way, while mu's line is still on its way
	// from the other core.
	recs     []slotRec[E] // the table, at least minTable positions
	side     []uint32     // stride words per position, or per slab entry (table.byRef)
	defLimit uint32       // the default limit for keys without their own
	emitLim  uint32       // the limit emitQ and emitR are for (see emission)
	emitQ    uint64
	emitR    uint64
	arena    []byte
	seed     uint64   // the table's hash seed
	_        [64]byte // whatever the shard's alignment

	mu        sync.Mutex
	allowed   uint64   // under mu
	denied    uint64   // under mu
	refused   uint64   // under mu: new keys a full shard could not store
	sideFree  []uint32 // free slab entries (table.byRef)
	used      int      // positions that are not empty (live + tombstones)
	live      int      // stored keys
	peak      int      // most keys stored since the table was built
	deadBytes int      // arena bytes of evicted keys
	rng       uint64   // xorshift state for sampling
	scratch   E        // a fresh record for peeks at missing keys
	scratchSd []uint32
	rings     ringPool // ring buffers of SlidingLog keys
	dirty     []uint32 // slots with sync state to collect (see shared.go)
	// floor is the latest instant at which a key of this shard was
	// evicted, or that key's latest instant if later: per key, time never
	// goes back, and an evicted key's latest instant is forgotten with it,
	// so every new key decides no earlier than floor. A request read before
	// its key was evicted (idle by then) is decided when the key was idle,
	// not in a window the key had already spent.
	floor int64

	evicted     atomic.Uint64
	keys        atomic.Int64
	syncDropped atomic.Uint64

	_ [64]byte // keeps the next shard's first lines off this shard's last
}

// table is the sharded key table shared by the four algorithms.
type table[E any] struct {
	shards      []shard[E]
	mask        uint64
	stride      int // side words per key
	perShard    int // most keys per shard, 0 for no cap
	policy      FullPolicy
	maxKeyBytes int
	seed        uint64 // secret hash seed, random per limiter
	alg         algorithm[E]
	slab        slabUser[E]     // non-nil if side words are slab entries the records name
	owner       storageOwner[E] // non-nil if the algorithm keeps storage outside the records
	sync        *syncLayout     // nil unless built for package sync
}

// init sets up t for alg with stride side words per key (sync state
// included, as laid out by y, nil unless shared).
func (t *table[E]) init(cfg Config, stride int, alg algorithm[E], y *syncLayout) {
	t.shards = make([]shard[E], cfg.Shards)
	t.mask = uint64(cfg.Shards - 1)
	t.stride = stride
	t.policy = cfg.WhenFull
	t.maxKeyBytes = cfg.MaxKeyBytes
	t.alg = alg
	if su, ok := alg.(slabUser[E]); ok && stride > 0 {
		t.slab = su
	}
	t.owner, _ = alg.(storageOwner[E])
	t.sync = y
	t.seed = rand.Uint64()
	if cfg.MaxKeys > 0 {
		t.perShard = (cfg.MaxKeys + cfg.Shards - 1) / cfg.Shards
	}
	for i := range t.shards {
		s := &t.shards[i]
		s.defLimit = uint32(cfg.Limit)
		t.resetTable(s)
		s.rng = 0x9E3779B97F4A7C15 ^ uint64(i+1)*0xBF58476D1CE4E5B9
		s.scratchSd = make([]uint32, stride)
		s.rings.cur = -1
		s.seed = t.seed
	}
}

// hash returns the table hash of key.
func (t *table[E]) hash(key string) uint64 {
	return xxh3.HashStringSeed(key, t.seed)
}

// hashBytes returns the table hash of key.
func (t *table[E]) hashBytes(key []byte) uint64 {
	return xxh3.HashSeed(key, t.seed)
}

func (t *table[E]) shardFor(h uint64) *shard[E] {
	return &t.shards[h&t.mask]
}

// emission returns w/lim and w%lim for lim > 0, GCRA's emission interval
// for a cost of 1 in whole and 1/lim nanoseconds, cached for the last limit
// asked: a 128-bit division less per decision. Requires s.mu held.
func (s *shard[E]) emission(lim uint32, w int64) (uint64, uint64) {
	if lim != s.emitLim {
		s.emitLim, s.emitQ, s.emitR = lim, uint64(w)/uint64(lim), uint64(w)%uint64(lim)
	}
	return s.emitQ, s.emitR
}

// rec returns the record of slot. Requires s.mu held.
func (s *shard[E]) rec(slot uint32) *E {
	return &s.recs[slot].rec
}

// stored reports whether slot holds a key. Requires s.mu held.
func (s *shard[E]) stored(slot int) bool {
	k := s.recs[slot].klen
	return k != emptySlot && k != deadSlot
}

// keyIn returns the key of the stored position r, whose long keys are in
// arena, aliasing the storage.
func keyIn[E any](r *slotRec[E], arena []byte) []byte {
	if r.klen <= inlineKey {
		return r.key[:r.klen]
	}
	off := binary.LittleEndian.Uint32(r.key[0:4])
	n := binary.LittleEndian.Uint32(r.key[4:8])
	return arena[off : off+n]
}

// keyOf returns the key of a stored slot, aliasing the shard's storage:
// valid only while s.mu is held and the table does not change.
func (s *shard[E]) keyOf(slot uint32) []byte {
	return keyIn(&s.recs[slot], s.arena)
}

// home returns the position the probe for hash h starts at: its top 32
// bits scaled to the table's length (Lemire's multiply-shift reduction).
func (s *shard[E]) home(h uint64) uint32 {
	return uint32((h >> 32) * uint64(len(s.recs)) >> 32)
}

// find returns the slot of key, whose hash is h. Requires s.mu held.
func find[E any, K keyBytes](s *shard[E], h uint64, key K) (uint32, bool) {
	recs := s.recs
	tag := tagOf(h)
	for i := s.home(h); ; {
		r := &recs[i]
		if r.klen == emptySlot {
			return 0, false
		}
		if r.tag == tag {
			if len(key) <= inlineKey {
				if int(r.klen) == len(key) && string(r.key[:len(key)]) == string(key) {
					return i, true
				}
			} else if r.klen == longKey && string(keyIn(r, s.arena)) == string(key) {
				return i, true
			}
		}
		if i++; int(i) == len(recs) {
			i = 0
		}
	}
}

// place returns the first empty or deleted position of the probe for hash
// h, counting it as used. Requires s.mu held and a table under 13/16 used.
func (s *shard[E]) place(h uint64) uint32 {
	i := s.home(h)
	for {
		switch s.recs[i].klen {
		case emptySlot:
			s.used++
			return i
		case deadSlot:
			return i
		}
		if i++; int(i) == len(s.recs) {
			i = 0
		}
	}
}

// resetTable replaces the table of s with an empty one of minTable
// positions.
func (t *table[E]) resetTable(s *shard[E]) {
	s.recs = make([]slotRec[E], minTable)
	s.side, s.sideFree = nil, nil
	if t.slab == nil {
		s.side = make([]uint32, minTable*t.stride)
	}
	s.arena = nil
	s.used, s.peak, s.deadBytes = 0, s.live, 0
}

// insert stores key (hash h) in the table and returns its slot, whose
// record is zero. It evicts to make room when the shard is full, or fails
// with ErrTooManyKeys. The table may grow, moving other keys' slots.
// Requires s.mu held and key not stored.
func insert[E any, K keyBytes](t *table[E], s *shard[E], h uint64, key K, now int64) (uint32, error) {
	if t.perShard > 0 && s.live >= t.perShard && !t.makeRoom(s, now) {
		return 0, ErrTooManyKeys
	}
	off := len(s.arena)
	if len(key) > inlineKey && uint64(off)+uint64(len(key)) > math.MaxUint32 {
		// The arena's offsets are 32-bit: 4 GiB of long keys in one shard.
		return 0, ErrTooManyKeys
	}
	if 16*(s.used+1) > 13*len(s.recs) {
		t.rehash(s, tableLen(s.live+1))
		off = len(s.arena)
	}
	slot := s.place(h)
	r := &s.recs[slot]
	*r = slotRec[E]{tag: tagOf(h)}
	if len(key) <= inlineKey {
		r.klen = uint8(copy(r.key[:], key))
	} else {
		s.arena = append(s.arena, key...)
		r.klen = longKey
		binary.LittleEndian.PutUint32(r.key[0:4], uint32(off))
		binary.LittleEndian.PutUint32(r.key[4:8], uint32(len(key)))
	}
	if t.slab != nil {
		*t.slab.sideRef(&r.rec) = t.allocSide(s)
	}
	s.live++
	s.peak = max(s.peak, s.live)
	s.keys.Add(1)
	return slot, nil
}

// allocSide returns a slab entry of zero side words for a new key: the
// last one freed, else a new one at the slab's end. Requires s.mu held.
func (t *table[E]) allocSide(s *shard[E]) uint32 {
	if n := len(s.sideFree); n > 0 {
		ref := s.sideFree[n-1]
		s.sideFree = s.sideFree[:n-1]
		return ref
	}
	ref := uint32(len(s.side) / t.stride)
	s.side = append(s.side, make([]uint32, t.stride)...)
	return ref
}

// sideOf returns the side words of slot, nil if the algorithm keeps none.
// Requires s.mu held.
func (t *table[E]) sideOf(s *shard[E], slot uint32) []uint32 {
	if t.slab != nil {
		return s.entry(*t.slab.sideRef(&s.recs[slot].rec), t.stride)
	}
	return t.posSide(s, slot)
}

// posSide returns the side words kept per position for slot: nil if the
// algorithm keeps none, or keeps them in slab entries its records name
// (algorithm.decide then finds them itself). Requires s.mu held.
func (t *table[E]) posSide(s *shard[E], slot uint32) []uint32 {
	if t.stride == 0 || t.slab != nil {
		return nil
	}
	i := int(slot) * t.stride
	return s.side[i : i+t.stride : i+t.stride]
}

// entry returns slab entry ref of stride words. Requires s.mu held.
func (s *shard[E]) entry(ref uint32, stride int) []uint32 {
	i := int(ref) * stride
	return s.side[i : i+stride : i+stride]
}

// evict removes the key in slot, judged idle at now (or evicted to make room
// at now), leaving a tombstone, or an empty position where the probe would
// stop anyway (the next position is empty), which empties the tombstones
// before it too. It raises s.floor to the key's latest instant and now.
// Requires s.mu held.
func (t *table[E]) evict(s *shard[E], slot uint32, now int64) {
	r := &s.recs[slot]
	s.floor = max(s.floor, now, t.alg.lastSeen(&r.rec))
	if r.klen == longKey {
		s.deadBytes += len(s.keyOf(slot))
	}
	side := t.sideOf(s, slot)
	if y := t.sync; y != nil {
		delta, _, _ := y.arrays(side)
		var lost uint64
		for _, d := range delta {
			lost += uint64(d)
		}
		s.syncDropped.Add(lost)
	}
	if t.owner != nil {
		t.owner.release(s, &r.rec)
	}
	clear(side)
	if t.slab != nil {
		s.sideFree = append(s.sideFree, *t.slab.sideRef(&r.rec))
	}
	*r = slotRec[E]{klen: deadSlot}
	n := uint32(len(s.recs))
	if s.recs[(slot+1)%n].klen == emptySlot {
		for i := slot; s.recs[i].klen == deadSlot; i = (i + n - 1) % n {
			s.recs[i].klen = emptySlot
			s.used--
		}
	}
	s.live--
	s.keys.Add(-1)
	s.evicted.Add(1)
}

// makeRoom tries to free one position in the full shard s: among its keys
// (all of them when it holds at most sampleSize, else sampleSize drawn
// uniformly: random positions, empty ones drawn again) it evicts the first
// idle one, else (EvictLeastRecent) the least recently used of those
// without a limit of their own. Requires s.mu held.
func (t *table[E]) makeRoom(s *shard[E], now int64) bool {
	victim, oldest := uint32(math.MaxUint32), int64(math.MaxInt64)
	// consider evicts slot if it is idle, else keeps it as the victim if it
	// is the least recently used so far.
	consider := func(slot uint32) bool {
		rec := s.rec(slot)
		if t.alg.idle(s, rec, t.sideOf(s, slot), now) {
			t.evict(s, slot, now)
			return true
		}
		if *t.alg.limitWord(rec)&ownLimit == 0 {
			if last := t.alg.lastSeen(rec); last < oldest {
				victim, oldest = slot, last
			}
		}
		return false
	}
	n := len(s.recs)
	if s.live <= sampleSize {
		// A small cap: the table is at most tableLen(sampleSize+1) long
		// plus tombstones, which rebuilds bound. Look at every key.
		for slot := range n {
			if s.stored(slot) && consider(uint32(slot)) {
				return true
			}
		}
	} else {
		// The shard holds perShard keys and its table never grows past
		// tableLen(perShard+1), so about 3/5 of the positions hold keys
		// and few draws miss; the cap on draws only bounds bad luck.
		for draws, hits := 0, 0; hits < sampleSize && draws < 8*sampleSize; draws++ {
			s.rng ^= s.rng << 13
			s.rng ^= s.rng >> 7
			s.rng ^= s.rng << 17
			slot := uint32(s.rng % uint64(n))
			if !s.stored(int(slot)) {
				continue
			}
			hits++
			if consider(slot) {
				return true
			}
		}
	}
	if t.policy == EvictLeastRecent && victim != math.MaxUint32 {
		t.evict(s, victim, now)
		return true
	}
	return false
}

// sweep evicts idle keys of every shard, one shard and sweepChunk slots at
// a time, rebuilding shards that are mostly empty. It returns how many keys
// it evicted, early if stop is closed. A table that grows between two
// chunks moves keys: the sweep may then skip some, which the next one
// finds.
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
					t.evict(s, uint32(slot), now)
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

// maybeRebuild empties s when it holds no key, and rebuilds its table at
// tableLen(live) when most of its keys left, tombstones fill much of it or
// most of its arena bytes are dead: Go slices never shrink. Requires s.mu
// held.
func (t *table[E]) maybeRebuild(s *shard[E]) {
	switch {
	case s.live == 0 && (len(s.recs) > minTable || s.used > 0 || len(s.arena) > 0):
		t.resetTable(s)
		s.dirty = nil
	case s.peak >= 1024 && s.live*4 < s.peak,
		s.used-s.live > len(s.recs)/4,
		len(s.arena) >= 1<<16 && s.deadBytes*2 > len(s.arena):
		t.rebuild(s)
	}
	if t.owner != nil {
		t.owner.compact(s)
	}
}

// compactSide moves the live keys' slab entries of s to a fresh slab
// without free entries, in the order they were (the order the keys
// arrived in, but for reused entries), and points the records at them.
// Requires s.mu held and t.slab != nil.
func (t *table[E]) compactSide(s *shard[E]) {
	const none = math.MaxUint32
	owner := make([]uint32, len(s.side)/t.stride) // entry -> position
	for i := range owner {
		owner[i] = none
	}
	for slot := range s.recs {
		if s.stored(slot) {
			owner[*t.slab.sideRef(&s.recs[slot].rec)] = uint32(slot)
		}
	}
	// Room for a quarter more keys: a compaction during an insert's growth
	// is followed by that key's allocSide.
	side := make([]uint32, 0, (s.live+s.live/4+1)*t.stride)
	for ref, slot := range owner {
		if slot == none {
			continue
		}
		*t.slab.sideRef(&s.recs[slot].rec) = uint32(len(side) / t.stride)
		side = append(side, s.side[ref*t.stride:(ref+1)*t.stride]...)
	}
	s.side, s.sideFree = side, nil
}

// rebuild rebuilds the table of s at the size for its live keys. Requires
// s.mu held.
func (t *table[E]) rebuild(s *shard[E]) { t.rehash(s, tableLen(s.live)) }

// rehash moves the live keys of s into a fresh table of n positions,
// dropping tombstones, and into a fresh arena if any of its bytes are dead;
// it compacts the side slab when free entries are a fifth of it or more
// (at least a quarter as many as live keys). Requires s.mu held.
func (t *table[E]) rehash(s *shard[E], n int) {
	old, oldSide, oldArena := s.recs, s.side, s.arena
	s.recs = make([]slotRec[E], n)
	if t.slab == nil {
		s.side = make([]uint32, n*t.stride)
	}
	if s.deadBytes > 0 {
		s.arena = make([]byte, 0, len(oldArena)-s.deadBytes)
	}
	s.used = 0
	for i := range old {
		r := &old[i]
		if r.klen == emptySlot || r.klen == deadSlot {
			continue
		}
		key := keyIn(r, oldArena)
		slot := s.place(s.hashOf(key))
		s.recs[slot] = *r
		if r.klen == longKey && s.deadBytes > 0 {
			binary.LittleEndian.PutUint32(s.recs[slot].key[0:4], uint32(len(s.arena)))
			s.arena = append(s.arena, key...)
		}
		if t.stride > 0 && t.slab == nil {
			copy(t.sideOf(s, slot), oldSide[i*t.stride:(i+1)*t.stride])
		}
	}
	s.peak, s.deadBytes = s.live, 0
	if t.slab != nil && len(s.sideFree) > 0 && len(s.sideFree) >= s.live/4 {
		t.compactSide(s)
	}
	if y := t.sync; y != nil {
		// Slots moved: queue again every key with uncollected sync state.
		s.dirty = s.dirty[:0]
		for slot := range s.recs {
			if s.stored(slot) && t.sideOf(s, uint32(slot))[y.off]&syncTouched != 0 {
				s.dirty = append(s.dirty, uint32(slot))
			}
		}
	}
}
