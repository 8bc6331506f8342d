package outbound

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// holdLog is what TestHoldsSetWhileWaitersWaitAreHonoured saw, by step:
// the driver moves the clock (and sets holds) only when every waiter
// that has not returned sleeps on it, so a call that returns during step
// s was decided at step s's reading.
type holdLog struct {
	mu      sync.Mutex
	high    []time.Time // high[s]: the latest reading up to step s
	holds   []stepHold
	returns []int // the step of each returned call
}

type stepHold struct {
	step  int
	until time.Time
}

// Holds set at random while 60 callers wait on one key, with the clock
// moving forward and, in the second case, stepping back (the time rule:
// an instant behind the latest is decided at the latest): no call
// returns after a hold was set while the latest reading is still inside
// it, and calls never pass the limiter's bound at the latest reading.
func TestHoldsSetWhileWaitersWaitAreHonoured(t *testing.T) {
	for _, stepBack := range []bool{false, true} {
		t.Run(map[bool]string{false: "forward", true: "stepping back"}[stepBack], func(t *testing.T) {
			p, clock := newPacer(t, shardlimit.GCRA, 5, time.Second, Config{})
			const n = 60
			log := &holdLog{high: []time.Time{clock.Now()}}
			var step, outstanding atomic.Int64
			outstanding.Store(n)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					if err := p.Take(context.Background(), "api", 1); err != nil {
						t.Error(err)
					}
					log.mu.Lock()
					log.returns = append(log.returns, int(step.Load()))
					log.mu.Unlock()
					outstanding.Add(-1)
				})
			}
			rng := rand.New(rand.NewPCG(1, 2))
			high := clock.Now()
			for s := 1; ; s++ {
				if !awaitQuiet(t, clock, &outstanding) {
					break
				}
				step.Store(int64(s))
				if s < 150 && rng.IntN(4) == 0 {
					if err := p.HoldFor("api", time.Duration(1+rng.IntN(30))*100*time.Millisecond); err != nil {
						t.Fatal(err)
					}
					u, _ := p.Held("api")
					log.mu.Lock()
					log.holds = append(log.holds, stepHold{s, u})
					log.mu.Unlock()
				}
				now := clock.Now()
				if stepBack && rng.IntN(5) == 0 && now.Sub(t0) > time.Second {
					clock.Set(now.Add(-time.Duration(1+rng.IntN(3)) * 100 * time.Millisecond))
				} else {
					clock.Advance(100 * time.Millisecond)
				}
				if now := clock.Now(); now.After(high) {
					high = now
				}
				log.mu.Lock()
				log.high = append(log.high, high)
				log.mu.Unlock()
			}
			wg.Wait()
			checkHoldLog(t, log, n)
		})
	}
}

// awaitQuiet waits until every caller that has not returned sleeps on
// clock, and reports whether any has not. It waits only for an event.
func awaitQuiet(t *testing.T, clock *shardlimit.ManualClock, outstanding *atomic.Int64) bool {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		o := outstanding.Load()
		if o == 0 {
			return false
		}
		if int64(clock.Sleepers()) == o && outstanding.Load() == o {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers outstanding, %d asleep", o, clock.Sleepers())
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// checkHoldLog fails if a call returned at a step after a hold was set
// while the latest reading was inside the hold, or if more calls returned
// by a step than GCRA (5 at once, then one per 200 ms) admits by that
// step's latest reading.
func checkHoldLog(t *testing.T, log *holdLog, n int) {
	t.Helper()
	if len(log.returns) != n {
		t.Fatalf("%d calls returned, want %d", len(log.returns), n)
	}
	for _, r := range log.returns {
		for _, h := range log.holds {
			if r >= h.step && log.high[r].Before(h.until) {
				t.Fatalf("a call returned at step %d (latest reading %v) inside the hold set at step %d until %v",
					r, log.high[r].Sub(t0), h.step, h.until.Sub(t0))
			}
		}
	}
	by := make([]int, len(log.high))
	for _, r := range log.returns {
		by[r]++
	}
	sum := 0
	for s, c := range by {
		sum += c
		if bound := 5 + int(log.high[s].Sub(t0)/(200*time.Millisecond)); sum > bound {
			t.Fatalf("%d calls returned by step %d (latest reading %v), more than GCRA's %d", sum, s, log.high[s].Sub(t0), bound)
		}
	}
}
