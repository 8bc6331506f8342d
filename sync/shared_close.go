package sync

import (
	"context"
	"errors"

	"github.com/shardlimit/shardlimit"
)

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
// result. Decisions after Close return shardlimit.ErrClosed.
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
