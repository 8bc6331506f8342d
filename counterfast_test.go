package shardlimit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The sliding counter's allow and decideN decide the common case (no skew,
// an instant at or after the key's latest, still in its newest bucket)
// without calling decide. From every state the clock rules produce (jitter,
// stale callers, steps back and the skew they leave, bucket rotations, bans)
// each must leave the key exactly as decide(..., consume true, full false
// or true) does and return decide's verdict, every number of it for
// decideN. The reference model test never steps time back, so this is where
// the shortcuts' guards are tested.
func TestSlidingCounterShortcutsMatchDecide(t *testing.T) {
	var shortcut, skewed, behind, rotated int
	for _, buckets := range []int{1, 3, 10} {
		for seed := range uint64(30) {
			rng := rand.New(rand.NewPCG(seed, uint64(buckets)))
			l := mustNew(t, Config{Algorithm: SlidingCounter, Limit: 1 + rng.IntN(12),
				Window: time.Duration(buckets) * time.Second, Buckets: buckets, Shards: 1}).(*counterLimiter)
			clock := int64(t0Unix) * 1e9
			l.AllowN("k", time.Unix(0, clock), 1)
			s := &l.tab.shards[0]
			g := l.alg.bucket
			for range 3000 {
				switch p := rng.IntN(100); {
				case p < 55:
					clock += rng.Int64N(int64(time.Second) / 2)
				case p < 75:
					clock -= rng.Int64N(stepTolerance) // jitter: decided at the latest instant
				case p < 88:
					clock -= stepTolerance + 1 + rng.Int64N(int64(5*time.Second)) // stale, or a step back
				case p < 98:
					clock += rng.Int64N(int64(20 * time.Second))
				case p < 99:
					l.SetLimit("k", rng.IntN(3)) // 0 bans the key
				default:
					l.ClearLimit("k")
				}
				n := 1 + rng.IntN(4)
				h := l.tab.hash("k")
				s.mu.Lock()
				slot, ok := find(s, h, "k")
				if !ok {
					s.mu.Unlock()
					t.Fatal("key not stored")
				}
				rec := s.rec(slot)
				at := s.stepCheck(slot, l.alg.lastSeen(rec), clock, true)
				side := l.tab.sideAt(s, rec.side)
				r0, c0 := *rec, slices.Clone(side)
				switch {
				case r0.skew != 0 && at >= r0.last:
					skewed++
				case at < r0.last:
					behind++
				case at-r0.head*g >= g:
					rotated++
				default:
					shortcut++
				}
				// decideN and decide(full) from the same state, then allow
				// and decide(bool) from it, which goes on.
				full := l.alg.decideN(s, rec, side, at, n)
				rf, cf := *rec, slices.Clone(side)
				*rec = r0
				copy(side, c0)
				if want := l.alg.decide(s, rec, side, at, n, true, true); full != want || *rec != rf || !slices.Equal(side, cf) {
					s.mu.Unlock()
					t.Fatalf("buckets %d seed %d, cost %d at %d from %+v %v:\ndecideN: %+v %+v %v\ndecide:  %+v %+v %v",
						buckets, seed, n, at, r0, c0, full, rf, cf, want, *rec, side)
				}
				*rec = r0
				copy(side, c0)
				got := l.alg.allow(s, rec, side, at, n)
				r1, c1 := *rec, slices.Clone(side)
				*rec = r0
				copy(side, c0)
				want := l.alg.decide(s, rec, side, at, n, true, false).allowed()
				if got != want || *rec != r1 || !slices.Equal(side, c1) {
					s.mu.Unlock()
					t.Fatalf("buckets %d seed %d, cost %d at %d from %+v %v:\nallow:  %v %+v %v\ndecide: %v %+v %v",
						buckets, seed, n, at, r0, c0, got, r1, c1, want, *rec, side)
				}
				s.mu.Unlock()
			}
		}
	}
	// Each guard of the shortcut must have been needed, or the test could
	// not tell a missing one.
	t.Logf("shortcut %d, skew with the clock caught up %d, behind the latest instant %d, next bucket %d", shortcut, skewed, behind, rotated)
	if shortcut < 1000 || skewed < 50 || behind < 1000 || rotated < 1000 {
		t.Fatalf("too few states of a kind: shortcut %d, skewed %d, behind %d, rotated %d", shortcut, skewed, behind, rotated)
	}
}
