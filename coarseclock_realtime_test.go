package shardlimit

import (
	"testing"
	"time"
)

// Tests of what a coarse time source promises in real time: its readings
// lag the true instant by up to its resolution (more while its goroutine
// is not scheduled), and the docs say the sliding log stays exact in real
// time. Each test drives a test clock whose true instant it sets, and
// checks the admissions at their true instants.

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
