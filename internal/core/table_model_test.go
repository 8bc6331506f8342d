package core

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// The key table against a model: a randomized test of shard.go's open
// addressing against a Go map, with hashes forced into long probe runs and
// wrap-around.

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
// algorithms with one rate and with three (extra records per key), and
// three sync layouts (side words with a dirty list: per position for the
// fixed window and the sliding counter, in a slab for the sliding log).
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
	rates := func(alg Algorithm) Config {
		return Config{Algorithm: alg, Rates: []Rate{{5, time.Minute}, {3, time.Second}, {4, 10 * time.Second}},
			Buckets: 4, Shards: 1, MaxKeyBytes: 400, JanitorInterval: -1}
	}
	out := []entry{}
	for _, alg := range allAlgorithms {
		out = append(out,
			entry{alg.String() + "/3_rates", true, func(t *testing.T, seed uint64, mode int) {
				runTableModelOf(t, mustNew(t, rates(alg)), seed, mode)
			}},
			entry{alg.String(), alg == FixedWindow || alg == SlidingCounter, func(t *testing.T, seed uint64, mode int) {
				runTableModelOf(t, mustNew(t, cfg(alg)), seed, mode)
			}})
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		out = append(out, entry{"shared-" + alg.String(), alg == SlidingCounter, func(t *testing.T, seed uint64, mode int) {
			l, _ := newSharedT(t, cfg(alg))
			runTableModelOf(t, l, seed, mode)
		}})
	}
	return out
}

// runTableModelOf runs the model test on l's table.
func runTableModelOf(t *testing.T, l Limiter, seed uint64, mode int) {
	switch l := l.(type) {
	case *FixedLimiter:
		runTableModel(t, &l.tab, seed, mode)
	case *LogLimiter:
		runTableModel(t, &l.tab, seed, mode)
	case *CounterLimiter:
		runTableModel(t, &l.tab, seed, mode)
	case *GCRALimiter:
		runTableModel(t, &l.tab, seed, mode)
	}
}

// TestTableModel runs random inserts, finds, evictions (single and in runs
// of neighbours, forward and backward, so keys move back into the gaps in
// every order), rebuilds and rehashes to odd sizes against a map, with the
// cold-path hash forced into few values and to the table's end, and checks
// the table's invariants as it goes: the side words and a limiter of
// several rates' extra records follow their keys, and every position or
// slab entry without a key holds zero extras, as insert hands them out.
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
		case c == 1 && (len(s.recs) != emptyTable || len(s.arena) != 0):
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
		side, extra := tab.sideOf(s, slot)
		for k, w := range side {
			if w != 0 {
				t.Fatalf("new key's side word %d is %d", k, w)
			}
		}
		if !isZero(extra) {
			t.Fatalf("new key's extras %+v are not zero", extra)
		}
		tab.alg.init(s, rec, slot, now)
		v := 1 + r.Uint32N(limitMask)
		*tab.alg.limitWord(rec) = v
		for k := range side {
			if y := tab.sync; y == nil || k != y.flags {
				side[k] = sideWord(v, k)
			}
		}
		for k := range extra {
			*tab.alg.limitWord(&extra[k]) = extraWord(v, k)
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
