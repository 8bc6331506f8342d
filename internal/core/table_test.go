package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// White-box tests that try to break the open-addressing key table of
// shard.go: a randomized model test against a Go map with hashes forced
// into long probe runs and wrap-around, the MaxKeys policies through the
// public API, Sweep racing a writer that grows the table, and the side
// words following their records through growth and rebuilds.

// tableSeed is the hash seed the tests give every table, so that positions,
// probe runs and makeRoom's samples are the same on every run.
const tableSeed = 0x243F6A8885A308D3

// setTableSeed replaces the random seed of tab before any key is stored.
func setTableSeed[E any](tab *table[E], seed uint64) {
	tab.seed = seed
	for i := range tab.shards {
		tab.shards[i].seed = seed
	}
}

// tableKey returns a random key: mostly short keys over a two-letter
// alphabet (so draws repeat and share prefixes), else a long key of 15 to
// 300 bytes, favouring the lengths at the inline limit and the klen markers.
func tableKey(r *rand.Rand) string {
	var n int
	switch p := r.IntN(100); {
	case p < 55:
		n = 1 + r.IntN(inlineKey)
	case p < 65:
		n = []int{inlineKey, inlineKey + 1, longKey - 1, longKey, longKey + 1}[r.IntN(5)]
	default:
		n = inlineKey + 1 + r.IntN(300-inlineKey)
	}
	b := make([]byte, n)
	for i := range b {
		if r.IntN(8) == 0 {
			b[i] = byte(r.Uint32()) // any byte, zero included
		} else {
			b[i] = "ab"[r.IntN(2)]
		}
	}
	return string(b)
}

// sideWord is the value the model test keeps in side word k of a key whose
// lim word is v.
func sideWord(v uint32, k int) uint32 { return v*2654435761 + uint32(k)*40503 + 1 }

// checkShape checks the structural invariants of s and returns its stored
// keys with their positions. Requires s.mu held.
func checkShape[E any](tb testing.TB, tab *table[E], s *shard[E]) map[string]uint32 {
	tb.Helper()
	n := len(s.recs)
	if n < minTable || tab.slab == nil && len(s.side) != n*s.stride {
		tb.Fatalf("table of %d positions, %d side words (stride %d)", n, len(s.side), s.stride)
	}
	if tab.slab != nil {
		checkSideSlab(tb, tab, s)
	} else if len(s.sideFree) != 0 {
		tb.Fatalf("%d free slab entries in a table without a slab", len(s.sideFree))
	}
	if 16*s.live > 13*n {
		tb.Fatalf("%d keys in %d positions: above 13/16, a probe may not end", s.live, n)
	}
	type span struct{ off, n int }
	var spans []span
	longBytes := 0
	keys := make(map[string]uint32, s.live)
	live := 0
	for i := range s.recs {
		r := &s.recs[i]
		switch r.klen {
		case emptySlot:
			if r.tag != 0 {
				tb.Fatalf("position %d (klen %d) keeps tag %#x", i, r.klen, r.tag)
			}
			// insert hands out a position's side words as they are: they
			// must be zero wherever no key is stored (checkSideSlab checks
			// a slab's free entries).
			if tab.slab != nil {
				continue
			}
			side, _ := tab.sideOf(s, uint32(i))
			for k, w := range side {
				if w != 0 {
					tb.Fatalf("position %d (klen %d): side word %d is %d, not 0", i, r.klen, k, w)
				}
			}
			continue
		}
		live++
		if r.klen > inlineKey && r.klen != longKey {
			tb.Fatalf("position %d: klen %d", i, r.klen)
		}
		key := string(s.keyOf(uint32(i)))
		if r.klen == longKey {
			if len(key) <= inlineKey {
				tb.Fatalf("position %d: %d-byte key in the arena", i, len(key))
			}
			spans = append(spans, span{int(binary.LittleEndian.Uint32(r.key[0:4])), len(key)})
			longBytes += len(key)
		}
		if j, dup := keys[key]; dup {
			tb.Fatalf("key %.20q stored at positions %d and %d", key, j, i)
		}
		keys[key] = uint32(i)
		h := s.hashOf([]byte(key))
		if got, want := r.tag, tagOf(h); got != want {
			tb.Fatalf("position %d: tag %#x, want %#x", i, got, want)
		}
		// The probe invariant: no empty position between home and the key.
		for j := s.home(h); j != uint32(i); j = (j + 1) % uint32(n) {
			if s.recs[j].klen == emptySlot {
				tb.Fatalf("key %.20q at %d: empty position %d on its probe from %d (table %d)", key, i, j, s.home(h), n)
			}
		}
		if got, ok := find(s, h, key); !ok || got != uint32(i) {
			tb.Fatalf("find(%.20q) = %d, %v; stored at %d", key, got, ok, i)
		}
		if got, ok := find(s, h, []byte(key)); !ok || got != uint32(i) {
			tb.Fatalf("find([]byte %.20q) = %d, %v; stored at %d", key, got, ok, i)
		}
	}
	if live != s.live || int64(live) != s.keys.Load() {
		tb.Fatalf("scan: %d keys; shard says live %d, keys %d", live, s.live, s.keys.Load())
	}
	if s.peak < s.live {
		tb.Fatalf("peak %d below live %d", s.peak, s.live)
	}
	if s.deadBytes < 0 || len(s.arena) != longBytes+s.deadBytes {
		tb.Fatalf("arena of %d bytes: %d live long-key bytes + %d dead", len(s.arena), longBytes, s.deadBytes)
	}
	slices.SortFunc(spans, func(a, b span) int { return a.off - b.off })
	for i := 1; i < len(spans); i++ {
		if spans[i-1].off+spans[i-1].n > spans[i].off {
			tb.Fatalf("arena spans overlap: %v and %v", spans[i-1], spans[i])
		}
	}
	if y := tab.sync; y != nil {
		// Every key with uncollected sync state is queued for Collect.
		queued := make([]bool, n)
		for _, slot := range s.dirty {
			if int(slot) < n {
				queued[slot] = true
			}
		}
		for key, slot := range keys {
			if side, _ := tab.sideOf(s, slot); side[y.flags]&syncTouched != 0 && !queued[slot] {
				tb.Fatalf("touched key %.20q at %d not in the dirty list", key, slot)
			}
		}
	}
	return keys
}

// checkSideSlab checks the side slab of s: every entry is owned by exactly
// one stored key or is free, and a free entry's words are zero, as
// allocSide hands them out. Requires s.mu held and tab.slab != nil.
func checkSideSlab[E any](tb testing.TB, tab *table[E], s *shard[E]) {
	tb.Helper()
	if len(s.side) != s.entries*s.stride || len(s.extra) != s.entries*s.extras {
		tb.Fatalf("slab of %d words and %d extras for %d entries, stride %d", len(s.side), len(s.extra), s.entries, s.stride)
	}
	entries := s.entries
	owner := make([]int, entries)
	for i := range owner {
		owner[i] = -1
	}
	for slot := range s.recs {
		if !s.stored(slot) {
			continue
		}
		ref := int(*tab.slab.sideRef(&s.recs[slot].rec))
		if ref >= entries {
			tb.Fatalf("position %d names slab entry %d of %d", slot, ref, entries)
		}
		if owner[ref] >= 0 {
			tb.Fatalf("slab entry %d named by positions %d and %d", ref, owner[ref], slot)
		}
		owner[ref] = slot
	}
	for _, ref := range s.sideFree {
		if int(ref) >= entries {
			tb.Fatalf("free slab entry %d of %d", ref, entries)
		}
		if owner[ref] != -1 {
			tb.Fatalf("free slab entry %d also named by position %d (or freed twice)", ref, owner[ref])
		}
		owner[ref] = -2
		for k, w := range s.side[int(ref)*s.stride : (int(ref)+1)*s.stride] {
			if w != 0 {
				tb.Fatalf("free slab entry %d: word %d is %d, not 0", ref, k, w)
			}
		}
	}
	for ref, o := range owner {
		if o == -1 {
			tb.Fatalf("slab entry %d is neither owned nor free (leaked)", ref)
		}
	}
}

// tableModel is what the model test expects stored: key -> lim word.
type tableModel struct {
	vals    map[string]uint32
	keys    []string // the keys of vals, for random picks
	touched map[string]bool
}

func (m *tableModel) add(key string, v uint32) {
	m.vals[key] = v
	m.keys = append(m.keys, key)
}

func (m *tableModel) remove(key string) {
	delete(m.vals, key)
	delete(m.touched, key)
	i := slices.Index(m.keys, key)
	m.keys[i] = m.keys[len(m.keys)-1]
	m.keys = m.keys[:len(m.keys)-1]
}

// checkModel checks s against m. Requires s.mu held.
func checkModel[E any](tb testing.TB, tab *table[E], s *shard[E], m *tableModel) {
	tb.Helper()
	keys := checkShape(tb, tab, s)
	if len(keys) != len(m.vals) {
		tb.Fatalf("%d keys stored, model has %d", len(keys), len(m.vals))
	}
	for key, want := range m.vals {
		slot, ok := keys[key]
		if !ok {
			tb.Fatalf("model key %.20q (%d bytes) not stored", key, len(key))
		}
		if got := *tab.alg.limitWord(s.rec(slot)); got != want {
			tb.Fatalf("key %.20q: value %d, want %d", key, got, want)
		}
		side, _ := tab.sideOf(s, slot)
		for k, w := range side {
			if y := tab.sync; y != nil && k == y.flags {
				if got := w&syncTouched != 0; got != m.touched[key] {
					tb.Fatalf("key %.20q: sync touched %v, want %v", key, got, m.touched[key])
				}
				continue
			}
			if w != sideWord(want, k) {
				tb.Fatalf("key %.20q: side word %d is %d, want %d (the side words did not move with the record)", key, k, w, sideWord(want, k))
			}
		}
	}
}

// hashModes force the cold-path hash (and so, in the model test, every
// table hash) into the shapes that break open addressing.
var hashModes = []struct {
	name    string
	maxLive int // most keys the model test stores
	batch   int // most keys one insert operation adds
	ops     int // operations per run
	rehash  func([]byte, uint64) uint64
}{
	{"xxh3", 1200, 40, 200, nil},
	{"three-hashes", 80, 1, 500, func(b []byte, _ uint64) uint64 { return xxh3.Hash(b) % 3 }},
	{"one-hash", 40, 1, 400, func([]byte, uint64) uint64 { return 42 }},
	{"wrap", 80, 1, 500, func(b []byte, _ uint64) uint64 {
		// Homes at the table's last positions, at 0 and in the middle
		// (the top 32 bits), with tags from the key (bits 16-22): runs wrap
		// from the end to the start and merge with the run at 0.
		x := xxh3.Hash(b)
		top := []uint64{0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFF0, 0xF8000000, 0, 0x80000000}[x%6]
		return top<<32 | x>>32&0x007F0000
	}},
}

// modelTables returns the tables the model test runs on: the four
// algorithms and three sync layouts (side words with a dirty list: per
// position for the fixed window, in a slab for the sliding counter and
// log).
func modelTables(t *testing.T) []struct {
	name     string
	allModes bool
	run      func(t *testing.T, seed uint64, mode int)
} {
	type entry = struct {
		name     string
		allModes bool
		run      func(t *testing.T, seed uint64, mode int)
	}
	cfg := func(alg Algorithm) Config {
		return Config{Algorithm: alg, Limit: 5, Window: time.Minute, Buckets: 6, Shards: 1, MaxKeyBytes: 400}
	}
	out := []entry{}
	for _, alg := range allAlgorithms {
		out = append(out, entry{alg.String(), alg == FixedWindow || alg == SlidingCounter, func(t *testing.T, seed uint64, mode int) {
			switch l := mustNew(t, cfg(alg)).(type) {
			case *FixedLimiter:
				runTableModel(t, &l.tab, seed, mode)
			case *LogLimiter:
				runTableModel(t, &l.tab, seed, mode)
			case *CounterLimiter:
				runTableModel(t, &l.tab, seed, mode)
			case *GCRALimiter:
				runTableModel(t, &l.tab, seed, mode)
			}
		}})
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		out = append(out, entry{"shared-" + alg.String(), alg == SlidingCounter, func(t *testing.T, seed uint64, mode int) {
			l, _ := newSharedT(t, cfg(alg))
			switch l := l.(type) {
			case *FixedLimiter:
				runTableModel(t, &l.tab, seed, mode)
			case *CounterLimiter:
				runTableModel(t, &l.tab, seed, mode)
			case *LogLimiter:
				runTableModel(t, &l.tab, seed, mode)
			}
		}})
	}
	return out
}

// TestTableModel runs random inserts, finds, evictions (single and in runs
// of neighbours, forward and backward, so keys move back into the gaps in
// every order), rebuilds and rehashes to odd sizes against a map, with the
// cold-path hash forced into few values and to the table's end, and checks
// the table's invariants as it goes.
func TestTableModel(t *testing.T) {
	for _, tb := range modelTables(t) {
		for mode := range hashModes {
			if !tb.allModes && hashModes[mode].name != "wrap" {
				continue // the record type differs, not the table code
			}
			t.Run(tb.name+"/"+hashModes[mode].name, func(t *testing.T) {
				tb.run(t, uint64(mode)*7919+uint64(len(tb.name)), mode)
			})
		}
	}
}

func runTableModel[E any](t *testing.T, tab *table[E], seed uint64, mode int) {
	setTableSeed(tab, tableSeed)
	s := &tab.shards[0]
	hm := hashModes[mode]
	if hm.rehash != nil {
		rehash = hm.rehash
		defer func() { rehash = xxh3.HashSeed }()
	}
	r := rand.New(rand.NewPCG(seed, 0xC0FFEE))
	m := &tableModel{vals: map[string]uint32{}, touched: map[string]bool{}}
	s.mu.Lock()
	defer s.mu.Unlock()

	var stats struct {
		inserts, evicts, grows, wraps int
		rebuilds                      int
		maybe                         [4]int // maybeRebuild: kept, emptied, peak, arena
	}
	const now = int64(t0Unix) * 1e9
	evictKey := func(key string) {
		slot, ok := find(s, s.hashOf([]byte(key)), key)
		if !ok {
			t.Fatalf("key %.20q to evict not found", key)
		}
		tab.evict(s, slot)
		m.remove(key)
		stats.evicts++
	}
	maybeRebuild := func() int {
		// Which case of maybeRebuild applies, and what it must leave.
		n, recs := len(s.recs), &s.recs[0]
		c := 0
		switch {
		case s.live == 0 && (n > minTable || len(s.arena) > 0):
			c = 1
		case s.peak >= 1024 && s.live*4 < s.peak:
			c = 2
		case len(s.arena) >= 1<<16 && s.deadBytes*2 > len(s.arena):
			c = 3
		}
		tab.maybeRebuild(s)
		stats.maybe[c]++
		switch {
		case c == 0 && (len(s.recs) != n || &s.recs[0] != recs):
			t.Fatalf("maybeRebuild rebuilt a table it had no reason to: %d -> %d positions", n, len(s.recs))
		case c == 1 && (len(s.recs) != minTable || len(s.arena) != 0):
			t.Fatalf("maybeRebuild left an empty shard with %d positions, %d arena bytes", len(s.recs), len(s.arena))
		case c > 1 && (len(s.recs) != tableLen(s.live) || s.deadBytes != 0):
			t.Fatalf("case %d: maybeRebuild left %d positions, %d dead bytes for %d keys", c, len(s.recs), s.deadBytes, s.live)
		}
		return c
	}
	insertKey := func() { // insert a new key, or find a drawn one
		key := tableKey(r)
		h := s.hashOf([]byte(key))
		if _, ok := m.vals[key]; ok {
			if _, found := find(s, h, key); !found {
				t.Fatalf("stored key %.20q not found", key)
			}
			return
		}
		if _, found := find(s, h, key); found {
			t.Fatalf("key %.20q found before insert", key)
		}
		n := len(s.recs)
		var slot uint32
		var err error
		if r.IntN(2) == 0 {
			slot, err = insert(tab, s, h, key, now)
		} else {
			slot, err = insert(tab, s, h, []byte(key), now)
		}
		if err != nil {
			t.Fatalf("insert: %v", err)
		}
		if len(s.recs) != n {
			stats.grows++
		}
		if slot < s.home(h) {
			stats.wraps++
		}
		rec := s.rec(slot)
		if *tab.alg.limitWord(rec) != 0 || tab.alg.lastSeen(rec) != 0 {
			t.Fatalf("insert returned a record that is not zero")
		}
		side, _ := tab.sideOf(s, slot)
		for k, w := range side {
			if w != 0 {
				t.Fatalf("new key's side word %d is %d", k, w)
			}
		}
		tab.alg.init(s, rec, slot, now)
		v := 1 + r.Uint32N(limitMask)
		*tab.alg.limitWord(rec) = v
		for k := range side {
			if y := tab.sync; y == nil || k != y.flags {
				side[k] = sideWord(v, k)
			}
		}
		m.add(key, v)
		if y := tab.sync; y != nil && r.IntN(2) == 0 {
			markTouched(s, y, slot, side)
			m.touched[key] = true
		}
		stats.inserts++
	}
	growing := true
	for op := range hm.ops {
		if len(m.keys) >= hm.maxLive {
			growing = false
		} else if len(m.keys) <= hm.maxLive/10 {
			growing = true
		}
		insertP := 30
		if growing {
			insertP = 65
		}
		// Other operations share what is left: p in [1, 100).
		p := 0
		if r.IntN(100) >= insertP {
			p = 1 + r.IntN(99)
		}
		switch {
		case p == 0: // insert new keys, or find drawn ones
			for range 1 + r.IntN(hm.batch) {
				insertKey()
			}
		case p < 25: // find stored and missing keys
			if len(m.keys) > 0 {
				key := m.keys[r.IntN(len(m.keys))]
				if slot, ok := find(s, s.hashOf([]byte(key)), key); !ok || string(s.keyOf(slot)) != key {
					t.Fatalf("op %d: stored key %.20q: find = %d, %v", op, key, slot, ok)
				}
				if len(key) > 1 { // a prefix and a one-byte change are other keys
					for _, other := range []string{key[:len(key)-1], key[:len(key)-1] + "\xff"} {
						_, want := m.vals[other]
						if _, ok := find(s, s.hashOf([]byte(other)), other); ok != want {
							t.Fatalf("op %d: find(%.20q) = %v, stored %v", op, other, ok, want)
						}
					}
				}
			}
			key := tableKey(r)
			_, want := m.vals[key]
			if _, ok := find(s, s.hashOf([]byte(key)), []byte(key)); ok != want {
				t.Fatalf("op %d: find(%.20q) = %v, stored %v", op, key, ok, want)
			}
		case p < 70: // evict keys
			for range 1 + r.IntN(hm.batch) {
				if len(m.keys) > 0 {
					evictKey(m.keys[r.IntN(len(m.keys))])
				}
			}
		case p < 82: // evict a run of neighbours, forward or backward
			if len(m.keys) == 0 {
				break
			}
			first := m.keys[r.IntN(len(m.keys))]
			slot, _ := find(s, s.hashOf([]byte(first)), first)
			var run []string
			for i, n := slot, uint32(len(s.recs)); len(run) < 1+r.IntN(8) && s.recs[i].klen != emptySlot; i = (i + 1) % n {
				if s.stored(int(i)) {
					run = append(run, string(s.keyOf(i)))
				}
			}
			if r.IntN(2) == 0 {
				slices.Reverse(run)
			}
			for _, key := range run {
				evictKey(key)
			}
		case p < 87:
			tab.rebuild(s)
			stats.rebuilds++
			if len(s.recs) != tableLen(s.live) {
				t.Fatalf("op %d: rebuild left %d positions for %d keys", op, len(s.recs), s.live)
			}
		case p < 94:
			maybeRebuild()
		case p < 97: // rehash to an odd size
			tab.rehash(s, tableLen(s.live)+r.IntN(50))
			stats.rebuilds++
		default: // evict most keys, sometimes all of them
			keep := 0
			if r.IntN(3) > 0 {
				keep = len(m.keys) / 5
			}
			for len(m.keys) > keep {
				evictKey(m.keys[r.IntN(len(m.keys))])
			}
			maybeRebuild()
		}
		if op%8 == 0 || len(m.keys) < 200 && op%2 == 0 || len(m.keys) < 30 {
			checkModel(t, tab, s, m)
		}
	}
	checkModel(t, tab, s, m)

	// A scripted finale reaches each case of maybeRebuild.
	for len(m.keys) < hm.maxLive {
		insertKey()
	}
	tab.rebuild(s)
	// Evict keys whose next position holds a key (each left a tombstone
	// once) until a third of them left: the table needs no rebuild.
	for i, n := 0, s.live; s.live > n*2/3 && i < len(s.recs); i++ {
		if s.stored(i) && s.stored((i+1)%len(s.recs)) {
			evictKey(string(s.keyOf(uint32(i))))
		}
	}
	if c := maybeRebuild(); c != 0 {
		t.Fatalf("a third of the keys left: maybeRebuild case %d", c)
	}
	checkModel(t, tab, s, m)
	if hm.maxLive > 1024 {
		for s.peak < 1024 {
			insertKey()
		}
		for s.live*4 >= s.peak {
			evictKey(m.keys[r.IntN(len(m.keys))])
		}
		if c := maybeRebuild(); c != 2 {
			t.Fatalf("most keys left: maybeRebuild case %d", c)
		}
		checkModel(t, tab, s, m)
	}
	for len(m.keys) > 0 {
		evictKey(m.keys[r.IntN(len(m.keys))])
	}
	if c := maybeRebuild(); c != 1 {
		t.Fatalf("no keys left: maybeRebuild case %d", c)
	}
	checkModel(t, tab, s, m)
	t.Logf("%+v", stats)
	if stats.grows < 3 || stats.evicts < 100 || stats.rebuilds < 2 || stats.maybe[0] == 0 {
		t.Fatalf("the run did not exercise the table: %+v", stats)
	}
	if hm.name == "wrap" && stats.wraps == 0 {
		t.Fatalf("no key wrapped around the table's end: %+v", stats)
	}
}

// tableProbe gives the public-API tests a look into a limiter's table.
type tableProbe interface {
	// check checks shard i's invariants and returns its stored keys.
	check(tb testing.TB, i int) map[string]uint32
	setSeed(seed uint64)
	// rebuild rebuilds shard i's table at the size for its keys.
	rebuild(i int)
}

type probeOf[E any] struct{ tab *table[E] }

func (p probeOf[E]) check(tb testing.TB, i int) map[string]uint32 {
	tb.Helper()
	s := &p.tab.shards[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return checkShape(tb, p.tab, s)
}

func (p probeOf[E]) setSeed(seed uint64) { setTableSeed(p.tab, seed) }

func (p probeOf[E]) rebuild(i int) {
	s := &p.tab.shards[i]
	s.mu.Lock()
	p.tab.rebuild(s)
	s.mu.Unlock()
}

func probe(l Limiter) tableProbe {
	switch l := l.(type) {
	case *FixedLimiter:
		return probeOf[fixedRec]{&l.tab}
	case *LogLimiter:
		return probeOf[logRec]{&l.tab}
	case *CounterLimiter:
		return probeOf[counterRec]{&l.tab}
	case *GCRALimiter:
		return probeOf[gcraRec]{&l.tab}
	}
	panic(fmt.Sprintf("no table in %T", l))
}

// keyPool returns n distinct keys, every third one long.
func keyPool(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(prefix, i)
		if i%3 == 2 {
			keys[i] += strings.Repeat("~", 15+i%200)
		}
	}
	return keys
}

// TestTableMaxKeys drives a capped table through the public API: keys come
// and go in epochs three windows apart (at an epoch's start every stored
// key is idle), makeRoom evicts while the table grows and rebuilds, and
// after every call the stored keys must be the model's, each with the
// units it was admitted this epoch. EvictLeastRecent must always find
// room (only one key has a limit of its own), RejectNewKeys must find room
// when every stored key is idle and must not when none is.
func TestTableMaxKeys(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, policy := range []FullPolicy{EvictLeastRecent, RejectNewKeys} {
			for _, maxKeys := range []int{1, 3, 13, 40} {
				name := fmt.Sprintf("%v/%s/max%d", alg, policyName(policy), maxKeys)
				t.Run(name, func(t *testing.T) { runTableMaxKeys(t, alg, policy, maxKeys) })
			}
		}
	}
}

func policyName(p FullPolicy) string {
	if p == EvictLeastRecent {
		return "EvictLeastRecent"
	}
	return "RejectNewKeys"
}

func runTableMaxKeys(t *testing.T, alg Algorithm, policy FullPolicy, maxKeys int) {
	const limit = 1000
	l := mustNew(t, Config{Algorithm: alg, Limit: limit, Window: time.Minute, Shards: 1,
		MaxKeys: maxKeys, WhenFull: policy, MaxKeyBytes: 400})
	p := probe(l)
	p.setSeed(tableSeed)
	r := rand.New(rand.NewPCG(uint64(maxKeys), uint64(alg)*2+uint64(policy)))
	pool := keyPool("k", 3*maxKeys+6)
	count := map[string]int{} // stored key -> units admitted this epoch
	vip := ""
	if maxKeys >= 6 {
		vip = pool[0]
		if err := l.SetLimit(vip, limit); err != nil {
			t.Fatal(err)
		}
		count[vip] = 0
	}
	var spurious []string
	for epoch := range 6 {
		now := at(float64(epoch * 180))
		for k := range count {
			count[k] = 0
		}
		for op := range 30 {
			key := pool[r.IntN(len(pool))]
			if op == 0 && epoch > 0 {
				// A new key while every stored key is idle.
				for _, k := range pool {
					if _, ok := count[k]; !ok {
						key = k
						break
					}
				}
			}
			before := p.check(t, 0)
			if len(before) != len(count) {
				t.Fatalf("epoch %d op %d: %d keys stored, model %d", epoch, op, len(before), len(count))
			}
			for k := range count {
				if _, ok := before[k]; !ok {
					t.Fatalf("epoch %d op %d: model key %.20q not stored", epoch, op, k)
				}
			}
			evicted := l.Stats().Evicted
			res := l.AllowN(key, now, 1)
			after := p.check(t, 0)
			if used, ok := count[key]; ok {
				if !res.Allowed || res.Err != nil || res.Remaining != limit-used-1 || len(after) != len(before) {
					t.Fatalf("epoch %d op %d: stored key %.20q with %d used: %+v (%d keys, were %d)", epoch, op, key, used, res, len(after), len(before))
				}
				count[key]++
				continue
			}
			full := len(before) >= maxKeys
			idle, busy := 0, 0
			for k, used := range count {
				switch {
				case k == vip:
				case used == 0:
					idle++
				default:
					busy++
				}
			}
			if res.Err != nil {
				if !errors.Is(res.Err, ErrTooManyKeys) || res.Allowed || !full || len(after) != len(before) {
					t.Fatalf("epoch %d op %d: new key %.20q: %+v (full %v, %d keys, were %d)", epoch, op, key, res, full, len(after), len(before))
				}
				if policy == EvictLeastRecent && idle+busy > 0 || policy == RejectNewKeys && idle > 0 && busy == 0 {
					spurious = append(spurious, fmt.Sprintf("epoch %d op %d: %d keys stored (%d idle, %d busy) in a table of %d",
						epoch, op, len(before), idle, busy, tableLen(len(before)+1)))
				}
				continue
			}
			if policy == RejectNewKeys && full && idle == 0 {
				t.Fatalf("epoch %d op %d: RejectNewKeys admitted a new key with no idle key stored: %+v", epoch, op, res)
			}
			if !res.Allowed || res.Remaining != limit-1 {
				t.Fatalf("epoch %d op %d: new key %.20q: %+v", epoch, op, key, res)
			}
			var gone []string
			for k := range before {
				if _, ok := after[k]; !ok {
					gone = append(gone, k)
				}
			}
			if _, ok := after[key]; !ok || len(gone) > 1 || len(gone) == 1 && !full || len(after) != len(before)+1-len(gone) {
				t.Fatalf("epoch %d op %d: new key %.20q stored %v, evicted %d (full %v)", epoch, op, key, ok, len(gone), full)
			}
			if got := l.Stats().Evicted - evicted; got != uint64(len(gone)) {
				t.Fatalf("epoch %d op %d: Stats.Evicted grew by %d, %d keys left", epoch, op, got, len(gone))
			}
			for _, k := range gone {
				if k == vip {
					t.Fatalf("epoch %d op %d: the key with its own limit was evicted", epoch, op)
				}
				if policy == RejectNewKeys && count[k] != 0 {
					t.Fatalf("epoch %d op %d: RejectNewKeys evicted %.20q with %d units this epoch", epoch, op, k, count[k])
				}
				delete(count, k)
			}
			count[key] = 1
			if l.Len() > maxKeys {
				t.Fatalf("epoch %d op %d: %d keys above MaxKeys %d", epoch, op, l.Len(), maxKeys)
			}
		}
		if epoch%3 == 2 {
			p.rebuild(0)
		}
	}
	if len(spurious) > 0 {
		t.Errorf("%d new keys failed with ErrTooManyKeys although the policy had a key to evict; first: %s",
			len(spurious), spurious[0])
	}
}

// TestTableMakeRoomFindsSparseKeys is the plainest form of the MaxKeys
// check: with a small per-shard cap, a new key must find room every time
// under EvictLeastRecent, and must find an idle key under RejectNewKeys when
// every stored key is idle.
func TestTableMakeRoomFindsSparseKeys(t *testing.T) {
	for _, policy := range []FullPolicy{EvictLeastRecent, RejectNewKeys} {
		for _, maxKeys := range []int{1, 2, 4, 8} {
			l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 10, Window: time.Minute, Shards: 1,
				MaxKeys: maxKeys, WhenFull: policy})
			probe(l).setSeed(tableSeed)
			failed := 0
			for i := range 200 {
				now := at(0)
				if policy == RejectNewKeys {
					now = at(float64(120 * i)) // every stored key is idle
				}
				if r := l.AllowN(fmt.Sprint("key", i), now, 1); r.Err != nil {
					failed++
				}
			}
			if failed > 0 {
				t.Errorf("%s, MaxKeys %d, 1 shard: %d of 200 new keys got ErrTooManyKeys, though a stored key could be evicted",
					policyName(policy), maxKeys, failed)
			}
		}
	}
}

// TestTableSweepWithConcurrentWriter sweeps while another goroutine admits
// new keys, so the table grows (moving keys) between a sweep's chunks and
// evictions move keys back under it. No admitted unit may be lost, and
// once the writer is done one more sweep removes every idle key.
func TestTableSweepWithConcurrentWriter(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 5
			l := mustNew(t, Config{Algorithm: alg, Limit: limit, Window: time.Minute, Shards: 1, Buckets: 6})
			p := probe(l)
			p.setSeed(tableSeed)
			idle := keyPool("idle", 800) // admitted long ago: idle at now
			for _, k := range idle[:300] {
				l.AllowN(k, at(0), 1)
			}
			now := at(600)
			keys := keyPool("new", 1500)
			want := make(map[string]int, len(keys))
			done := make(chan struct{})
			var failures []string
			go func() {
				// New keys admitted now, interleaved with idle ones for the
				// sweeps to evict all over the table while it grows.
				defer close(done)
				for i, k := range keys {
					n := 1 + i%3
					if r := l.AllowN(k, now, n); !r.Allowed || r.Remaining != limit-n {
						failures = append(failures, fmt.Sprintf("new key %.20q: %+v", k, r))
					}
					want[k] = n
					if i%4 == 0 { // and a key admitted earlier, which may have moved
						k2 := keys[i/2]
						if r := l.AllowN(k2, now, 1); !r.Allowed || r.Remaining != limit-want[k2]-1 {
							failures = append(failures, fmt.Sprintf("key %.20q with %d used: %+v", k2, want[k2], r))
						}
						want[k2]++
					}
					if next := 300 + i/2; i%2 == 0 && next < len(idle) {
						// Stored with no usage: idle. (A key admitted at
						// at(0) now would be decided at the latest
						// eviction's instant, as keys evicted then might
						// have been.)
						if err := l.SetLimit(idle[next], limit); err != nil {
							failures = append(failures, err.Error())
						}
						l.ClearLimit(idle[next])
					}
				}
			}()
			sweeps, swept := 0, 0
		loop:
			for {
				select {
				case <-done:
					break loop
				default:
				}
				swept += l.Sweep(now)
				sweeps++
				runtime.Gosched()
			}
			for _, f := range failures[:min(len(failures), 5)] {
				t.Error(f)
			}
			swept += l.Sweep(now)
			if swept != len(idle) || l.Len() != len(want) {
				t.Fatalf("%d sweeps evicted %d keys of %d idle; %d keys stored, want %d", sweeps+1, swept, len(idle), l.Len(), len(want))
			}
			stored := p.check(t, 0)
			for k, n := range want {
				if _, ok := stored[k]; !ok {
					t.Fatalf("admitted key %.20q was evicted", k)
				}
				if r := l.Peek(k, now, 0); r.Remaining != limit-n {
					t.Fatalf("key %.20q admitted %d units: %+v", k, n, r)
				}
			}
		})
	}
}

// pausingAlg wraps a table's algorithm to pause a sweep, holding the
// shard's lock, at the start of each chunk until a writer has run: the
// writer queues on the lock and, having waited over 1 ms, turns the mutex to
// starvation mode, in which the sweep's next unlock hands the lock to it.
// So the writer runs between two of the sweep's chunks.
type pausingAlg[E any] struct {
	algorithm[E]
	paused chan struct{} // receives when the sweep first pauses
	writer atomic.Bool   // the writer has run
	chunk  int           // the chunk of the latest idle call, -1 before any
	pauses int
	tables []*slotRec[E] // the tables the sweep saw, under the lock
	lens   []int         // and their lengths
}

func (a *pausingAlg[E]) idle(s *shard[E], rec *E, slot uint32, t int64) bool {
	if p := &s.recs[0]; len(a.tables) == 0 || a.tables[len(a.tables)-1] != p {
		a.tables = append(a.tables, p)
		a.lens = append(a.lens, len(s.recs))
	}
	if c := int(slot) / sweepChunk; c != a.chunk {
		a.chunk = c
		if !a.writer.Load() && a.pauses < 4 {
			if a.pauses == 0 {
				a.paused <- struct{}{}
			}
			a.pauses++
			time.Sleep(3 * time.Millisecond)
		}
	}
	return a.algorithm.idle(s, rec, slot, t)
}

// TestTableSweepWhileTableGrows makes the table grow (rehash, moving every
// key) between two chunks of a sweep: idle keys wait in its third chunk and
// later ones, the table is one insert away from growth, and a writer adds a
// key while the sweep pauses (see pausingAlg). The sweep must then evict
// only idle keys of the table as it is, and no admitted unit may be lost.
func TestTableSweepWhileTableGrows(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1, Buckets: 6}
			for round := range 3 {
				var grew bool
				switch l := mustNew(t, cfg).(type) {
				case *FixedLimiter:
					grew = sweepWhileGrowing(t, l, &l.limiter)
				case *LogLimiter:
					grew = sweepWhileGrowing(t, l, &l.limiter)
				case *CounterLimiter:
					grew = sweepWhileGrowing(t, l, &l.limiter)
				case *GCRALimiter:
					grew = sweepWhileGrowing(t, l, &l.limiter)
				}
				if grew {
					return
				}
				t.Logf("round %d: the writer did not run between the sweep's chunks", round)
			}
		})
	}
}

// sweepWhileGrowing runs one sweep of l (whose table is lim's) with a
// writer that grows the table, checks that nothing admitted was lost, and
// reports whether the table grew between the sweep's chunks.
func sweepWhileGrowing[E any](t *testing.T, l Limiter, lim *limiter[E]) bool {
	t.Helper()
	const limit = 5
	tab := &lim.tab
	setTableSeed(tab, tableSeed)
	s := &tab.shards[0]
	now := at(600)
	want := map[string]int{}
	busy := 0
	admit := func() error { // a new key with units now
		k := fmt.Sprint("busy", busy, strings.Repeat("~", busy%3*10))
		n := 1 + busy%3
		busy++
		want[k] = n
		if r := l.AllowN(k, now, n); !r.Allowed {
			return fmt.Errorf("%.20q: %+v", k, r)
		}
		return nil
	}
	size := func() (n, used int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.recs), s.live
	}
	for n, _ := size(); n <= 3*sweepChunk; n, _ = size() {
		if err := admit(); err != nil {
			t.Fatal(err)
		}
	}
	// Idle keys, only in the third chunk and later: the first two chunks,
	// before the writer runs, evict nothing, so its insert still finds the
	// table at its limit.
	idle := map[string]bool{}
	for i := range 600 {
		k := fmt.Sprint("idle", i)
		l.AllowN(k, at(0), 1)
		idle[k] = true
	}
	s.mu.Lock()
	var low []string
	for k := range idle {
		if slot, ok := find(s, tab.hash(k), k); ok && slot < 2*sweepChunk {
			low = append(low, k)
		}
	}
	s.mu.Unlock()
	slices.Sort(low)
	for _, k := range low {
		l.Reset(k)
		delete(idle, k)
	}
	for n, used := size(); 16*(used+1) <= 13*n; n, used = size() {
		if err := admit(); err != nil {
			t.Fatal(err)
		}
	}

	pa := &pausingAlg[E]{algorithm: tab.alg, paused: make(chan struct{}, 1), chunk: -1}
	tab.alg = pa
	defer func() { tab.alg = pa.algorithm }()
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		<-pa.paused
		werr = admit() // queues on the lock held by the paused sweep; grows the table
		pa.writer.Store(true)
	}()
	swept := l.Sweep(now)
	<-done
	if werr != nil {
		t.Fatal(werr)
	}
	tab.alg = pa.algorithm
	grew := len(pa.tables) > 1 // the writer rehashed the table mid-sweep
	t.Logf("the sweep paused %d times, saw tables of %v positions", pa.pauses, pa.lens)

	swept += l.Sweep(now)
	if swept != len(idle) || l.Len() != len(want) {
		t.Fatalf("sweeps evicted %d keys of %d idle; %d keys stored, want %d (table lengths seen by the sweep %v)",
			swept, len(idle), l.Len(), len(want), pa.lens)
	}
	stored := probe(l).check(t, 0)
	for k, n := range want {
		if _, ok := stored[k]; !ok {
			t.Fatalf("admitted key %.20q was evicted (table lengths seen by the sweep %v)", k, pa.lens)
		}
		if r := l.Peek(k, now, 0); r.Remaining != limit-n {
			t.Fatalf("key %.20q admitted %d units: %+v", k, n, r)
		}
	}
	return grew
}

// TestTableSideFollowsRecords gives keys distinct usage spread over several
// buckets, then grows, thins out (keys moving back), rebuilds, sweeps and
// grows the table again: every key's Peek must stay what it was, and for a
// shared limiter Collect must report each key's units once.
func TestTableSideFollowsRecords(t *testing.T) {
	type variant struct {
		name   string
		shared bool
		cfg    Config
	}
	var variants []variant
	for _, alg := range allAlgorithms {
		variants = append(variants, variant{alg.String(), false,
			Config{Algorithm: alg, Limit: 40, Window: 10 * time.Second, Buckets: 10, Shards: 1}})
	}
	variants = append(variants,
		variant{"SlidingCounter-4-buckets", false, Config{Algorithm: SlidingCounter, Limit: 40, Window: 8 * time.Second, Buckets: 4, Shards: 1}},
		variant{"shared-SlidingCounter", true, Config{Algorithm: SlidingCounter, Limit: 40, Window: 10 * time.Second, Buckets: 10, Shards: 1}},
		variant{"shared-FixedWindow", true, Config{Algorithm: FixedWindow, Limit: 40, Window: 10 * time.Second, Shards: 1}},
	)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			var l Limiter
			var tab Synced
			if v.shared {
				l, tab = newSharedT(t, v.cfg)
			} else {
				l = mustNew(t, v.cfg)
			}
			p := probe(l)
			p.setSeed(tableSeed)
			step := v.cfg.Window / 20
			end := at(1005) // mid-window: the spread below stays in one fixed window
			keys := keyPool("key", 200)
			units := map[string]int{}
			for i, k := range keys {
				// Admissions spread over up to 3/10 of the window (several
				// counter buckets), the last at end, so no key is idle.
				for j, m := 0, 1+i%7; j < m; j++ {
					ts := end.Add(-time.Duration(m-1-j) * step)
					n := 1 + (i+j)%4
					if r := l.AllowN(k, ts, n); r.Allowed {
						units[k] += n
					}
				}
			}
			want := map[string]Result{}
			distinct := map[int]bool{}
			for _, k := range keys {
				want[k] = l.Peek(k, end, 0)
				distinct[want[k].Remaining] = true
			}
			if len(distinct) < 6 {
				t.Fatalf("keys too alike to tell apart: %d distinct remaining counts", len(distinct))
			}
			check := func(phase string) {
				t.Helper()
				stored := p.check(t, 0)
				for _, k := range keys {
					if _, ok := stored[k]; !ok {
						t.Fatalf("%s: key %.20q not stored", phase, k)
					}
					if got := l.Peek(k, end, 0); got != want[k] {
						t.Fatalf("%s: key %.20q: %+v, want %+v", phase, k, got, want[k])
					}
				}
			}
			check("start")
			fill := keyPool("fill", 2000)
			for _, k := range fill {
				l.AllowN(k, at(0), 1) // idle at end
			}
			check("grown")
			for _, k := range fill[:1500] {
				l.Reset(k)
			}
			check("thinned")
			p.rebuild(0)
			check("rebuilt")
			if n := l.Sweep(end); n != 500 {
				t.Fatalf("swept %d fillers, want 500", n)
			}
			check("swept")
			for _, k := range keyPool("late", 1500) {
				l.AllowN(k, end, 1)
			}
			check("grown again")
			if tab != nil {
				got := map[string]int{}
				for _, f := range collectAll(tab) {
					if _, dup := got[f.Key]; dup {
						t.Fatalf("key %.20q collected twice", f.Key)
					}
					sum := 0
					for _, d := range f.Deltas {
						sum += int(d)
					}
					got[f.Key] = sum
				}
				for _, k := range keys {
					if got[k] != units[k] {
						t.Fatalf("key %.20q: collected %d units, admitted %d", k, got[k], units[k])
					}
				}
			}
		})
	}
}

// A shard at MaxKeys that holds an idle key must evict it for a new key
// (README: "idle keys are always evicted first"; ErrTooManyKeys: "none could
// be evicted under the configured FullPolicy"), and EvictLeastRecent must
// find a key without a limit of its own when there is one. A first version
// of makeRoom for the open-addressing table drew a random position and
// walked to the next key: a key right after another was drawn with
// probability 1/16 per sample, and about 5% of these limiters missed it.
func TestTableMakeRoomFindsEvictableKeys(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0).Truncate(time.Minute)
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			idleMiss, lruMiss := 0, 0
			for trial := range 200 {
				l, err := New(Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 3, JanitorInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				l.AllowAt(fmt.Sprint("idle", trial), t0) // idle a minute later
				t1 := t0.Add(2 * time.Minute)
				l.AllowAt("a", t1)
				l.AllowAt("b", t1)
				if r := l.AllowN("new", t1, 1); errors.Is(r.Err, ErrTooManyKeys) {
					idleMiss++
				}
				l.Close()

				l, err = New(Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 3, WhenFull: EvictLeastRecent, JanitorInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.SetLimit(fmt.Sprint("vip", trial), 10); err != nil {
					t.Fatal(err)
				}
				for i := range 20 {
					if r := l.AllowN(fmt.Sprint("k", i), t0, 1); errors.Is(r.Err, ErrTooManyKeys) {
						lruMiss++
					}
				}
				l.Close()
			}
			if idleMiss > 0 || lruMiss > 0 {
				t.Errorf("ErrTooManyKeys with an evictable key stored: %d/200 limiters missed the idle key (RejectNewKeys), %d/4000 new keys rejected (EvictLeastRecent)", idleMiss, lruMiss)
			}
		})
	}
}

// The sliding counter's side slab gives its memory back: after most keys
// went idle and a sweep evicted them, the rebuilt shard's slab holds about
// the survivors' words, not the peak's, and the survivors keep their
// counters (a key's counters moved with it or the Peek would differ).
func TestTableSideSlabShrinks(t *testing.T) {
	cfg := Config{Algorithm: SlidingCounter, Limit: 40, Window: 10 * time.Second, Buckets: 10, Shards: 1, JanitorInterval: -1}
	l := mustNew(t, cfg).(*CounterLimiter)
	defer l.Close()
	t0 := time.Unix(1_700_000_000, 0)
	keep := keyPool("keep", 100)
	for i, k := range keep {
		l.AllowN(k, t0.Add(30*time.Second), 1+i%7)
	}
	for _, k := range keyPool("gone", 10_000) {
		l.AllowN(k, t0, 1)
	}
	end := t0.Add(35 * time.Second) // "gone" keys are idle, "keep" keys not
	want := map[string]Result{}
	for _, k := range keep {
		want[k] = l.Peek(k, end, 0)
	}
	s := &l.tab.shards[0]
	peak := len(s.side)
	if n := l.Sweep(end); n != 10_000 {
		t.Fatalf("swept %d keys, want 10000", n)
	}
	s.mu.Lock()
	checkShape(t, &l.tab, s)
	words, capWords := len(s.side), cap(s.side)
	s.mu.Unlock()
	if stride := l.tab.shards[0].stride; words != len(keep)*stride || capWords > 2*len(keep)*stride {
		t.Fatalf("slab after the sweep: %d words (capacity %d), peak %d; want %d", words, capWords, peak, len(keep)*stride)
	}
	for _, k := range keep {
		if got := l.Peek(k, end, 0); got != want[k] {
			t.Fatalf("key %q: %+v after the sweep, want %+v", k, got, want[k])
		}
	}
}
