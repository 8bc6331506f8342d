package core

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Clock supplies the current time to Allow, the janitor and the Redis
// reconciler. Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// nanoClock is implemented by clocks that can return Unix nanoseconds without
// building a time.Time; Allow uses it when available.
type nanoClock interface {
	unixNano() int64
}

// systemClock is wall time at construction plus monotonic time since: one
// monotonic clock read per call (about half the cost of time.Now), and
// immune to wall-clock steps (NTP slews, manual resets) after construction.
type systemClock struct {
	tl timeline
}

// SystemClock returns a Clock that reads the system clock at each call
// (DefaultClock is one shared by the process): the wall-clock time at
// the call to SystemClock plus the monotonic time elapsed since. Unlike
// time.Now it never steps backwards or forwards when the system clock is
// set; it drifts from the wall clock only as fast as the monotonic clock
// does (parts per million). Safe for concurrent use.
func SystemClock() Clock {
	return &systemClock{tl: newTimeline()}
}

// Now returns the wall time at construction plus the monotonic time since.
func (c *systemClock) Now() time.Time {
	return time.Unix(0, c.unixNano())
}

func (c *systemClock) unixNano() int64 {
	return c.tl.wall + int64(time.Since(c.tl.start))
}

// DefaultClock returns the Clock limiters use when Config.Clock is nil: one
// SystemClock shared by the whole process, so that limiters built without
// a Clock place instants on one timeline.
//
// It reads the system's monotonic clock at every call, so a decision made
// at its reading is made at the true instant, however loaded the machine:
// no reading ever lags real time. A clock read from a value that a
// goroutine advances (a coarse clock) costs less per decision (one atomic
// load instead of a clock read: about 40 ns less per Allow on a hot key),
// but its readings fall behind whenever that goroutine is not scheduled,
// tens of milliseconds on an overloaded machine, and every algorithm but
// the sliding log then admits early in real time. Overload is when limits
// matter most, so the promise wins over the speed-up and this package
// offers no coarse clock. A server that already holds the time of a
// request (time.Now() read once per request) passes it to AllowN instead
// of reading a clock twice.
func DefaultClock() Clock { return defaultClock }

var defaultClock = &systemClock{tl: newTimeline()}

// ManualClock is a Clock that only moves when told to, for tests and
// simulations. The zero value reads as the Unix epoch. Its readings carry no
// monotonic clock reading, so a ManualClock set back steps a limiter's
// instants back (keys then stand still until it catches up). Safe for
// concurrent use.
type ManualClock struct {
	mu       sync.Mutex
	now      time.Time
	sleepers []*manualSleeper // SleepUntil's, woken by Set and Advance
}

// NewManualClock returns a ManualClock reading t (its monotonic clock
// reading, if any, stripped).
func NewManualClock(t time.Time) *ManualClock {
	return &ManualClock{now: t.Round(0)}
}

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		return time.Unix(0, 0)
	}
	return c.now
}

// Set moves the clock to t, which may be earlier than its current reading
// (a clock stepping backwards).
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.Round(0)
	c.wakeLocked()
	c.mu.Unlock()
}

// Advance moves the clock by d (negative d steps it back) and returns the
// new reading.
func (c *ManualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = time.Unix(0, 0)
	}
	c.now = c.now.Add(d)
	c.wakeLocked()
	return c.now
}

// maxInstant bounds the instants the limiters accept, in Unix nanoseconds
// (about the year 2222), so that an instant plus four windows never
// overflows int64.
const maxInstant = int64(1<<63-1) - 4*int64(MaxWindow)

// invalidInstant is what timeline.instant returns for an instant outside
// [Unix epoch, maxInstant].
const invalidInstant = -1

// timeline places instants on a limiter's time axis, in Unix nanoseconds:
// wall, the wall-clock reading of start, plus now.Sub(start). For an instant
// that carries Go's monotonic clock reading (every time.Time from
// time.Now()), Sub is the monotonic difference, so a wall clock set back or
// forward after start never reaches the limiter; for one without (time.Unix,
// a parsed time, a ManualClock) it is the wall difference, and the result is
// exactly now.UnixNano().
type timeline struct {
	start time.Time // carries a monotonic reading
	wall  int64     // start.UnixNano()
}

func newTimeline() timeline {
	now := time.Now()
	return timeline{start: now, wall: now.UnixNano()}
}

// instant returns now on the timeline, or invalidInstant if it falls before
// the Unix epoch (the zero time.Time included, a caller's bug) or after
// maxInstant.
func (tl *timeline) instant(now time.Time) int64 {
	if now == now.In(now.Location()) {
		// No monotonic reading (In strips one, keeping the location):
		// the wall difference, which Sub would compute with an overflow
		// check costing three times a whole decision, is the Unix time.
		return unixNanos(now)
	}
	// Both carry a monotonic reading: Sub is their difference, far
	// inside its ±292 years for any start in the accepted range.
	d := int64(now.Sub(tl.start))
	if d < -tl.wall || d > maxInstant-tl.wall {
		return invalidInstant
	}
	return tl.wall + d
}

// unixNanos returns t's Unix time in nanoseconds, or invalidInstant if t is
// before the Unix epoch or after maxInstant.
func unixNanos(t time.Time) int64 {
	// time.Time.UnixNano is undefined outside years 1678-2262; test the
	// seconds first.
	if s := t.Unix(); s < 0 || s > maxInstant/1e9 {
		return invalidInstant
	}
	if ns := t.UnixNano(); ns <= maxInstant {
		return ns
	}
	return invalidInstant
}

// SleepFor blocks for d of real time on a timer, or until ctx is done (it
// returns ctx.Err() then). d <= 0 returns at once.
func SleepFor(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SleepUntil blocks until the clock reads t or later, or ctx is done.
func (c *systemClock) SleepUntil(ctx context.Context, t time.Time) error {
	return SleepFor(ctx, t.Sub(c.Now()))
}

// SleepUntil blocks until the clock is set to t or later, or ctx is done
// (it returns ctx.Err() then): each Set and Advance wakes the sleepers
// whose instant it reached.
func (c *ManualClock) SleepUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	if !c.readLocked().Before(t) {
		c.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	w := &manualSleeper{until: t, wake: ch}
	c.sleepers = append(c.sleepers, w)
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		c.sleepers = slices.DeleteFunc(c.sleepers, func(s *manualSleeper) bool { return s == w })
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Sleepers returns how many goroutines sleep on the clock (SleepUntil):
// tests wait for it to reach a count before they advance the clock.
func (c *ManualClock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sleepers)
}

// manualSleeper is one SleepUntil on a ManualClock.
type manualSleeper struct {
	until time.Time
	wake  chan struct{}
}

// wakeLocked wakes the sleepers whose instant the clock reached. Requires
// c.mu held.
func (c *ManualClock) wakeLocked() {
	now := c.readLocked()
	c.sleepers = slices.DeleteFunc(c.sleepers, func(s *manualSleeper) bool {
		if now.Before(s.until) {
			return false
		}
		close(s.wake)
		return true
	})
}

// readLocked returns the clock's reading. Requires c.mu held.
func (c *ManualClock) readLocked() time.Time {
	if c.now.IsZero() {
		return time.Unix(0, 0)
	}
	return c.now
}
