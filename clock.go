package shardlimit

import (
	"fmt"
	"sync"
	"sync/atomic"
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
	tl timeline
}

// SystemClock returns a Clock that reads the system clock at each call
// (the default is DefaultClock, which does not): the wall-clock time at
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

// CoarseClock returns a Clock that reads, instead of the system clock, the
// time a shared goroutine stored at its latest tick, every resolution
// (at least 100µs; DefaultResolution if 0): one atomic load per decision
// instead of a clock read, whose ordering stalls the processor's pipeline
// (about 25 ns on a hot key, several times that when each decision waits
// on a cache miss). Like SystemClock it is wall time at construction plus
// monotonic time since, immune to wall-clock steps.
//
// Its readings lag the true time by up to the resolution (more while the
// ticking goroutine is not scheduled: a stop-the-world pause, a starved
// process). The short forms (Allow, AllowNow and their byte forms) decide
// at the reading. The fixed window, the sliding counter and GCRA then
// keep their limits over the readings, which may place a request up to the
// lag earlier than it came: in real time a request can be admitted up to
// that much early (the fixed window's next window opens up to a
// resolution late, GCRA's emission interval can look that much shorter).
// The sliding log stays exact in real time: deciding at an earlier instant
// only counts more of the past, and when it admits, it reads the system
// clock once and stamps the units at their true instant, from which the
// Result's durations are measured too. Where the promise and the speed-up
// conflict the promise wins: the log's admissions pay a clock read, its
// denials do not. Instants passed to AllowAt and AllowN are decided as
// given, so pass them time.Now() or your server's request time, not this
// clock's readings.
//
// The goroutine runs while a limiter built with the clock is open: the
// first one starts it, the last one's Close stops it. Now called with no
// limiter open reads the system clock. Safe for concurrent use.
func CoarseClock(resolution time.Duration) (Clock, error) {
	if resolution == 0 {
		resolution = DefaultResolution
	}
	if resolution < MinResolution || resolution > time.Second {
		return nil, fmt.Errorf("%w: clock resolution %v outside [%v, 1s]", ErrInvalidConfig, resolution, MinResolution)
	}
	return &coarseClock{res: resolution, tl: newTimeline()}, nil
}

// DefaultClock returns the Clock limiters use when Config.Clock is nil: one
// CoarseClock of DefaultResolution shared by the whole process, so its
// ticking goroutine runs once, while any limiter built with it is open.
func DefaultClock() Clock { return defaultClock }

var defaultClock = &coarseClock{res: DefaultResolution, tl: newTimeline()}

// Resolutions of CoarseClock.
const (
	// DefaultResolution is the resolution of the default clock.
	DefaultResolution = time.Millisecond
	// MinResolution is the finest resolution CoarseClock accepts.
	MinResolution = 100 * time.Microsecond
)

// coarseClock is CoarseClock's Clock.
type coarseClock struct {
	res time.Duration
	tl  timeline
	now atomic.Int64 // the timeline's instant at the latest tick

	mu   sync.Mutex   // guards the writes of refs, stop and done
	refs atomic.Int32 // limiters holding the clock
	stop chan struct{}
	done chan struct{}
}

// Now returns the instant of the latest tick, or the system clock's if no
// limiter holds the clock.
func (c *coarseClock) Now() time.Time {
	if c.refs.Load() == 0 {
		return time.Unix(0, c.precise())
	}
	return time.Unix(0, c.now.Load())
}

// unixNano is Now for a limiter holding the clock: one atomic load.
func (c *coarseClock) unixNano() int64 { return c.now.Load() }

// precise returns the true current instant on the clock's timeline: the
// system clock's reading, which the ticks store.
func (c *coarseClock) precise() int64 { return c.tl.wall + int64(time.Since(c.tl.start)) }

// acquire starts the ticking goroutine for the first holder. It stores a
// fresh reading before counting the holder: Now reads the stored one as
// soon as refs is positive.
func (c *coarseClock) acquire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs.Load() == 0 {
		c.now.Store(c.precise())
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.tick(c.stop, c.done)
	}
	c.refs.Add(1)
}

// release stops the ticking goroutine when the last holder lets go, and
// waits for it.
func (c *coarseClock) release() {
	c.mu.Lock()
	if c.refs.Add(-1) > 0 {
		c.mu.Unlock()
		return
	}
	stop, done := c.stop, c.done
	c.mu.Unlock()
	close(stop)
	<-done
}

func (c *coarseClock) tick(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.res)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c.now.Store(c.precise())
		}
	}
}

// sharedClock is implemented by clocks a limiter holds while it is open.
type sharedClock interface {
	acquire()
	release()
}

// laggingClock is implemented by clocks whose readings (unixNano) lag the
// true instant, and that can read the true instant too (precise), on the
// same timeline, at a clock read's cost.
type laggingClock interface {
	nanoClock
	precise() int64
}

// ManualClock is a Clock that only moves when told to, for tests and
// simulations. The zero value reads as the Unix epoch. Its readings carry no
// monotonic clock reading, so a ManualClock set back steps a limiter's
// instants back (keys then stand still until it catches up). Safe for
// concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
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
