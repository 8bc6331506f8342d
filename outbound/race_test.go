package outbound

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// Many goroutines failing fast on one key, while others churn the hold
// table, get exactly the limiter's limit: the Pacer adds nothing to it.
func TestConcurrentFailFastKeepsLimit(t *testing.T) {
	p, _ := newPacer(t, shardlimit.GCRA, 100, time.Minute, Config{FailFast: true, MaxHolds: 16})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 50 {
		wg.Go(func() {
			for i := range 10 {
				if p.Take(context.Background(), "api", 1) == nil {
					admitted.Add(1)
				}
				key := fmt.Sprint("other-", g, "-", i)
				_ = p.HoldFor(key, time.Duration(i+1)*time.Second)
				_, _ = p.Held(key)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Fatalf("%d calls admitted, want the limit, 100", got)
	}
	if p.Holds() > 16 {
		t.Fatalf("%d holds stored, want at most MaxHolds 16", p.Holds())
	}
}

// Waiting goroutines are admitted no faster than the limiter allows: a
// GCRA of 5 per second lets at most 5 + k calls through by k fifths of a
// second. The clock moves only while someone sleeps on it; each call's
// instant is read after it returns, so it is never earlier than its
// admission and the bound checked is never looser than the truth.
func TestConcurrentWaitKeepsLimit(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 5, time.Second, Config{})
	const n = 40
	returned := make(chan time.Duration, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := p.Take(context.Background(), "api", 1); err != nil {
				t.Error(err)
			}
			returned <- clock.Now().Sub(t0)
		})
	}
	all := make(chan error)
	go func() {
		wg.Wait()
		close(all)
	}()
	deadline := time.Now().Add(time.Minute)
	for done := false; !done; {
		select {
		case <-all:
			done = true
		default:
			if time.Now().After(deadline) {
				t.Fatal("the waiters did not finish")
			}
			if clock.Sleepers() > 0 {
				clock.Advance(100 * time.Millisecond)
			}
			runtime.Gosched()
			time.Sleep(20 * time.Microsecond)
		}
	}
	close(returned)
	counts := map[int]int{} // by fifth of a second, rounded down
	for at := range returned {
		counts[int(at/(200*time.Millisecond))]++
	}
	sum := 0
	for k := 0; sum < n; k++ {
		sum += counts[k]
		if sum > 5+k {
			t.Fatalf("%d calls returned by %v, more than the limiter's %d", sum, time.Duration(k+1)*200*time.Millisecond, 5+k)
		}
	}
}
