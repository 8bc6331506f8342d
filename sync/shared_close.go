package sync

import (
	"context"
	"errors"
	stdsync "sync"

	"github.com/shardlimit/shardlimit"
)

// closeSignal is a limiter's signal of its Close to its waits (see
// shardlimit.ClosingLimiter): a context cancelled when Close begins. Its
// zero value is ready to use; the context is built at its first use, once.
type closeSignal struct {
	once   stdsync.Once
	ctx    context.Context
	cancel context.CancelFunc
}

// context returns the signal's context, done once close was called.
func (c *closeSignal) context() context.Context {
	c.once.Do(func() { c.ctx, c.cancel = context.WithCancel(context.Background()) })
	return c.ctx
}

// close ends the waits on the signal. It is idempotent.
func (c *closeSignal) close() {
	c.context()
	c.cancel()
}

var _ shardlimit.ClosingLimiter = (*Shared)(nil)

// Closing returns a context that is done once Close or Shutdown has
// begun: WaitN, Wait and shardlimit.WaitUntil end a sleep on s then with
// an error wrapping shardlimit.ErrClosed (s is a
// shardlimit.ClosingLimiter). Safe for concurrent use.
func (s *Shared) Closing() context.Context { return s.closing.context() }

// Flush sends what is pending now instead of at the next interval and
// returns when it is done or ctx is, with an error if items were sent and
// none was applied: it wraps ErrUnavailable, ErrRejected or ErrBadReply
// (by the first failed item) and that item's error. It is what Close does
// last.
func (s *Shared) Flush(ctx context.Context) error {
	if s.closed.Load() {
		return shardlimit.ErrClosed
	}
	if err := s.flush(ctx, false); !errors.Is(err, errNothingSent) {
		return err
	}
	return nil
}

// Close flushes once within FlushTimeout, stops the reconciler and closes
// the local limiter. It is idempotent; later calls return the first's
// result. Decisions after Close return shardlimit.ErrClosed. Waits in
// progress (WaitN, shardlimit.WaitUntil) return an error wrapping
// shardlimit.ErrClosed as soon as Close begins, before the final flush.
func (s *Shared) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	return s.Shutdown(ctx)
}

// Shutdown is Close with the final flush bounded by ctx instead of
// FlushTimeout. It never waits longer than ctx allows for the store. Units
// the final flush provably did not send (ctx had ended, the store refused
// them) are counted in SharedStats.DroppedUnits.
func (s *Shared) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closing.close()
		// If the hub is in a flush to a slow store when ctx ends, the
		// flush ends now (its items become MaybeApplied, sent again as
		// floors below).
		s.leave(ctx)
		err := s.flush(ctx, true)
		if errors.Is(err, errNothingSent) {
			err = nil
		}
		s.closed.Store(true)
		if cerr := s.core.Close(); err == nil {
			err = cerr
		}
		s.closeErr = err
	})
	return s.closeErr
}
