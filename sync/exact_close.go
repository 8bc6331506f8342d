package sync

import (
	"context"
	"fmt"

	"github.com/shardlimit/shardlimit"
)

// begin registers a Redis call in flight, or returns false if the limiter
// is closed.
func (e *Exact) begin() bool {
	e.gate.RLock()
	defer e.gate.RUnlock()
	if e.closed.Load() {
		return false
	}
	e.inflight.Add(1)
	return true
}

// end unregisters a Redis call that has returned.
func (e *Exact) end() {
	if e.inflight.Add(-1) == 0 && e.closed.Load() {
		e.drainOnce.Do(func() { close(e.drained) })
	}
}

var _ shardlimit.ClosingLimiter = (*Exact)(nil)

// Closing returns a context that is done once Close or Shutdown has
// begun: WaitN, Wait and shardlimit.WaitUntil end a sleep on e then with
// an error wrapping shardlimit.ErrClosed (e is a
// shardlimit.ClosingLimiter). Safe for concurrent use.
func (e *Exact) Closing() context.Context { return e.closing.context() }

// Close is Shutdown with a deadline of one Timeout from now: every call in
// flight was started with that bound, so with a client that ends its
// socket calls at their context's deadline (ContextTimeoutEnabled) none is
// left by then.
func (e *Exact) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	return e.Shutdown(ctx)
}

// Shutdown leaves the client's background goroutine (stopping it if e
// was its last limiter; a round of it in flight when ctx ends is ended),
// waits until no Redis call is in flight or ctx is done, and
// closes the fallback if NewExact built it. It returns within ctx's
// deadline whatever Redis does. A call abandoned at its Timeout stays in
// flight until the client ends it: at once with ContextTimeoutEnabled, else
// by its ReadTimeout, never with a ReadTimeout of -1 (see the package doc);
// if some are left when ctx is done, Shutdown returns an error wrapping
// ErrUnavailable and ctx's error (such a call only waits for its reply:
// nothing new is sent unless the client re-sends it, see MaxRetries in the
// package doc). Shutdown sends nothing to Redis and is idempotent: later
// calls, and Close, return the first one's result. Afterwards decisions
// return ErrClosed, and waits in progress (WaitN, shardlimit.WaitUntil)
// return an error wrapping ErrClosed as soon as Shutdown begins. The Redis client stays the caller's.
func (e *Exact) Shutdown(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.gate.Lock()
		e.closed.Store(true)
		e.gate.Unlock()
		e.closing.close()
		if e.inflight.Load() == 0 {
			e.drainOnce.Do(func() { close(e.drained) })
		}
		e.leave(ctx)
		select {
		case <-e.drained:
		case <-ctx.Done():
			e.closeErr = fmt.Errorf("%w: %d calls still in flight at shutdown: %w", ErrUnavailable, e.inflight.Load(), ctx.Err())
		}
		e.closeFallback()
		e.deny.invalidateAll()
	})
	return e.closeErr
}
