package shardlimit

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Tests of what a coarse time source promises in real time: its readings
// lag the true instant by up to its resolution (more while its goroutine
// is not scheduled), and the docs say the sliding log stays exact in real
// time and the other algorithms err only on the conservative side. Each
// test drives a test clock whose true instant it sets, and checks the
// admissions at their true instants.

// TestCoarseReadingPassedToAllowAtKeepsTheLogExact follows the README's
// quickstart: read the limiter's clock once per request and pass the
// reading to AllowAt. With a clock of 1 ms resolution, no window of length
// W of the true instants may hold more than the limit.
func TestCoarseReadingPassedToAllowAtKeepsTheLogExact(t *testing.T) {
	t.Skip("BUG: AllowAt/AllowN stamp a coarse reading as the true instant (only Allow and AllowNow stamp it a resolution late), so the README's quickstart pattern admits 6 in a real 10 ms window of limit 5")
	for _, w := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		clock := &steppedClock{res: int64(time.Millisecond)}
		clock.true.Store(at(0).UnixNano())
		l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 5, Window: w, Clock: clock})
		rng := rand.New(rand.NewPCG(5, uint64(w)))
		var admitted []time.Time
		for range 20000 {
			clock.true.Add(rng.Int64N(int64(w) / 10))
			start := clock.Now() // "a time read once per request, from the limiter's clock"
			if l.AllowAt("k", start) {
				admitted = append(admitted, time.Unix(0, clock.true.Load()))
			}
			if r := l.AllowN("k", start, 1); r.Allowed {
				admitted = append(admitted, time.Unix(0, clock.true.Load()))
			}
		}
		if got := maxInAnyWindow(admitted, w); got > 5 {
			t.Errorf("W=%v: %d admitted in one window of true time, limit 5", w, got)
		}
		if len(admitted) < 1000 {
			t.Fatalf("W=%v: only %d admitted: the test tests little", w, len(admitted))
		}
	}
}

// stalledClock is a coarse time source whose goroutine is sometimes not
// scheduled: its reading is the true instant rounded down to its
// resolution, except that it freezes while stalled, as a CoarseClock's
// does while its ticking goroutine waits for a processor (a busy server, a
// starved container) or sits out a stop-the-world pause.
type stalledClock struct {
	steppedClock
	frozen *int64 // the reading held during a stall, nil if none
}

func (c *stalledClock) Now() time.Time { return time.Unix(0, c.unixNano()) }
func (c *stalledClock) unixNano() int64 {
	if c.frozen != nil {
		return *c.frozen
	}
	return c.steppedClock.unixNano()
}

// TestCoarseClockStallKeepsTheLogExact: Allow with a coarse clock of 1 ms
// whose goroutine stalls for 6 ms while the key is idle, and requests
// that arrive late in the stall (on a loaded machine both happen at once:
// a real run of a 3-per-5-ms log with two CPU-bound goroutines on two
// cores saw four admissions within 1.07 ms of real time). The README's
// table promises the sliding log "never more than the limit in any window
// of length W".
func TestCoarseClockStallKeepsTheLogExact(t *testing.T) {
	t.Skip("BUG: the sliding log stamps units one resolution after the reading, which bounds the true instant only while the clock's goroutine keeps time; after a 6 ms stall it admits 10 in a real 5 ms window of limit 5 per 10 ms (design: an upper bound needs a clock read on admission)")
	w := 10 * time.Millisecond
	clock := &stalledClock{steppedClock: steppedClock{res: int64(time.Millisecond)}}
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 5, Window: w, Clock: clock})
	var admitted []time.Time
	allow := func(trueAt time.Duration) {
		clock.true.Store(at(0).Add(trueAt).UnixNano())
		for range 5 {
			if l.Allow("k") {
				admitted = append(admitted, at(0).Add(trueAt))
			}
		}
	}
	frozen := at(0).UnixNano()
	clock.frozen = &frozen // the goroutine's last tick was at 0
	allow(6 * time.Millisecond)
	clock.frozen = nil // it runs again
	allow(11 * time.Millisecond)
	if got := maxInAnyWindow(admitted, w); got > 5 {
		t.Errorf("%d admitted in one window of true time, limit 5: at %v", got, admitted)
	}
}

// TestCoarseClockGCRAIsConservative: the README and CoarseClock's doc say
// that at a lagging reading the fixed window, the counter and GCRA decide
// conservatively ("usage expires later"). GCRA of 1 per 10 ms (a burst of
// 1): a request whose reading lags by 0.9 ms and the next, read on time,
// 9.1 ms later in true time, may not both be admitted.
func TestCoarseClockGCRAIsConservative(t *testing.T) {
	t.Skip("BUG: a lagging reading also dates the TAT early, so GCRA admits a unit up to one resolution early in real time (two units 9.1 ms apart at 1 per 10 ms); the docs call every algorithm but the log conservative")
	clock := &steppedClock{res: int64(time.Millisecond)}
	l := mustNew(t, Config{Algorithm: GCRA, Limit: 1, Window: 10 * time.Millisecond, Clock: clock})
	clock.true.Store(at(0).Add(900 * time.Microsecond).UnixNano()) // reads at(0)
	if !l.Allow("k") {
		t.Fatal("the first request was denied")
	}
	clock.true.Store(at(0).Add(10 * time.Millisecond).UnixNano()) // 9.1 ms later, read on time
	if l.Allow("k") {
		t.Error("admitted two requests 9.1 ms apart in true time at 1 per 10 ms")
	}
}
