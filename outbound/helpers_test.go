package outbound

import (
	"runtime"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// t0 is the tests' origin, a multiple of every window they use.
var t0 = time.Unix(1_734_480_000, 0)

// newPacer returns a Pacer over a fresh limiter of alg, limit per window,
// on a ManualClock at t0, closed when the test ends.
func newPacer(t *testing.T, alg shardlimit.Algorithm, limit int, window time.Duration, cfg Config) (*Pacer, *shardlimit.ManualClock) {
	t.Helper()
	clock := shardlimit.NewManualClock(t0)
	lim, err := shardlimit.New(shardlimit.Config{Algorithm: alg, Limit: limit, Window: window, Clock: clock, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	cfg.Limiter = lim
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, clock
}

// awaitSleepers waits until n goroutines sleep on clock. It only waits
// for an event; no verdict depends on how long that takes.
func awaitSleepers(t *testing.T, clock *shardlimit.ManualClock, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for clock.Sleepers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines sleep on the clock, want %d", clock.Sleepers(), n)
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
}
