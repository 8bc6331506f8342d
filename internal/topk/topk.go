// Package topk keeps a bounded summary of the most frequent items of a
// stream in fixed memory: the Space-Saving algorithm of Metwally, Agrawal
// and El Abbadi, "Efficient Computation of Frequent and Top-k Elements in
// Data Streams" (ICDT 2005).
//
// A Sketch of capacity k monitors at most k items, each with a count and an
// error. An item already monitored has its count raised; a new item, while
// fewer than k are monitored, enters with its weight and error 0; otherwise
// it replaces the item of least count m, entering with count m plus its
// weight and error m. After a stream of total weight N:
//
//   - a monitored item's count overestimates its true weight by at most its
//     error: count-err <= true <= count, and err <= N/k;
//   - every item whose true weight exceeds N/k is monitored;
//   - the counts add up to N;
//   - an item not monitored weighs at most the floor: the count of the
//     item last replaced (0 before any), which only grows and is at most
//     the least count monitored, so at most N/k.
//
// Top lists only the items it can vouch for: the largest set of monitored
// items whose guaranteed weights, count-err, exceed both the floor and the
// count of every monitored item left out, so each is certainly heavier
// than any item it leaves out, monitored or not. Under a flood of distinct
// items every monitored one has entered by replacement with a count near
// N/k, an error one less and a guaranteed weight of 1: none is listed. An
// item far heavier than the rest (one of weight N/20 amid a flood of
// items of weight 1, with k = 100) is listed: its guaranteed weight
// exceeds the floor and every other count. An item merely above 2N/k is
// monitored, with an error of at most the floor, but is listed only if
// its guaranteed weight also exceeds the counts of the items below it.
//
// Items are pairs of a group (a short string the caller keeps, such as a
// rule name) and a key of at most the sketch's maxKey bytes, compared in
// full. Add takes a mutex and allocates nothing: keys are copied into an
// arena of k*maxKey bytes reserved at construction, and the monitored items
// are found through an open-addressing index by a seeded XXH3 hash and kept
// in a min-heap by count, so an Add costs O(log k).
package topk

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/zeebo/xxh3"
)

// itemHash returns the index hash of the item (group, key). Tests replace
// it to force collisions.
var itemHash = func(group string, key []byte, seed uint64) uint64 {
	return xxh3.HashSeed(key, seed) ^ bits.RotateLeft64(xxh3.HashStringSeed(group, seed), 31)
}

// Item is one monitored item as Top reports it.
type Item struct {
	Group string
	Key   string
	Count uint64 // at least the item's true weight, at most Err more
	Err   uint64 // how much Count may overestimate
}

// Guaranteed returns Count-Err, the weight the item certainly has: what was
// added for it since it was last monitored.
func (it Item) Guaranteed() uint64 { return it.Count - it.Err }

// entry is a monitored item. Its key is arena[i*maxKey:][:klen] for entry i.
type entry struct {
	hash    uint64
	count   uint64
	err     uint64
	group   string
	klen    int32
	heapPos int32
}

// Sketch is a Space-Saving summary of capacity k (see the package doc). All
// methods are safe for concurrent use.
type Sketch struct {
	mu      sync.Mutex
	k       int
	maxKey  int
	seed    uint64
	n       uint64  // total weight added
	floor   uint64  // count of the item last replaced: no unmonitored item weighs more
	entries []entry // the monitored items, at most k
	heap    []int32 // entry indices, a min-heap by count
	index   []int32 // entry index+1 by hash, linear probing; 0 is empty
	mask    uint64
	arena   []byte // k*maxKey bytes
}

// New returns a sketch monitoring at most k items whose keys are at most
// maxKey bytes long. k and maxKey must be positive; New panics otherwise
// (callers validate their configuration first).
func New(k, maxKey int) *Sketch {
	if k <= 0 || maxKey <= 0 {
		panic("topk: k and maxKey must be positive")
	}
	size := 1 << bits.Len(uint(2*k-1)) // a power of two, at least 2k: probes stay short
	return &Sketch{
		k:       k,
		maxKey:  maxKey,
		seed:    rand.Uint64(),
		entries: make([]entry, 0, k),
		heap:    make([]int32, 0, k),
		index:   make([]int32, size),
		mask:    uint64(size - 1),
		arena:   make([]byte, k*maxKey),
	}
}

// Cap returns k, the most items the sketch monitors.
func (s *Sketch) Cap() int { return s.k }

// Add counts weight w > 0 for the item (group, key) and reports whether it
// was counted: a key longer than maxKey, or a w of 0, is not. It does not
// retain key.
func (s *Sketch) Add(group string, key []byte, w uint64) bool {
	if len(key) > s.maxKey || w == 0 {
		return false
	}
	h := itemHash(group, key, s.seed)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += w
	i := h & s.mask
	for ; s.index[i] != 0; i = (i + 1) & s.mask {
		e := &s.entries[s.index[i]-1]
		if e.hash == h && e.group == group && string(s.keyOf(s.index[i]-1)) == string(key) {
			e.count += w
			s.down(int(e.heapPos))
			return true
		}
	}
	// Not monitored; i is the first empty slot of its probe.
	if len(s.entries) < s.k {
		idx := int32(len(s.entries))
		s.entries = append(s.entries, entry{hash: h, count: w, group: group, klen: int32(len(key)), heapPos: int32(len(s.heap))})
		copy(s.arena[int(idx)*s.maxKey:], key)
		s.index[i] = idx + 1
		s.heap = append(s.heap, idx)
		s.up(len(s.heap) - 1)
		return true
	}
	// Replace the item of least count.
	idx := s.heap[0]
	e := &s.entries[idx]
	s.unindex(e.hash, idx)
	m := e.count
	s.floor = m
	e.hash, e.count, e.err, e.group, e.klen = h, m+w, m, group, int32(len(key))
	copy(s.arena[int(idx)*s.maxKey:], key)
	s.reindex(h, idx)
	s.down(0)
	return true
}

// N returns the total weight added.
func (s *Sketch) N() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Top returns up to n of the items the sketch can vouch for, by
// guaranteed weight descending (ties by error ascending, then group and
// key), and the total weight added; n <= 0 means all of them.
//
// The items it can vouch for are the largest set S of monitored items such
// that the guaranteed weight (Count-Err) of each item in S exceeds both
// the floor (what an unmonitored item may weigh) and the Count (what a
// monitored item may weigh) of every monitored item not in S: so each item
// in S certainly outweighs every item outside S, monitored or not. S is a
// prefix of the monitored items by guaranteed weight (see certain).
//
// With n below the size of S, Top returns the first n items of S: each
// still certainly outweighs every item outside S, but not necessarily the
// items of S it cuts off (the order within S is by guaranteed weight,
// which bounds the true weights from below only).
func (s *Sketch) Top(n int) ([]Item, uint64) {
	items, floor, total := s.monitored()
	items = certain(items, floor)
	if n > 0 && n < len(items) {
		items = items[:n]
	}
	return items, total
}

// certain sorts items by guaranteed weight descending (ties by error
// ascending, then group and key) and returns its longest prefix whose
// every item's guaranteed weight exceeds floor and the Count of every item
// after the prefix. Since Count >= Count-Err, such a prefix never splits
// items of equal guaranteed weight, and any set with that property is
// such a prefix: an item outside it of greater guaranteed weight than one
// inside would need a Count below that one's guaranteed weight, which is
// below its own. O(k log k): a sort and one backward pass.
func certain(items []Item, floor uint64) []Item {
	slices.SortFunc(items, func(a, b Item) int {
		return cmp.Or(cmp.Compare(b.Guaranteed(), a.Guaranteed()), cmp.Compare(a.Err, b.Err),
			cmp.Compare(a.Group, b.Group), cmp.Compare(a.Key, b.Key))
	})
	// The prefix items[:p] qualifies iff items[p-1].Guaranteed(), its
	// least, exceeds floor and the largest Count of items[p:].
	best := 0
	var rest uint64 // the largest Count of items[p:]
	for p := len(items); p > 0; p-- {
		if g := items[p-1].Guaranteed(); g > floor && g > rest {
			best = p
			break
		}
		rest = max(rest, items[p-1].Count)
	}
	return items[:best]
}

// monitored returns every monitored item, in no order, the floor and the
// total weight added.
func (s *Sketch) monitored() (items []Item, floor, total uint64) {
	// Copy under the lock, build the strings after it: denials wait for
	// the copy only.
	s.mu.Lock()
	items = make([]Item, len(s.entries))
	ends := make([]int, len(s.entries))
	var keys []byte
	for i := range s.entries {
		e := &s.entries[i]
		items[i] = Item{Group: e.group, Count: e.count, Err: e.err}
		keys = append(keys, s.keyOf(int32(i))...)
		ends[i] = len(keys)
	}
	floor, total = s.floor, s.n
	s.mu.Unlock()
	start := 0
	for i := range items {
		items[i].Key = string(keys[start:ends[i]])
		start = ends[i]
	}
	return items, floor, total
}

// keyOf returns entry idx's key, aliasing the arena. Requires s.mu held.
func (s *Sketch) keyOf(idx int32) []byte {
	off := int(idx) * s.maxKey
	return s.arena[off : off+int(s.entries[idx].klen)]
}

// reindex puts entry idx, of hash h, into the index. Requires s.mu held.
func (s *Sketch) reindex(h uint64, idx int32) {
	i := h & s.mask
	for s.index[i] != 0 {
		i = (i + 1) & s.mask
	}
	s.index[i] = idx + 1
}

// unindex removes entry idx, of hash h, from the index by backward-shift
// deletion: the entries after it in its probe run move back to fill the
// gap, so no probe ever stops early and no tombstone is needed. Requires
// s.mu held.
func (s *Sketch) unindex(h uint64, idx int32) {
	i := h & s.mask
	for s.index[i] != idx+1 {
		i = (i + 1) & s.mask
	}
	for j := i; ; {
		j = (j + 1) & s.mask
		if s.index[j] == 0 {
			break
		}
		home := s.entries[s.index[j]-1].hash & s.mask
		// The entry at j may move back to i unless its home lies
		// cyclically in (i, j].
		if (j-home)&s.mask < (j-i)&s.mask {
			continue
		}
		s.index[i] = s.index[j]
		i = j
	}
	s.index[i] = 0
}

// less reports whether heap position a holds a smaller count than b.
func (s *Sketch) less(a, b int) bool {
	return s.entries[s.heap[a]].count < s.entries[s.heap[b]].count
}

// swap exchanges heap positions a and b.
func (s *Sketch) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.entries[s.heap[a]].heapPos = int32(a)
	s.entries[s.heap[b]].heapPos = int32(b)
}

// up restores the heap after position i's count dropped (or it was added).
func (s *Sketch) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

// down restores the heap after position i's count grew.
func (s *Sketch) down(i int) {
	n := len(s.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && s.less(c+1, c) {
			c++
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}
