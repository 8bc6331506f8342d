package core

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// A shared sliding counter checked against a reference: the units of each
// bucket are this node's plus the other nodes', and the bucket straddling
// the window's start is weighted with both together, rounded up once.

// sharedCounterModel is the reference: one key's units per bucket id.
type sharedCounterModel struct {
	g, n, lim     int64
	last          int64
	local, remote map[int64]int64
}

// units returns the units of bucket b.
func (m *sharedCounterModel) units(b int64) int64 { return m.local[b] + m.remote[b] }

// estimate returns the weighted estimate at instant t: the n newest
// buckets in full, and ceil of the straddling one's share.
func (m *sharedCounterModel) estimate(t int64) int64 {
	j := t / m.g
	var est int64
	for b := j - m.n + 1; b <= j; b++ {
		est += m.units(b)
	}
	x := m.units(j-m.n) * (m.g - (t - j*m.g))
	return est + (x+m.g-1)/m.g
}

// decide returns the Result of n units at t: of a decision that keeps
// its outcome if keep, else of a peek (which changes nothing).
func (m *sharedCounterModel) decide(t int64, n int, keep bool) Result {
	kt := max(t, m.last)
	if keep {
		m.last = kt
	}
	j := kt / m.g
	r := Result{Limit: int(m.lim)}
	est := m.estimate(kt)
	r.Allowed = n == 0 || int64(n) <= m.lim && est+int64(n) <= m.lim
	switch {
	case r.Allowed:
		est += int64(n)
		if keep {
			m.local[j] += int64(n)
		}
	case int64(n) > m.lim:
		r.RetryAfter = Never
	default:
		lo, hi := kt, kt+(m.n+2)*m.g // est(lo) too high, est(hi) 0
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if m.estimate(mid)+int64(n) <= m.lim {
				hi = mid
			} else {
				lo = mid
			}
		}
		r.RetryAfter = time.Duration(hi - t)
	}
	r.Remaining = int(max(0, m.lim-est))
	oldest := j
	for b := j - m.n; b < j; b++ {
		if m.units(b) != 0 {
			oldest = b
			break
		}
	}
	r.ResetAfter = time.Duration((oldest+m.n+1)*m.g - t)
	return r
}

// TestSharedCounterMatchesReference: random decisions and peeks on a
// shared counter key, with the other nodes' units applied to its buckets
// now and then, against sharedCounterModel.
func TestSharedCounterMatchesReference(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			nb := []int64{1, 2, 4, 5}[rng.IntN(4)]
			lim := int64(3 + rng.IntN(30))
			w := int64(10 * time.Second)
			l, tab := newSharedT(t, Config{Algorithm: SlidingCounter, Limit: int(lim), Window: time.Duration(w), Buckets: int(nb)})
			m := &sharedCounterModel{g: w / nb, n: nb, lim: lim, local: map[int64]int64{}, remote: map[int64]int64{}}
			now := int64(1_000) * w
			for i := range 400 {
				now += rng.Int64N(m.g/2+1) - m.g/20
				if rng.IntN(30) == 0 {
					now += rng.Int64N(3 * w)
				}
				n := rng.IntN(4)
				var got, want Result
				switch op := rng.IntN(10); {
				case op < 2 && i > 0:
					applyRandom(tab, m, rng)
					continue
				case op < 4:
					got, want = l.Peek("k", time.Unix(0, now), n), m.decide(now, n, false)
				default:
					got, want = l.AllowN("k", time.Unix(0, now), n), m.decide(now, n, n > 0)
				}
				got.Window, want.Window = 0, 0
				if got != want {
					t.Fatalf("step %d at %d, n=%d: got %+v, want %+v", i, now, n, got, want)
				}
			}
		})
	}
}

// applyRandom collects the key and tells the limiter the store holds, in
// each of its buckets, what this node sent plus 0 to 3 other units, as
// it tells the model.
func applyRandom(tab Synced, m *sharedCounterModel, rng *rand.Rand) {
	for _, f := range collectAll(tab) {
		totals := make([]int64, len(f.Sent))
		for i := range totals {
			b := f.Newest - int64(len(totals)-1-i)
			// The store may say fewer than before (it lost units): the
			// node keeps the most it read for a live bucket.
			r := int64(rng.IntN(4))
			m.remote[b] = max(m.remote[b], r)
			totals[i] = int64(f.Sent[i]) + r
		}
		tab.Apply(&f, totals)
	}
}

// TestSharedCounterWeighsStraddlerOnce: the straddling bucket's units,
// this node's and the other nodes', are weighted together and rounded up
// once, as a counter that is not shared weighs them: half a bucket past
// its end, 1 local and 1 remote unit weigh ceil(2 * 1/2) = 1, not 1 + 1.
func TestSharedCounterWeighsStraddlerOnce(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: SlidingCounter, Limit: 2, Window: 10 * time.Second, Buckets: 10})
	base := time.Unix(1000, 0)
	if r := l.AllowN("k", base.Add(500*time.Millisecond), 1); !r.Allowed {
		t.Fatalf("%+v", r)
	}
	fl := collectAll(tab)
	applyNewest(tab, fl[0], 2) // one other node's unit in the same bucket
	r := l.AllowN("k", base.Add(10500*time.Millisecond), 1)
	if !r.Allowed || r.Remaining != 0 {
		t.Fatalf("straddler weighed twice: %+v", r)
	}
}
