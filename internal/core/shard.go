package core

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
//	                     and the algorithm's record; or is empty
//	side   []uint32      per-key fixed-size extra state (stride words): for
//	                     the sliding counter and log a dense slab in the
//	                     order keys arrived, each record naming its entry
//	                     (so a record that moves leaves its words in place,
//	                     and keys seen in arrival order read them in
//	                     order); for the others one entry per position
//	arena  []byte        keys longer than 14 bytes
//
// A position's home is the hash's top 32 bits scaled to the table's length
// (not masked), so a table can have any length: it grows when its keys
// would fill 13/16 of it, to 8/5 of them, and is rebuilt at that size when
// dead arena bytes pile up or most of its keys left. A key removed leaves
// no tombstone: the keys after it in its probe run that may sit in its
// position move back (see closeGap), so a table holding a steady number of
// keys under churn keeps its load, and its probes their length, with no
// rebuild. Records therefore move when the table grows and when a key is
// removed: a slot (position) is valid only while the shard's lock is held
// and no key is removed. A lookup compares the stored key in full, so two
// keys with one hash never share a budget.

// rehash computes a stored key's table hash on the cold paths (eviction,
// table growth, rebuild); the hot path calls xxh3 directly. Tests replace it
// to force collisions.
var rehash = xxh3.HashSeed

// hashOf returns the table hash of a stored key. Requires s.mu held.
func (s *shard[E]) hashOf(key []byte) uint64 {
	return rehash(key, s.seed)
}

// Table positions: the klen of an empty one, and sizes.
const (
	emptySlot = 0   // klen of a position that holds no key (keys are never empty)
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

// What makeRoom's hand passes per call: the next sampleSize stored keys,
// or sampleReach positions if fewer keys lie in them.
const (
	sampleSize  = 16
	sampleReach = 64
)

// keyBytes is the type of keys: the string and []byte forms of the API.
type keyBytes interface{ ~string | ~[]byte }

// slotRec is one table position: a key, its tag and its algorithm record.
// A key of up to inlineKey bytes is kept in key; a longer one in the arena,
// with key holding its offset (bytes 0-3) and length (bytes 4-7).
type slotRec[E any] struct {
	klen uint8           // key length, longKey or emptySlot
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
	recs      []slotRec[E]     // the table, at least minTable positions
	side      []uint32         // stride words per position, or per slab entry
	extra     []E              // extras records per position, or per slab entry
	defLimits [MaxRates]uint32 // each rate's default limit, for keys without their own
	emit      [MaxRates]emit   // GCRA's emission interval per rate (see emission)
	arena     []byte
	stride    int      // side words per key
	extras    int      // extra records per key: the state of rates after the first
	slab      bool     // side words and extras are per slab entry, which the record names
	seed      uint64   // the table's hash seed
	_         [64]byte // whatever the shard's alignment

	mu        sync.Mutex
	allowed   uint64   // under mu
	denied    uint64   // under mu
	refused   uint64   // under mu: new keys a full shard could not store
	sideFree  []uint32 // free slab entries
	entries   int      // slab entries
	live      int      // stored keys
	peak      int      // most keys stored since the table was built
	deadBytes int      // arena bytes of evicted keys
	hand      uint32   // the position makeRoom reads next
	examined  uint64   // positions makeRoom read, for tests
	sink      uint32   // what prefetchState read (kept, so the reads stay)
	scratch   E        // the record decided for a peek (scratchSlot)
	scratchSd []uint32
	scratchEx []E
	rings     ringPool // ring buffers of SlidingLog keys
	dirty     []uint32 // slots with sync state to collect (see syncstate.go)
	// floor is the latest instant a key of this shard was evicted at (see
	// evictAt): per key, time never goes back, and an evicted key's
	// history is forgotten with it, so every new key decides no earlier
	// than floor. A request read before its key was evicted is decided at
	// or after the key's latest instant, not in a window the key had
	// already spent. Keys are evicted at instants not before their own
	// latest, and no later than the limiter's clock (the janitor's time,
	// or a request's if earlier), so one key's far-future instant cannot
	// move the floor of the others.
	floor int64

	evicted     atomic.Uint64
	keys        atomic.Int64
	syncDropped atomic.Uint64

	_ [64]byte // keeps the next shard's first lines off this shard's last
}

// emit is GCRA's emission interval W/lim for a cost of 1, in whole and
// 1/lim nanoseconds, cached for the last limit asked.
type emit struct {
	lim  uint32
	q, r uint64
}

// scratchSlot is the slot a decision on the shard's scratch record is
// given (a peek): its side words and extras are the scratch ones too.
const scratchSlot = math.MaxUint32

// table is the sharded key table shared by the four algorithms.
type table[E any] struct {
	shards      []shard[E]
	mask        uint64
	perShard    int // most keys per shard, 0 for no cap
	policy      FullPolicy
	maxKeyBytes int
	seed        uint64 // secret hash seed, random per limiter
	alg         algorithm[E]
	slab        slabUser[E]     // non-nil if side words and extras are slab entries the records name
	owner       storageOwner[E] // non-nil if the algorithm keeps storage outside the records
	sync        *syncSet        // nil unless built for package sync
	clock       func() int64    // the limiter's clock on its timeline; makeRoom judges no later
}

// init sets up t for alg with stride side words and extras extra records
// per key (sync state included, as laid out by y, nil unless shared), and
// the default limits of rs's rates.
func (t *table[E]) init(cfg Config, rs *rateSet, alg algorithm[E], stride, extras int, y *syncSet) {
	t.shards = make([]shard[E], cfg.Shards)
	t.mask = uint64(cfg.Shards - 1)
	t.policy = cfg.WhenFull
	t.maxKeyBytes = cfg.MaxKeyBytes
	t.alg = alg
	if su, ok := alg.(slabUser[E]); ok && stride+extras > 0 {
		t.slab = su
	}
	t.owner, _ = alg.(storageOwner[E])
	t.sync = y
	t.seed = rand.Uint64()
	if cfg.MaxKeys > 0 {
		t.perShard = (cfg.MaxKeys + cfg.Shards - 1) / cfg.Shards
	}
	rates := cfg.rates()
	for i := range t.shards {
		s := &t.shards[i]
		s.stride, s.extras, s.slab = stride, extras, t.slab != nil
		for k := range rs.n {
			s.defLimits[k] = uint32(rates[rs.order[k]].Limit)
		}
		t.resetTable(s)
		s.scratchSd = make([]uint32, stride)
		s.scratchEx = make([]E, extras)
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
// of rate k for a cost of 1 in whole and 1/lim nanoseconds, cached for the
// last limit asked: a 128-bit division less per decision. Requires s.mu
// held.
func (s *shard[E]) emission(k int, lim uint32, w int64) (uint64, uint64) {
	e := &s.emit[k]
	if lim != e.lim {
		*e = emit{lim, uint64(w) / uint64(lim), uint64(w) % uint64(lim)}
	}
	return e.q, e.r
}

// rec returns the record of slot. Requires s.mu held.
func (s *shard[E]) rec(slot uint32) *E {
	return &s.recs[slot].rec
}

// keyRec returns the record of the key in slot, the scratch one for
// scratchSlot. Requires s.mu held.
func (s *shard[E]) keyRec(slot uint32) *E {
	if slot == scratchSlot {
		return &s.scratch
	}
	return &s.recs[slot].rec
}

// stored reports whether slot holds a key. Requires s.mu held.
func (s *shard[E]) stored(slot int) bool {
	k := s.recs[slot].klen
	return k != emptySlot
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

// place returns the first empty position of the probe for hash h.
// Requires s.mu held and a table under 13/16 full.
func (s *shard[E]) place(h uint64) uint32 {
	i := s.home(h)
	for s.recs[i].klen != emptySlot {
		if i++; int(i) == len(s.recs) {
			i = 0
		}
	}
	return i
}

// resetTable replaces the table of s with an empty one of minTable
// positions.
func (t *table[E]) resetTable(s *shard[E]) {
	s.recs = make([]slotRec[E], minTable)
	s.side, s.extra, s.sideFree, s.entries = nil, nil, nil, 0
	if !s.slab {
		s.side = make([]uint32, minTable*s.stride)
		s.extra = make([]E, minTable*s.extras)
	}
	s.arena = nil
	s.peak, s.deadBytes = s.live, 0
}

// insert stores key (hash h) in the table and returns its slot, whose
// record is zero. It evicts to make room when the shard is full, or fails
// with ErrTooManyKeys. The table may grow or be rebuilt (to reclaim the
// arena, see arenaMostlyDead), and an eviction moves keys back: other
// keys' slots may change. Requires s.mu held and key not stored.
func insert[E any, K keyBytes](t *table[E], s *shard[E], h uint64, key K, now int64) (uint32, error) {
	if t.perShard > 0 && s.live >= t.perShard && !t.makeRoom(s, now) {
		return 0, ErrTooManyKeys
	}
	if len(key) > inlineKey && s.arenaMostlyDead() {
		// A full table under churn is never rebuilt otherwise.
		t.rebuild(s)
	}
	off := len(s.arena)
	if len(key) > inlineKey && uint64(off)+uint64(len(key)) > math.MaxUint32 {
		// The arena's offsets are 32-bit: 4 GiB of long keys in one shard.
		return 0, ErrTooManyKeys
	}
	if 16*(s.live+1) > 13*len(s.recs) {
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

// allocSide returns a slab entry of zero side words and extras for a new
// key: the last one freed, else a new one at the slab's end. Requires s.mu
// held.
func (t *table[E]) allocSide(s *shard[E]) uint32 {
	if n := len(s.sideFree); n > 0 {
		ref := s.sideFree[n-1]
		s.sideFree = s.sideFree[:n-1]
		return ref
	}
	ref := uint32(s.entries)
	s.entries++
	s.side = append(s.side, make([]uint32, s.stride)...)
	s.extra = append(s.extra, make([]E, s.extras)...)
	return ref
}

// sideOf returns the side words and extra records of slot (empty if the
// algorithm keeps none), the scratch ones for scratchSlot. Requires s.mu
// held.
func (t *table[E]) sideOf(s *shard[E], slot uint32) ([]uint32, []E) {
	var ref uint32
	if t.slab != nil && slot != scratchSlot {
		ref = *t.slab.sideRef(&s.recs[slot].rec)
	}
	return s.keyState(slot, ref)
}

// extrasOf returns the extra records of the key in slot (scratchSlot: the
// scratch ones) alone: keyState's second result, on the hot path of keys
// of several rates. Requires s.mu held.
func (t *table[E]) extrasOf(s *shard[E], slot uint32) []E {
	if slot == scratchSlot {
		return s.scratchEx
	}
	i := int(slot)
	if t.slab != nil {
		i = int(*t.slab.sideRef(&s.recs[slot].rec))
	}
	x := i * s.extras
	return s.extra[x : x+s.extras : x+s.extras]
}

// keyState returns the side words and extra records of the key in slot,
// whose slab entry is ref if the shard keeps a slab (the algorithms read
// ref from their records); for scratchSlot, the scratch ones. Requires
// s.mu held.
func (s *shard[E]) keyState(slot, ref uint32) ([]uint32, []E) {
	if slot == scratchSlot {
		return s.scratchSd, s.scratchEx
	}
	i := int(slot)
	if s.slab {
		i = int(ref)
	}
	x := i * s.extras
	return s.sideWords(slot, ref), s.extra[x : x+s.extras : x+s.extras]
}

// sideWords returns the side words of keyState(slot, ref) alone: the hot
// path of the algorithms that keep side words. Requires s.mu held.
func (s *shard[E]) sideWords(slot, ref uint32) []uint32 {
	if slot == scratchSlot {
		return s.scratchSd
	}
	i := int(slot)
	if s.slab {
		i = int(ref)
	}
	w := i * s.stride
	return s.side[w : w+s.stride : w+s.stride]
}

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
		if side, _ := t.sideOf(s, to); side[y.flags]&syncTouched != 0 {
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
		for start := 0; ; start += sweepChunk {
			select {
			case <-stop:
				return evicted
			default:
			}
			s.mu.Lock()
			end := min(start+sweepChunk, len(s.recs))
			if s.live == 0 {
				end = len(s.recs) // no key to visit: an idle limiter's sweep is a lock per shard
			}
			for slot := start; slot < end && s.live > 0; {
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

// maybeRebuild empties s when it holds no key, and rebuilds its table at
// tableLen(live) when most of its keys left or most of its arena bytes are
// dead: Go slices never shrink. Requires s.mu held.
func (t *table[E]) maybeRebuild(s *shard[E]) {
	switch {
	case s.live == 0 && (len(s.recs) > minTable || len(s.arena) > 0):
		t.resetTable(s)
		s.dirty = nil
	case s.peak >= 1024 && s.live*4 < s.peak, s.arenaMostlyDead():
		t.rebuild(s)
	}
	if t.owner != nil {
		t.owner.compact(s)
	}
}

// arenaMostlyDead reports whether the bytes of removed keys are most of
// the arena of s, and it is 64 KiB or more: a rebuild then reclaims them,
// at a cost of O(its keys) once per that many bytes of new long keys.
// Requires s.mu held.
func (s *shard[E]) arenaMostlyDead() bool {
	return len(s.arena) >= 1<<16 && s.deadBytes*2 > len(s.arena)
}

// compactSide moves the live keys' slab entries of s to a fresh slab
// without free entries, in the order they were (the order the keys
// arrived in, but for reused entries), and points the records at them.
// Requires s.mu held and t.slab set.
func (t *table[E]) compactSide(s *shard[E]) {
	const none = math.MaxUint32
	owner := make([]uint32, s.entries) // entry -> position
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
	room := s.live + s.live/4 + 1
	side, extra := make([]uint32, 0, room*s.stride), make([]E, 0, room*s.extras)
	entries := 0
	for ref, slot := range owner {
		if slot == none {
			continue
		}
		*t.slab.sideRef(&s.recs[slot].rec) = uint32(entries)
		entries++
		side = append(side, s.side[ref*s.stride:(ref+1)*s.stride]...)
		extra = append(extra, s.extra[ref*s.extras:(ref+1)*s.extras]...)
	}
	s.side, s.extra, s.sideFree, s.entries = side, extra, nil, entries
}

// rebuild rebuilds the table of s at the size for its live keys. Requires
// s.mu held.
func (t *table[E]) rebuild(s *shard[E]) { t.rehash(s, tableLen(s.live)) }

// rehash moves the live keys of s into a fresh table of n positions, and
// into a fresh arena if any of its bytes are dead;
// it compacts the side slab when free entries are a fifth of it or more
// (at least a quarter as many as live keys). Requires s.mu held.
func (t *table[E]) rehash(s *shard[E], n int) {
	old, oldSide, oldExtra, oldArena := s.recs, s.side, s.extra, s.arena
	s.recs = make([]slotRec[E], n)
	if t.slab == nil {
		s.side = make([]uint32, n*s.stride)
		s.extra = make([]E, n*s.extras)
	}
	if s.deadBytes > 0 {
		s.arena = make([]byte, 0, len(oldArena)-s.deadBytes)
	}
	for i := range old {
		r := &old[i]
		if r.klen == emptySlot {
			continue
		}
		key := keyIn(r, oldArena)
		slot := s.place(s.hashOf(key))
		s.recs[slot] = *r
		if r.klen == longKey && s.deadBytes > 0 {
			binary.LittleEndian.PutUint32(s.recs[slot].key[0:4], uint32(len(s.arena)))
			s.arena = append(s.arena, key...)
		}
		if t.slab == nil {
			side, extra := s.keyState(slot, 0)
			copy(side, oldSide[i*s.stride:(i+1)*s.stride])
			copy(extra, oldExtra[i*s.extras:(i+1)*s.extras])
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
			if !s.stored(slot) {
				continue
			}
			if side, _ := t.sideOf(s, uint32(slot)); side[y.flags]&syncTouched != 0 {
				s.dirty = append(s.dirty, uint32(slot))
			}
		}
	}
}
