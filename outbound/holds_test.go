package outbound

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// holdModel is the hold table's reference: a plain map, and a full table
// scanned for the expired holds or, if none is, the one that ends
// soonest. Obviously correct, O(max) per hold of a new key.
type holdModel struct {
	m   map[string]int64
	max int
}

func (r *holdModel) set(key string, until, now int64) {
	if u, ok := r.m[key]; ok {
		r.m[key] = max(u, until)
		return
	}
	if len(r.m) >= r.max {
		soonest, first := "", true
		for k, u := range r.m {
			switch {
			case u <= now:
				delete(r.m, k)
			case first || u < r.m[soonest]:
				soonest, first = k, false
			}
		}
		if len(r.m) >= r.max {
			delete(r.m, soonest)
		}
	}
	r.m[key] = until
}

func (r *holdModel) until(key string, now int64) int64 {
	u, ok := r.m[key]
	switch {
	case !ok:
		return 0
	case u <= now:
		delete(r.m, key)
		return 0
	}
	return u
}

// checkHeap fails unless q is a min-heap by until whose pos indexes every
// hold and nothing else.
func checkHeap(t *testing.T, q *holdQueue) {
	t.Helper()
	if len(q.pos) != len(q.holds) {
		t.Fatalf("%d positions for %d holds", len(q.pos), len(q.holds))
	}
	for i, h := range q.holds {
		if q.pos[h.key] != i {
			t.Fatalf("pos[%q] = %d, the hold is at %d", h.key, q.pos[h.key], i)
		}
		if p := (i - 1) / 2; i > 0 && q.holds[p].until > h.until {
			t.Fatalf("hold %d ends at %d, before its parent %d (%d)", i, h.until, p, q.holds[p].until)
		}
	}
}

// The heap-indexed hold table decides as the scanning model under random
// holds, lookups and a clock that also steps back, at several caps: the
// same holds found, the same evicted from a full table, the same count.
// Every end is distinct, so "the hold that ends soonest" is one hold.
func TestHoldTableMatchesModel(t *testing.T) {
	for _, cap := range []int{1, 2, 7, 64} {
		t.Run("max="+strconv.Itoa(cap), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(cap), 7))
			h := newHoldTable(cap)
			model := &holdModel{m: map[string]int64{}, max: cap}
			now, used := int64(1_000_000), map[int64]bool{}
			for step := range 20_000 {
				now += rng.Int64N(2_000) - 500 // steps back now and then
				key := "k" + strconv.Itoa(rng.IntN(3*cap+2))
				if rng.IntN(3) == 0 {
					got, _ := h.until(key, func() int64 { return now })
					if want := model.until(key, now); got != want {
						t.Fatalf("step %d: until(%q) at %d = %d, want %d", step, key, now, got, want)
					}
				} else {
					until := now + 1 + rng.Int64N(int64(cap)*3_000) // Hold stores only ends after now
					for used[until] {
						until++
					}
					used[until] = true
					h.set(key, until, now)
					model.set(key, until, now)
				}
				if h.len() != len(model.m) {
					t.Fatalf("step %d: %d holds, want %d", step, h.len(), len(model.m))
				}
				checkHeap(t, &h.q)
			}
		})
	}
}
