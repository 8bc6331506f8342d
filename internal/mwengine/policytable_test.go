package mwengine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestPolicyTableModel checks the policy table against a map, with random
// puts, in-flight counts and reclaims over keys whose hashes collide on
// purpose (put takes the hash), in one shard of 8 slots: every key keeps
// its own state, a full shard reclaims only a slot that holds nothing,
// and refuses when none does.
func TestPolicyTableModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tb := newPtable[inflightState](8, 16)
	if len(tb.shards) != 1 || tb.perShard != 8 {
		t.Fatalf("%d shards of %d", len(tb.shards), tb.perShard)
	}
	s := &tb.shards[0]
	model := map[string]int32{}                                   // key -> in flight; present iff stored
	hashOf := func(k string) uint64 { return uint64(len(k) % 3) } // three chains
	for step := range 20_000 {
		k := fmt.Sprintf("k%d", rng.IntN(20))
		h := hashOf(k)
		switch rng.IntN(3) {
		case 0, 1: // acquire
			i, ok := tb.put(s, h, []byte(k), 0)
			_, stored := model[k]
			full := len(model) == 8
			if !ok {
				if stored || !full || countZero(model) > 0 {
					t.Fatalf("step %d: put %q refused (stored %v, %d keys, %d idle)", step, k, stored, len(model), countZero(model))
				}
				continue
			}
			if !stored && full {
				// A slot of a key with nothing in flight was reclaimed.
				victim := ""
				for mk, n := range model {
					if _, ok := tb.find(s, hashOf(mk), []byte(mk)); !ok {
						if n != 0 {
							t.Fatalf("step %d: key %q with %d in flight reclaimed", step, mk, n)
						}
						victim = mk
					}
				}
				if victim == "" {
					t.Fatalf("step %d: %q stored in a full table without a reclaim", step, k)
				}
				delete(model, victim)
			}
			s.slots[i].val.n++
			model[k]++
		case 2: // release
			if n := model[k]; n > 0 {
				i, ok := tb.find(s, h, []byte(k))
				if !ok || s.slots[i].val.n != n {
					t.Fatalf("step %d: %q found %v with %d, model %d", step, k, ok, s.slots[i].val.n, n)
				}
				s.slots[i].val.n--
				model[k]--
			}
		}
		for mk, n := range model {
			v := tb.get(s, hashOf(mk), []byte(mk))
			if v == nil || v.n != n {
				t.Fatalf("step %d: %q: %v, model %d", step, mk, v, n)
			}
		}
	}
}

// countZero returns the number of keys of m with nothing in flight.
func countZero(m map[string]int32) int {
	n := 0
	for _, v := range m {
		if v == 0 {
			n++
		}
	}
	return n
}
