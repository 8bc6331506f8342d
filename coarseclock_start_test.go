package shardlimit

import (
	"sync"
	"testing"
	"time"
)

// TestCoarseClockNowWhileTheFirstLimiterOpens: a CoarseClock read while
// the first limiter built with it opens returns a time of its timeline
// (wall time at construction or later), never the Unix epoch nor a
// reading left from an earlier run of its goroutine. Each round races
// one reader against one New; a correct clock passes every round, a clock
// that counts its holder before storing a reading failed within a few
// thousand (rounds stop after 2 s, which bounds the race detector's run).
func TestCoarseClockNowWhileTheFirstLimiterOpens(t *testing.T) {
	deadline := time.Now().Add(2 * time.Second)
	for round := 0; round < 5000 && time.Now().Before(deadline); round++ {
		c, err := CoarseClock(time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		floor := time.Unix(0, c.(*coarseClock).tl.wall)
		var wg sync.WaitGroup
		ready, built := make(chan struct{}), make(chan struct{})
		var bad time.Time
		wg.Add(1)
		go func() {
			defer wg.Done()
			close(ready)
			for {
				if now := c.Now(); now.Before(floor) {
					bad = now
					return
				}
				select {
				case <-built:
					return
				default:
				}
			}
		}()
		<-ready
		l, err := New(Config{Algorithm: FixedWindow, Limit: 1, Window: time.Second, Clock: c, JanitorInterval: -1, Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		close(built)
		wg.Wait()
		l.Close()
		if !bad.IsZero() {
			t.Fatalf("round %d: Now read %v while the first limiter opened, before the clock was made (%v)", round, bad.UTC(), floor.UTC())
		}
	}
}
