package mwengine

import (
	"math/rand/v2"
	"sync"

	"github.com/zeebo/xxh3"
)

// The policy table: the state of bans and of requests in flight per (rule,
// client key), capped and lock-striped like the limiters' tables (see
// internal/core's shard.go), and pointer-free so that the garbage collector
// never scans it: an index from the key's hash to a slot, slots of fixed
// size in a slice, and each slot's key in a byte slab at a fixed stride.
// Keys are compared in full, so two keys with one hash never share state
// (they chain through next). Slots never move, so a slot number stays
// valid while its holder keeps it from being reclaimed (an in-flight
// count above 0). A slot is not freed when its state goes back to a fresh
// key's: it is reclaimed when a new key needs the room and the shard is
// full, so a known client's request never changes the index and never
// allocates.

// policyScan is how many slots a full shard examines, from its clock hand,
// for one to reclaim before refusing a new key.
const policyScan = 64

// policyValue is the state a policy table keeps per key: a pointer-free
// value whose pointer reports whether it may be reclaimed at instant now
// (Unix nanoseconds): it holds nothing a fresh key would not.
type policyValue[V any] interface {
	*V
	reclaimable(now int64) bool
}

// ptable is a capped, striped, pointer-free table from keys of at most
// keyCap bytes to values V.
type ptable[V any, PV policyValue[V]] struct {
	shards   []pshard[V]
	mask     uint64
	seed     uint64
	perShard int
	keyCap   int
}

// pshard is one stripe of a ptable; every field is guarded by mu.
type pshard[V any] struct {
	mu    sync.Mutex
	index map[uint64]uint32 // key hash -> 1 + the first slot of its chain
	slots []pslot[V]
	keys  []byte // slot i's key at i*keyCap
	hand  int    // the slot reclaim examines next
	_     [64]byte
}

// pslot is one key's slot.
type pslot[V any] struct {
	hash uint64
	next uint32 // 1 + the next slot of the same hash, 0 at the chain's end
	klen uint16 // the key's length; 0 for a slot that holds none
	val  V
}

// newPtable returns a table of at most maxKeys keys (at least one per
// shard) of at most keyCap bytes, over 16 shards, or fewer (a power of
// two) so that each holds at least 64 keys.
func newPtable[V any, PV policyValue[V]](maxKeys, keyCap int) *ptable[V, PV] {
	n := 16
	for n > 1 && maxKeys/n < 64 {
		n /= 2
	}
	t := &ptable[V, PV]{
		shards: make([]pshard[V], n), mask: uint64(n - 1), seed: rand.Uint64(),
		perShard: max(1, maxKeys/n), keyCap: keyCap,
	}
	for i := range t.shards {
		t.shards[i].index = map[uint64]uint32{}
	}
	return t
}

// hash returns key's table hash.
func (t *ptable[V, PV]) hash(key []byte) uint64 { return xxh3.HashSeed(key, t.seed) }

// shard returns the shard of hash h.
func (t *ptable[V, PV]) shard(h uint64) *pshard[V] { return &t.shards[h&t.mask] }

// shardIndex returns the index of shard s.
func (t *ptable[V, PV]) shardIndex(h uint64) uint32 { return uint32(h & t.mask) }

// key returns slot i's key in s. Requires s.mu held.
func (t *ptable[V, PV]) key(s *pshard[V], i uint32) []byte {
	off := int(i) * t.keyCap
	return s.keys[off : off+int(s.slots[i].klen)]
}

// find returns the slot of key (hash h) in s, and false if absent.
// Requires s.mu held.
func (t *ptable[V, PV]) find(s *pshard[V], h uint64, key []byte) (uint32, bool) {
	for n := s.index[h]; n != 0; n = s.slots[n-1].next {
		if i := n - 1; string(t.key(s, i)) == string(key) {
			return i, true
		}
	}
	return 0, false
}

// get returns the value of key (hash h) in s, nil if absent. Requires s.mu
// held.
func (t *ptable[V, PV]) get(s *pshard[V], h uint64, key []byte) *V {
	if i, ok := t.find(s, h, key); ok {
		return &s.slots[i].val
	}
	return nil
}

// put returns the slot of key (hash h) in s, storing it with a zero value
// if absent: in a new slot while s holds fewer than perShard, else in a
// reclaimable one at instant now. False if the key is too long or s is
// full of state that may not be reclaimed. Requires s.mu held; allocates
// only when s grows.
func (t *ptable[V, PV]) put(s *pshard[V], h uint64, key []byte, now int64) (uint32, bool) {
	if i, ok := t.find(s, h, key); ok {
		return i, true
	}
	if len(key) == 0 || len(key) > t.keyCap {
		return 0, false
	}
	var i uint32
	switch {
	case len(s.slots) < t.perShard:
		i = uint32(len(s.slots))
		s.slots = append(s.slots, pslot[V]{})
		s.keys = append(s.keys, make([]byte, t.keyCap)...)
	default:
		var ok bool
		if i, ok = t.reclaim(s, now); !ok {
			return 0, false
		}
	}
	sl := &s.slots[i]
	*sl = pslot[V]{hash: h, next: s.index[h], klen: uint16(len(key))}
	copy(s.keys[int(i)*t.keyCap:], key)
	s.index[h] = i + 1
	return i, true
}

// reclaim frees and returns a reclaimable slot of s at instant now, among
// the policyScan from its clock hand; false if none. Requires s.mu held.
func (t *ptable[V, PV]) reclaim(s *pshard[V], now int64) (uint32, bool) {
	for range min(policyScan, len(s.slots)) {
		i := s.hand
		s.hand++
		if s.hand == len(s.slots) {
			s.hand = 0
		}
		if PV(&s.slots[i].val).reclaimable(now) {
			t.unlink(s, uint32(i))
			return uint32(i), true
		}
	}
	return 0, false
}

// unlink takes slot i out of its hash chain in s. Requires s.mu held.
func (t *ptable[V, PV]) unlink(s *pshard[V], i uint32) {
	h := s.slots[i].hash
	next := s.slots[i].next
	if s.index[h] == i+1 {
		if next == 0 {
			delete(s.index, h)
		} else {
			s.index[h] = next
		}
	} else {
		for n := s.index[h]; n != 0; n = s.slots[n-1].next {
			if s.slots[n-1].next == i+1 {
				s.slots[n-1].next = next
				break
			}
		}
	}
	s.slots[i].klen = 0
}

// each calls f with every stored key and its value, one shard at a time
// under its lock: f must not call into t. The key is valid only during
// the call.
func (t *ptable[V, PV]) each(f func(key []byte, v *V)) {
	for si := range t.shards {
		s := &t.shards[si]
		s.mu.Lock()
		for i := range s.slots {
			if s.slots[i].klen != 0 {
				f(t.key(s, uint32(i)), &s.slots[i].val)
			}
		}
		s.mu.Unlock()
	}
}

// slotRef packs a shard and a slot into one word, 0 meaning none.
type slotRef uint64

// makeRef returns the reference of slot i of shard si.
func makeRef(si, i uint32) slotRef { return slotRef(uint64(si)<<32 | uint64(i) + 1) }

// parts returns the shard and slot of a non-zero ref.
func (r slotRef) parts() (si, i uint32) {
	v := uint64(r) - 1
	return uint32(v >> 32), uint32(v)
}
