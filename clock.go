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
// the jitter of concurrent callers (or of request times read a little before
// the decision): time stands still for the key and nothing moves. See
// shard.stepCheck for larger steps. A real clock step of at most
// stepTolerance therefore lengthens a wait by at most that.
const stepTolerance = int64(time.Second)

// maxInstant bounds the instants the limiters accept, in Unix nanoseconds
// (about the year 2222), so that an instant plus four windows never
// overflows int64.
const maxInstant = int64(1<<63-1) - 4*int64(MaxWindow)

// invalidInstant is what unixNanos returns for an instant outside
// [Unix epoch, maxInstant].
const invalidInstant = -1

// unixNanos converts t to Unix nanoseconds, or invalidInstant if t is before
// the Unix epoch (including the zero time.Time, a caller's bug) or after
// maxInstant.
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
