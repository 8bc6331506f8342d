package core

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// White-box tests of the key table.

func TestHashCollisionsNeverShareABudget(t *testing.T) {
	// Two keys forced onto one hash: each keeps its own record, and
	// evicting either leaves the other reachable.
	l := mustNew(t, Config{Algorithm: FixedWindow, Limit: 2, Window: time.Minute, Shards: 1}).(*FixedLimiter)
	s := &l.tab.shards[0]
	rehash = func([]byte, uint64) uint64 { return 42 }
	defer func() { rehash = xxh3.HashSeed }()
	h := s.hashOf([]byte("any")) // every key's table hash now
	keys := []string{"alpha", "beta", "gamma"}
	slots := map[string]uint32{}
	s.mu.Lock()
	for _, k := range keys {
		slot, err := insert(&l.tab, s, h, k, 0)
		if err != nil {
			t.Fatal(err)
		}
		l.alg.init(s, s.rec(slot), slot, 0)
		s.rec(slot).count = uint32(len(k))
		slots[k] = slot
	}
	check := func(want ...string) {
		t.Helper()
		for _, k := range want {
			slot, ok := find(s, h, k)
			if !ok || s.rec(slot).count != uint32(len(k)) {
				t.Fatalf("key %q: found=%v slot %d", k, ok, slot)
			}
			if slot, ok := find(s, h, []byte(k)); !ok || slot != slots[k] {
				t.Fatalf("[]byte key %q not found", k)
			}
		}
		if _, ok := find(s, h, "delta"); ok {
			t.Fatal("found a key never stored")
		}
	}
	check(keys...)
	l.tab.evict(s, slots["alpha"]) // the indexed one: a spilled key takes its place
	slots["beta"], _ = find(s, h, "beta")
	slots["gamma"], _ = find(s, h, "gamma")
	if slots["beta"] == slots["gamma"] || slots["beta"] != s.home(h) && slots["gamma"] != s.home(h) {
		t.Fatalf("after evicting alpha: beta at %d, gamma at %d, home %d", slots["beta"], slots["gamma"], s.home(h))
	}
	check("beta", "gamma")
	if _, ok := find(s, h, "alpha"); ok {
		t.Fatal("evicted key still found")
	}
	l.tab.rebuild(s)
	slots["beta"], _ = find(s, h, "beta")
	slots["gamma"], _ = find(s, h, "gamma")
	check("beta", "gamma")
	s.mu.Unlock()
}

func TestRebuildKeepsLiveKeys(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, Config{Algorithm: alg, Limit: 3, Window: time.Second, Shards: 1})
		for i := range 5000 {
			l.AllowN(fmt.Sprint("old", i), at(0), 1)
		}
		for i := range 100 {
			l.AllowN(fmt.Sprint("live", i), at(10), 2)
		}
		if n := l.Sweep(at(10)); n != 5000 {
			t.Fatalf("%v: evicted %d", alg, n)
		}
		for i := range 100 {
			if r := l.AllowN(fmt.Sprint("live", i), at(10), 1); !r.Allowed || r.Remaining != 0 {
				t.Fatalf("%v: live%d after rebuild: %+v", alg, i, r)
			}
			if r := l.AllowN(fmt.Sprint("live", i), at(10), 1); r.Allowed {
				t.Fatalf("%v: live%d forgot its count", alg, i)
			}
		}
	}
}

func TestLongAndShortKeysKeepTheirOwnCounts(t *testing.T) {
	// Keys of every length up to the cap: inline (<= 15 bytes) and in the
	// arena, including lengths equal to the slot's marker values.
	for _, alg := range allAlgorithms {
		l := mustNew(t, Config{Algorithm: alg, Limit: 2, Window: time.Minute, Shards: 2, MaxKeyBytes: 600})
		var keys []string
		for n := 1; n <= 600; n += 1 + n/16 {
			keys = append(keys, strings.Repeat("k", n))
			keys = append(keys, strings.Repeat("k", n-1)+"z")
		}
		keys = append(keys, strings.Repeat("x", 254), strings.Repeat("x", 255))
		for round := range 3 {
			for _, k := range keys {
				r := l.AllowBytesN([]byte(k), at(0), 1)
				if r.Allowed != (round < 2) {
					t.Fatalf("%v: key of %d bytes, round %d: %+v", alg, len(k), round, r)
				}
			}
		}
		if l.Len() != len(keys) {
			t.Fatalf("%v: len %d, want %d", alg, l.Len(), len(keys))
		}
		if n := l.Sweep(at(1000)); n != len(keys) || l.Len() != 0 {
			t.Fatalf("%v: swept %d", alg, n)
		}
	}
}

func TestCollectAfterRebuild(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: FixedWindow, Limit: 5, Window: time.Second, Shards: 1})
	for i := range 5000 {
		l.AllowN(fmt.Sprint("old", i), at(0), 1)
	}
	collectAll(tab)
	l.AllowN("survivor", at(10), 2)
	l.Sweep(at(10)) // evicts the 5000 and rebuilds the shard, moving slots
	fl := collectAll(tab)
	if len(fl) != 1 || fl[0].Key != "survivor" || fl[0].Deltas[0] != 2 {
		t.Fatalf("after a rebuild collected %+v", fl)
	}
}

// The fields every decision reads stay off the cache lines of the mutex and
// counters that every decision writes, whatever the shard's alignment: a
// decision on another core then costs this core the mutex's line only, not
// the table's address too (MillionKeysParallel at GOMAXPROCS 2 measured
// 11-15% faster than with both on one line).
func TestShardKeepsReadFieldsOffWrittenLines(t *testing.T) {
	check := func(name string, readEnd, mu, size uintptr) {
		t.Helper()
		if mu < readEnd+64 {
			t.Errorf("%s: read-mostly fields end at byte %d, mu starts at %d: under a cache line apart", name, readEnd, mu)
		}
		if size < mu+64 {
			t.Errorf("%s: shard of %d bytes, mu at %d", name, size, mu)
		}
	}
	var f shard[fixedRec]
	check("fixed", unsafe.Offsetof(f.seed)+unsafe.Sizeof(f.seed), unsafe.Offsetof(f.mu), unsafe.Sizeof(f))
	var c shard[counterRec]
	check("counter", unsafe.Offsetof(c.seed)+unsafe.Sizeof(c.seed), unsafe.Offsetof(c.mu), unsafe.Sizeof(c))
	for _, off := range []uintptr{unsafe.Offsetof(f.recs), unsafe.Offsetof(f.side), unsafe.Offsetof(f.extra),
		unsafe.Offsetof(f.defLimits), unsafe.Offsetof(f.emit), unsafe.Offsetof(f.arena), unsafe.Offsetof(f.stride),
		unsafe.Offsetof(f.extras), unsafe.Offsetof(f.slab)} {
		if off > unsafe.Offsetof(f.seed) {
			t.Errorf("a read-mostly field at byte %d, after seed (%d): the check above misses it", off, unsafe.Offsetof(f.seed))
		}
	}
}
