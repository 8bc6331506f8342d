package topk

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
)

// check verifies the sketch's invariants against the exact weights of the
// stream it was fed: the index finds every monitored item, the heap is a
// heap, the counts add up to N, and Space-Saving's guarantees hold.
func check(t *testing.T, s *Sketch, exact map[[2]string]uint64, n uint64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n != n {
		t.Fatalf("N = %d, want %d", s.n, n)
	}
	var sum uint64
	monitored := map[[2]string]bool{}
	for i := range s.entries {
		e := &s.entries[i]
		k := [2]string{e.group, string(s.keyOf(int32(i)))}
		if monitored[k] {
			t.Fatalf("%q monitored twice", k)
		}
		monitored[k] = true
		sum += e.count
		if int(e.heapPos) >= len(s.heap) || s.heap[e.heapPos] != int32(i) {
			t.Fatalf("entry %d: heap position %d wrong", i, e.heapPos)
		}
		// The index finds it from its hash.
		found := false
		for j := e.hash & s.mask; s.index[j] != 0; j = (j + 1) & s.mask {
			if s.index[j] == int32(i)+1 {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("entry %d (%q) not reachable through the index", i, k)
		}
		truth := exact[k]
		if e.count < truth || e.count-e.err > truth {
			t.Fatalf("%q: count %d, err %d, true %d: want count-err <= true <= count", k, e.count, e.err, truth)
		}
		if e.err*uint64(s.k) > n {
			t.Fatalf("%q: err %d above N/k = %d/%d", k, e.err, n, s.k)
		}
	}
	if used := countUsed(s.index); used != len(s.entries) {
		t.Fatalf("index holds %d entries, %d monitored", used, len(s.entries))
	}
	if sum != n {
		t.Fatalf("counts add up to %d, want N = %d", sum, n)
	}
	for i := 1; i < len(s.heap); i++ {
		if s.less(i, (i-1)/2) {
			t.Fatalf("heap order broken at %d", i)
		}
	}
	for k, w := range exact {
		if w*uint64(s.k) > n && !monitored[k] {
			t.Fatalf("%q: true weight %d > N/k = %d/%d, not monitored", k, w, n, s.k)
		}
	}
	checkTopLocked(t, s, exact)
}

// checkTopLocked checks the floor and what Top would list, from the
// entries (s.mu held): no item left unmonitored weighs more than the
// floor; the items Top lists (computed here by brute force over the
// prefixes by guaranteed weight) each outweigh every item left out,
// monitored or not, by their true weights.
func checkTopLocked(t *testing.T, s *Sketch, exact map[[2]string]uint64) {
	t.Helper()
	monitored := map[[2]string]bool{}
	var items []Item
	for i := range s.entries {
		e := &s.entries[i]
		k := [2]string{e.group, string(s.keyOf(int32(i)))}
		monitored[k] = true
		items = append(items, Item{Group: e.group, Key: k[1], Count: e.count, Err: e.err})
	}
	listed := map[[2]string]bool{}
	for _, it := range bruteCertain(items, s.floor) {
		listed[[2]string{it.Group, it.Key}] = true
	}
	var least uint64 = 1<<64 - 1 // least true weight listed
	for k, w := range exact {
		switch {
		case !monitored[k] && w > s.floor:
			t.Fatalf("%q: true weight %d, not monitored, above the floor %d", k, w, s.floor)
		case listed[k] && w <= s.floor:
			t.Fatalf("%q listed with true weight %d, not above the floor %d", k, w, s.floor)
		case listed[k]:
			least = min(least, w)
		}
	}
	for k, w := range exact {
		if !listed[k] && w >= least {
			t.Fatalf("%q left out with true weight %d, not below the least listed, %d", k, w, least)
		}
	}
}

// bruteCertain returns what Top(0) lists, by definition: the longest
// prefix of items by guaranteed weight (Top's order) whose every item's
// guaranteed weight exceeds floor and the Count of every item after it,
// checking each prefix in full.
func bruteCertain(items []Item, floor uint64) []Item {
	items = slices.Clone(items)
	slices.SortFunc(items, func(a, b Item) int {
		return cmp.Or(cmp.Compare(b.Guaranteed(), a.Guaranteed()), cmp.Compare(a.Err, b.Err),
			cmp.Compare(a.Group, b.Group), cmp.Compare(a.Key, b.Key))
	})
	best := 0
	for p := 1; p <= len(items); p++ {
		ok := true
		for _, x := range items[:p] {
			if x.Guaranteed() <= floor {
				ok = false
			}
			for _, y := range items[p:] {
				if x.Guaranteed() <= y.Count {
					ok = false
				}
			}
		}
		if ok {
			best = p
		}
	}
	return items[:best]
}

// all returns every monitored item, by count descending (ties by group
// and key), whether Top lists it or not.
func all(s *Sketch) []Item {
	items, _, _ := s.monitored()
	slices.SortFunc(items, func(a, b Item) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Key, b.Key))
	})
	return items
}

func countUsed(index []int32) int {
	n := 0
	for _, v := range index {
		if v != 0 {
			n++
		}
	}
	return n
}

// TestExactWhileRoom checks that counts are exact, with error 0, while
// there are no more distinct items than the capacity.
func TestExactWhileRoom(t *testing.T) {
	s := New(4, 16)
	exact := map[[2]string]uint64{}
	add := func(g, k string, w uint64) {
		if !s.Add(g, []byte(k), w) {
			t.Fatalf("Add(%q, %q, %d) not counted", g, k, w)
		}
		exact[[2]string{g, k}] += w
	}
	add("a", "x", 3)
	add("b", "x", 1) // same key, another group: another item
	add("a", "y", 2)
	add("a", "x", 1)
	add("b", "x", 5)
	add("a", "", 1) // an empty key is a key
	check(t, s, exact, 13)
	top, n := s.Top(0)
	want := []Item{{"b", "x", 6, 0}, {"a", "x", 4, 0}, {"a", "y", 2, 0}, {"a", "", 1, 0}}
	if n != 13 || fmt.Sprint(top) != fmt.Sprint(want) {
		t.Fatalf("Top = %v, %d; want %v, 13", top, n, want)
	}
	if top, _ := s.Top(2); len(top) != 2 || top[0].Count != 6 {
		t.Fatalf("Top(2) = %v", top)
	}
}

// TestReplacement follows Space-Saving by hand: a new item replaces the
// one of least count and inherits it as its error; Top lists only the
// items whose guaranteed weight exceeds the floor, the least count.
func TestReplacement(t *testing.T) {
	s := New(2, 8)
	s.Add("", []byte("a"), 5)
	s.Add("", []byte("b"), 2)
	s.Add("", []byte("c"), 1) // replaces b: count 3, err 2
	want := []Item{{"", "a", 5, 0}, {"", "c", 3, 2}}
	if got := all(s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("monitored %v, want %v", got, want)
	}
	// The floor is 2, b's count when c replaced it: c's guaranteed 1 does
	// not exceed it (c may have been added once, as b may have been
	// twice); a's 5 does.
	want = []Item{{"", "a", 5, 0}}
	if top, _ := s.Top(0); fmt.Sprint(top) != fmt.Sprint(want) {
		t.Fatalf("Top = %v, want %v", top, want)
	}
	s.Add("", []byte("b"), 1) // replaces c: count 4, err 3; the floor is 3
	want = []Item{{"", "a", 5, 0}, {"", "b", 4, 3}}
	if got := all(s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("monitored %v, want %v", got, want)
	}
	s.Add("", []byte("b"), 6) // b: count 10, err 3, guaranteed 7
	want = []Item{{"", "b", 10, 3}, {"", "a", 5, 0}}
	if top, _ := s.Top(0); fmt.Sprint(top) != fmt.Sprint(want) {
		t.Fatalf("Top = %v, want %v", top, want)
	}
}

// TestFloodOfDistinctKeysListsNothing: a flood of keys denied once each,
// many more than the sketch monitors, leaves every monitored key with a
// count near N/k, an error one less and a guaranteed weight of 1, at or
// below the floor: Top lists none of them, however many the summary holds.
func TestFloodOfDistinctKeysListsNothing(t *testing.T) {
	s := New(100, 32)
	const n = 202_000
	for i := range n {
		s.Add("anon-bar", []byte("ip:10."+strconv.Itoa(i>>16)+"."+strconv.Itoa(i>>8&0xff)+"."+strconv.Itoa(i&0xff)), 1)
	}
	if got := all(s); len(got) != 100 || got[0].Guaranteed() != 1 || got[0].Count < 2000 {
		t.Fatalf("monitored %v, want 100 keys of about 2020, each with guaranteed 1", got[:min(3, len(got))])
	}
	if top, total := s.Top(0); len(top) != 0 || total != n {
		t.Fatalf("Top = %v (%d items), %d; want none, %d", top[:min(3, len(top))], len(top), total, n)
	}
}

// TestHeavyHitterAmidFloodListed: one key denied once in every 20 amid a
// flood of distinct keys (a true weight of N/20, above 2N/k) is listed,
// alone, with a guaranteed weight at most its true one and a count at
// least its true one.
func TestHeavyHitterAmidFloodListed(t *testing.T) {
	s := New(100, 32)
	const n = 200_000
	var heavy uint64
	for i := range n {
		if i%20 == 7 {
			s.Add("anon-bar", []byte("ip:192.0.2.66"), 1)
			heavy++
			continue
		}
		s.Add("anon-bar", []byte("ip:10."+strconv.Itoa(i>>16)+"."+strconv.Itoa(i>>8&0xff)+"."+strconv.Itoa(i&0xff)), 1)
	}
	top, total := s.Top(0)
	if total != n || len(top) != 1 || top[0].Key != "ip:192.0.2.66" || top[0].Group != "anon-bar" {
		t.Fatalf("Top = %v, %d; want the heavy hitter alone, %d", top, total, n)
	}
	if it := top[0]; it.Guaranteed() == 0 || it.Guaranteed() > heavy || it.Count < heavy {
		t.Fatalf("heavy hitter %+v (guaranteed %d), true weight %d", it, it.Guaranteed(), heavy)
	}
}

func TestRefused(t *testing.T) {
	s := New(2, 4)
	if s.Add("g", []byte("12345"), 1) || s.Add("g", []byte("1"), 0) {
		t.Fatal("a key longer than maxKey, or a weight of 0, was counted")
	}
	if s.Add("g", []byte("1234"), 1) != true || s.N() != 1 {
		t.Fatal("a key of maxKey bytes was not counted")
	}
}

// TestGuaranteesZipf feeds skewed streams of many distinct items, as
// denials under a flood look, and checks the guarantees after every step
// of the last stretch and at the end.
func TestGuaranteesZipf(t *testing.T) {
	for _, tc := range []struct {
		k, items int
		skew     float64
		n        int
	}{
		{1, 10, 1.5, 1000},
		{8, 1000, 1.1, 20000},
		{32, 100, 1.01, 20000},
		{64, 100000, 1.3, 50000},
		{100, 50, 2, 5000}, // fewer items than room
	} {
		t.Run(fmt.Sprintf("k=%d/items=%d", tc.k, tc.items), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.k), uint64(tc.items)))
			z := rand.NewZipf(r, tc.skew, 1, uint64(tc.items-1))
			s := New(tc.k, 24)
			exact := map[[2]string]uint64{}
			var n uint64
			for i := range tc.n {
				g := "rule-" + strconv.Itoa(r.IntN(3))
				k := "ip:192.0.2." + strconv.FormatUint(z.Uint64(), 10)
				w := uint64(1 + r.IntN(3))
				s.Add(g, []byte(k), w)
				exact[[2]string{g, k}] += w
				n += w
				if i >= tc.n-200 || i%997 == 0 {
					check(t, s, exact, n)
				}
			}
		})
	}
}

// TestCollidingHashes gives items only a handful of hashes, so that
// unrelated items share probe runs and whole hashes, and replacements
// shift long runs back; it checks the index after each step.
func TestCollidingHashes(t *testing.T) {
	saved := itemHash
	t.Cleanup(func() { itemHash = saved })
	for _, distinct := range []uint64{1, 3, 40} {
		itemHash = func(group string, key []byte, seed uint64) uint64 {
			return saved(group, key, seed) % distinct * 0x9E3779B97F4A7C15
		}
		s := New(16, 8)
		exact := map[[2]string]uint64{}
		var n uint64
		r := rand.New(rand.NewPCG(1, distinct))
		for range 3000 {
			k := strconv.Itoa(r.IntN(60))
			s.Add("", []byte(k), 1)
			exact[[2]string{"", k}]++
			n++
			check(t, s, exact, n)
		}
	}
}

// TestConcurrentAdds runs Adds from several goroutines (meant for -race)
// and checks that none is lost.
func TestConcurrentAdds(t *testing.T) {
	s := New(8, 16)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				s.Add("g", []byte(strconv.Itoa((g*7+i)%40)), 1)
			}
		})
	}
	wg.Wait()
	if s.N() != 8000 {
		t.Fatalf("N = %d, want 8000", s.N())
	}
	top := all(s)
	var sum uint64
	for _, it := range top {
		sum += it.Count
	}
	if len(top) != 8 || sum != 8000 {
		t.Fatalf("%d items adding up to %d, want 8 and 8000", len(top), sum)
	}
}

func FuzzGuarantees(f *testing.F) {
	f.Add([]byte("abcabcaaab"), uint8(2))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 0, 0, 0, 9, 9, 9, 9}, uint8(3))
	f.Fuzz(func(t *testing.T, stream []byte, k uint8) {
		s := New(int(k%16)+1, 2)
		exact := map[[2]string]uint64{}
		for _, b := range stream {
			g := string(rune('a' + b%3))
			key := []byte{b / 3 % 32}
			w := uint64(b%4) + 1
			s.Add(g, key, w)
			exact[[2]string{g, string(key)}] += w
		}
		var n uint64
		for _, w := range exact {
			n += w
		}
		check(t, s, exact, n)
	})
}

// TestTopLeavesOutNoKeyTrackedAboveAListedOne replays a stream in which a
// monitored key of guaranteed weight 3 (ip:192.0.2.8, true weight 3) is
// ahead of the floor, but another monitored key (ip:192.0.2.1, true
// weight 4, guaranteed 1, count 5) may outweigh it: listing the first
// alone would claim it outweighs the second. Top lists neither, or both.
func TestTopLeavesOutNoKeyTrackedAboveAListedOne(t *testing.T) {
	s := New(4, 32)
	exact := map[[2]string]uint64{}
	for _, c := range []int{0, 1, 2, 1, 6, 6, 7, 0, 3, 0, 7, 0, 7} {
		k := "ip:192.0.2." + strconv.Itoa(c+1)
		s.Add("r", []byte(k), 1)
		exact[[2]string{"r", k}]++
	}
	top, _ := s.Top(0)
	listed := map[string]bool{}
	for _, it := range top {
		listed[it.Key] = true
	}
	for _, it := range top {
		for k, w := range exact {
			if !listed[k[1]] && w >= exact[[2]string{"r", it.Key}] {
				t.Errorf("Top lists %+v (true weight %d) but leaves out %s (true weight %d)", it, exact[[2]string{"r", it.Key}], k[1], w)
			}
		}
	}
}

// TestTopListedOutweighEveryKeyLeftOut feeds random streams of few
// distinct keys to small sketches and checks Top(0) against the exact
// weights: every key listed truly weighs more than every key not listed,
// monitored or not, and what Top lists is the brute-force maximal set.
func TestTopListedOutweighEveryKeyLeftOut(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := range 3000 {
		k := 1 + r.IntN(6)
		keys := 1 + r.IntN(12)
		s := New(k, 16)
		exact := map[string]uint64{}
		for range r.IntN(60) {
			key := "ip:192.0.2." + strconv.Itoa(r.IntN(keys))
			w := uint64(1 + r.IntN(2))
			s.Add("r", []byte(key), w)
			exact[key] += w
		}
		top, _ := s.Top(0)
		listed := map[string]bool{}
		for _, it := range top {
			listed[it.Key] = true
		}
		for _, x := range top {
			for y, wy := range exact {
				if !listed[y] && exact[x.Key] <= wy {
					t.Fatalf("trial %d: listed %+v (true %d), left out %s (true %d); Top = %v", trial, x, exact[x.Key], y, wy, top)
				}
			}
		}
		items, floor, _ := s.monitored()
		if want := bruteCertain(items, floor); !slices.Equal(top, want) {
			t.Fatalf("trial %d: Top(0) = %v, want the maximal set %v", trial, top, want)
		}
	}
}
