package shardlimit

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// steppedClock is a coarse time source for tests: it reads the true
// instant (set by the test) rounded down to its resolution, the way a
// CoarseClock's tick lags the time it is read at.
type steppedClock struct {
	res  int64
	true atomic.Int64
}

func (c *steppedClock) Now() time.Time  { return time.Unix(0, c.unixNano()) }
func (c *steppedClock) unixNano() int64 { return c.true.Load() / c.res * c.res }
func (c *steppedClock) precise() int64  { return c.true.Load() }

// TestCoarseClockKeepsTheLogExact: with a time source of 1 ms resolution,
// no window of length W of the true instants ever holds more than the
// limit: units are decided at the reading and stamped at the true instant.
func TestCoarseClockKeepsTheLogExact(t *testing.T) {
	for _, w := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		clock := &steppedClock{res: int64(time.Millisecond)}
		clock.true.Store(at(0).UnixNano())
		l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 5, Window: w, Clock: clock})
		rng := rand.New(rand.NewPCG(3, uint64(w)))
		var admitted []time.Time
		for range 20000 {
			clock.true.Add(rng.Int64N(int64(w) / 20))
			if l.Allow("k") {
				admitted = append(admitted, time.Unix(0, clock.true.Load()))
			}
			if r := l.AllowNow("k", 1); r.Allowed {
				admitted = append(admitted, time.Unix(0, clock.true.Load()))
			}
		}
		if got := maxInAnyWindow(admitted, w); got > 5 {
			t.Fatalf("W=%v: %d admitted in one window of true time, limit 5", w, got)
		}
		if len(admitted) < 1000 {
			t.Fatalf("W=%v: only %d admitted: the test tests little", w, len(admitted))
		}
	}
}

// TestCoarseClockRunsWhileHeld: the ticking goroutine starts with the
// first limiter holding the clock and stops with the last one's Close; the
// readings advance while it runs, and Now reads the system clock when no
// limiter holds it.
func TestCoarseClockRunsWhileHeld(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, err := CoarseClock(time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(c.Now()); d < -time.Second || d > time.Second {
		t.Fatalf("an unheld clock reads %v from the system clock", d)
	}
	a := mustNew(t, Config{Algorithm: FixedWindow, Limit: 5, Window: time.Second, Clock: c})
	b := mustNew(t, Config{Algorithm: GCRA, Limit: 5, Window: time.Second, Clock: c})
	first := c.(*coarseClock).unixNano()
	// Wait for a tick by events, not a deadline: the reading moves.
	for c.(*coarseClock).unixNano() == first {
		time.Sleep(100 * time.Microsecond)
	}
	a.Close()
	if c.(*coarseClock).refs.Load() != 1 {
		t.Fatal("the clock let go with a limiter still open")
	}
	b.Close()
	b.Close() // idempotent
	if c.(*coarseClock).refs.Load() != 0 {
		t.Fatal("the clock is still held after the last Close")
	}
	if _, err := CoarseClock(time.Microsecond); err == nil {
		t.Fatal("a resolution under MinResolution was accepted")
	}
}

// TestCoarseClockLogDurationsFromTheTrueInstant: a unit the sliding log
// admits at a lagging reading is stamped at the true instant, and the
// Result's durations are measured from it: a fresh key's ResetAfter is the
// window exactly (a Reset header of 60, not 61, for a minute), and the
// next request fits exactly one window after the true instant.
func TestCoarseClockLogDurationsFromTheTrueInstant(t *testing.T) {
	clock := &steppedClock{res: int64(time.Millisecond)}
	clock.true.Store(at(0).Add(900 * time.Microsecond).UnixNano()) // reads at(0)
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 1, Window: time.Minute, Clock: clock})
	r := l.AllowNow("k", 1)
	if !r.Allowed || r.ResetAfter != time.Minute {
		t.Fatalf("a fresh key at a reading 0.9 ms late: %+v, want ResetAfter 1m", r)
	}
	trueAt := time.Unix(0, clock.true.Load())
	if l.Peek("k", trueAt.Add(time.Minute-1), 1).Allowed {
		t.Fatal("a unit admitted at a lagging reading expired before a window of true time")
	}
	if !l.Peek("k", trueAt.Add(time.Minute), 1).Allowed {
		t.Fatal("a unit admitted at a lagging reading counts longer than its window")
	}
}
