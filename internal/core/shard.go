package core

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

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
//	                     the sliding log a dense slab in the order keys
//	                     arrived, each record naming its entry (so a
//	                     record that moves leaves its words in place); for
//	                     the others one entry per position, whose first
//	                     word a decision reads at the key's home position
//	                     before its record is compared (prefetchHome), so
//	                     the two cache misses overlap
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
	minTable  = 16  // smallest table a key is stored in, positions
	// emptyTable is the length of the table of a shard that has held no
	// key since its table was reset: one empty position, which every
	// lookup reads and finds empty, and which the first insert replaces
	// with a table of minTable positions (one key in one position is
	// above 13/16 full). A limiter's shards are sized for its busiest
	// hour, and most of them hold no key while it idles (or at all, for
	// one of many rules): their tables take 48 bytes each, not
	// minTable's 640 plus side words.
	emptyTable = 1
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
	recs      []slotRec[E]     // the table: emptyTable positions, or at least minTable
	side      []uint32         // stride words per position, or per slab entry
	extra     []E              // extras records per position, or per slab entry
	defLimits [MaxRates]uint32 // each rate's default limit, for keys without their own
	emit      [MaxRates]emit   // GCRA's emission interval per rate (see emission)
	arena     []byte
	stride    int        // side words per key
	extras    int        // extra records per key: the state of rates after the first
	slab      bool       // side words and extras are per slab entry, which the record names
	peers     *peerLayer // a shared key's layer of other nodes' units, nil unless shared
	seed      uint64     // the table's hash seed
	_         [64]byte   // whatever the shard's alignment

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
	sink      uint32   // what prefetchState and prefetchHome read (kept, so the reads stay)
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
	// forgot is one past the latest instant that a settle of a decision
	// of a key of this shard whose usage was forgotten while it still
	// counted (Reset, or eviction of the least recently used key) could
	// name (algorithm.latest: a reservation's may lie after the key's
	// latest instant), 0 if none: a refund of a decision at an instant
	// before it gives nothing back (see limiter.settle), as the
	// decision's units may have been forgotten with it, and what the key
	// holds now was admitted after.
	forgot int64

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
	jan         *janitorJob     // armed by the first key stored; nil if the janitor is disabled
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
		if y != nil {
			s.peers = &peerLayer{set: y, scratch: s.scratchSd, dropped: &s.syncDropped}
		}
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

// prefetchHome reads the first side word and the first byte of the
// extra records (the state of the rates after the first) of position
// home, where a decision's key most likely sits, when they are laid out by
// position rather than in a slab (every algorithm but the sliding log:
// the counters of the sliding counter, the extras of several rates, the
// sync words of a shared key). At a million keys each
// is a cache miss of its own; read here, before the key is compared with
// the position's, their misses overlap the record's instead of following
// it, and the decision waits for about one miss instead of two or three in
// a row (two rates cost 1.3-1.4x one rate's CPU time instead of 2.1x, on
// BenchmarkMillionKeysArena). A key away from its home position reads
// them again where it sits. What is read goes to s.sink, so the reads
// stay. Requires s.mu held.
func (s *shard[E]) prefetchHome(home uint32) {
	if s.slab {
		return
	}
	if s.stride > 0 {
		s.sink += s.side[int(home)*s.stride]
	}
	if s.extras > 0 {
		s.sink += uint32(*(*uint8)(unsafe.Pointer(&s.extra[int(home)*s.extras])))
	}
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

// resetTable replaces the table of s with an empty one of emptyTable
// positions.
func (t *table[E]) resetTable(s *shard[E]) {
	s.recs = make([]slotRec[E], emptyTable)
	s.side, s.extra, s.sideFree, s.entries = nil, nil, nil, 0
	if !s.slab {
		s.side = make([]uint32, emptyTable*s.stride)
		s.extra = make([]E, emptyTable*s.extras)
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
	s.keys.Add(1) // before jan.armed is read: see janitorJob.idle
	if j := t.jan; j != nil && !j.armed.Load() {
		j.arm()
	}
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
			if side, _ := t.sideOf(s, uint32(slot)); y.touched(side) {
				s.dirty = append(s.dirty, uint32(slot))
			}
		}
	}
}
