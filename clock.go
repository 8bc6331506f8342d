package shardlimit

import (
	"sync"
	"time"
)

// Clock supplies the current time to the short forms (Allow, AllowBytes),
// the janitor and the Redis reconciler. Implementations must be safe for
// concurrent use.
type Clock interface {
	Now() time.Time
}

// nanoClock is implemented by clocks that can return Unix nanoseconds without
// building a time.Time; the short forms use it when available.
type nanoClock interface {
	unixNano() int64
}

// systemClock is wall time at construction plus monotonic time since: one
// monotonic clock read per call (about half the cost of time.Now), and
// immune to wall-clock steps (NTP slews, manual resets) after construction.
type systemClock struct {
	base     time.Time // carries a monotonic reading
	baseWall int64     // base.UnixNano()
}

// SystemClock returns the default Clock: the wall-clock time at the call plus
// the monotonic time elapsed since. Unlike time.Now it never steps backwards
// or forwards when the system clock is set; it drifts from the wall clock
// only as fast as the monotonic clock does (parts per million). Safe for
// concurrent use.
func SystemClock() Clock {
	now := time.Now()
	return &systemClock{base: now, baseWall: now.UnixNano()}
}

// Now returns the wall time at construction plus the monotonic time since.
func (c *systemClock) Now() time.Time {
	return time.Unix(0, c.unixNano())
}

func (c *systemClock) unixNano() int64 {
	return c.baseWall + int64(time.Since(c.base))
}

// ManualClock is a Clock that only moves when told to, for tests and
// simulations. The zero value reads as the Unix epoch. Safe for concurrent
// use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock reading t.
func NewManualClock(t time.Time) *ManualClock {
	return &ManualClock{now: t}
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
	c.now = t
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
	return c.now
}

// stepTolerance is the largest step back of a key's clock that is taken as
// the jitter of concurrent callers rather than a clock step. Callers read
// the time before they take the shard lock, so one that read earlier may be
// served later; for such a key time stands still (the call is decided at
// the key's latest instant) and nothing moves, so jitter can never make
// usage expire early. A larger step moves the key's state back by the step
// (CASES.md C11), keeping its usage and the waits it had left. A real clock
// step of at most stepTolerance therefore lengthens a wait by at most that.
const stepTolerance = int64(10 * time.Millisecond)

// Bounds of the instants the limiters work with, in Unix nanoseconds. An
// instant before the epoch (including the zero time.Time) is treated as the
// epoch and one after maxInstant as maxInstant, so that instant + 4 windows
// never overflows int64. The epoch clamp looks like a clock step backwards to
// keys already used, which the algorithms handle without handing out quota.
const maxInstant = int64(1<<63-1) - 4*int64(MaxWindow)

// unixNanos converts t to clamped Unix nanoseconds.
func unixNanos(t time.Time) int64 {
	// time.Time.UnixNano is undefined outside years 1678-2262; test the
	// seconds first.
	s := t.Unix()
	if s < 0 {
		return 0
	}
	if s >= maxInstant/1e9 {
		return maxInstant
	}
	return t.UnixNano()
}
