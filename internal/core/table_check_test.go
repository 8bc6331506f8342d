package core

import (
	"encoding/binary"
	"slices"
	"testing"
)

// Checks of a shard's invariants and of what it stores against a model,
// for the table tests: positions, probe runs, the arena, side words and
// extra records.

// sideWord is the value the model test keeps in side word k of a key whose
// lim word is v.
func sideWord(v uint32, k int) uint32 { return v*2654435761 + uint32(k)*40503 + 1 }

// checkShape checks the structural invariants of s and returns its stored
// keys with their positions. Requires s.mu held.
func checkShape[E any](tb testing.TB, tab *table[E], s *shard[E]) map[string]uint32 {
	tb.Helper()
	n := len(s.recs)
	if n < minTable && !(n == emptyTable && s.live == 0) || tab.slab == nil && len(s.side) != n*s.stride {
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

// checkModel checks s against m, the extra records of a limiter of
// several rates included (checkExtras). Requires s.mu held.
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
	if s.extras > 0 {
		checkExtras(tb, tab, s, keys, m)
	}
}

// extraWord is the value the extras model test keeps in the lim word of
// extra record k of a key whose record's lim word is v.
func extraWord(v uint32, k int) uint32 { return v*40503 + uint32(k+1)*2654435761 }

// checkExtras checks the extra records of s, whose stored keys are keys,
// against m (see checkModel). Requires s.mu held.
func checkExtras[E any](tb testing.TB, tab *table[E], s *shard[E], keys map[string]uint32, m *tableModel) {
	tb.Helper()
	for key, v := range m.vals {
		_, extra := tab.sideOf(s, keys[key])
		if len(extra) != s.extras {
			tb.Fatalf("key %.20q: %d extras, want %d", key, len(extra), s.extras)
		}
		for k := range extra {
			if got := *tab.alg.limitWord(&extra[k]); got != extraWord(v, k) {
				tb.Fatalf("key %.20q: extra %d holds %d, want %d (the extras did not move with the key)", key, k, got, extraWord(v, k))
			}
		}
	}
	if tab.slab != nil {
		for _, ref := range s.sideFree {
			if x := int(ref) * s.extras; !isZero(s.extra[x : x+s.extras]) {
				tb.Fatalf("free slab entry %d keeps extras %+v", ref, s.extra[x:x+s.extras])
			}
		}
		return
	}
	if len(s.extra) != len(s.recs)*s.extras {
		tb.Fatalf("%d extras for %d positions, %d each", len(s.extra), len(s.recs), s.extras)
	}
	for i := range s.recs {
		if !s.stored(i) {
			if _, extra := tab.sideOf(s, uint32(i)); !isZero(extra) {
				tb.Fatalf("position %d (klen %d) without a key keeps extras %+v", i, s.recs[i].klen, extra)
			}
		}
	}
}

// isZero reports whether every extra record is the zero record.
func isZero[E any](extra []E) bool {
	var zero E
	for k := range extra {
		if any(extra[k]) != any(zero) {
			return false
		}
	}
	return true
}
