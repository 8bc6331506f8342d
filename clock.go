package shardlimit

import (
	"context"
	"time"

	"github.com/shardlimit/shardlimit/internal/core"
)

// Clock supplies the current time to Allow, the janitor and the Redis
// reconciler. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time. Limiters call it from many goroutines
	// at once. A reading before the Unix epoch or after 2222 makes the
	// decision that read it return ErrInvalidTime.
	Now() time.Time
}

// SystemClock returns a Clock that reads the system clock at each call
// (DefaultClock is one shared by the process): the wall-clock time at
// the call to SystemClock plus the monotonic time elapsed since. Unlike
// time.Now it never steps backwards or forwards when the system clock is
// set; it drifts from the wall clock only as fast as the monotonic clock
// does (parts per million). Safe for concurrent use.
func SystemClock() Clock { return core.SystemClock() }

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
func DefaultClock() Clock { return core.DefaultClock() }

// ManualClock is a Clock that only moves when told to, for tests and
// simulations. The zero value reads as the Unix epoch. Its readings carry no
// monotonic clock reading, so a ManualClock set back steps a limiter's
// instants back (keys then stand still until it catches up). Safe for
// concurrent use.
type ManualClock struct {
	c core.ManualClock
}

// NewManualClock returns a ManualClock reading t (its monotonic clock
// reading, if any, stripped).
func NewManualClock(t time.Time) *ManualClock {
	c := &ManualClock{}
	c.c.Set(t)
	return c
}

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Time { return c.c.Now() }

// Set moves the clock to t, which may be earlier than its current reading
// (a clock stepping backwards).
func (c *ManualClock) Set(t time.Time) { c.c.Set(t) }

// Advance moves the clock by d (negative d steps it back) and returns the
// new reading.
func (c *ManualClock) Advance(d time.Duration) time.Time { return c.c.Advance(d) }

// SleepUntil blocks until the clock is set (Set, Advance) to t or later,
// or ctx is done (it returns ctx.Err() then). WaitN sleeps on it, so a
// test drives waiters by advancing the clock.
func (c *ManualClock) SleepUntil(ctx context.Context, t time.Time) error {
	return c.c.SleepUntil(ctx, t)
}

// Sleepers returns how many goroutines sleep on the clock (SleepUntil,
// WaitN): a test waits for the count it expects before it advances the
// clock.
func (c *ManualClock) Sleepers() int { return c.c.Sleepers() }
