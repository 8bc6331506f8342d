package sync

import (
	"context"
	"time"

	"github.com/shardlimit/shardlimit"
)

// Settle settles a decision made for key at at to its final cost, in the
// local limiter (see shardlimit.Limiter.Settle): a charge counts as units
// this node admitted, sent to the store with the next flush; a refund
// takes back only units not yet sent, of the decision's own window or
// bucket (the store keeps what it was sent, so the cluster's count never
// drops below what was admitted, and a refund never takes back another
// decision's units), and gives the local count back as far as the local
// limiter allows. While Degraded it settles the local limiter all the
// same. Errors as shardlimit.Limiter.Settle's.
func (s *Shared) Settle(key string, at time.Time, delta int) error {
	return s.core.Settle(key, at, delta)
}

// ReserveN decides n units of key at now, as AllowN does, and returns
// the outcome as a Reservation: Shared holds no units for later (the
// other nodes would not see them), so the reservation is OK with Delay 0
// when the units are admitted, and otherwise not OK, its Err wrapping
// shardlimit.ErrNotHeld and its Delay the decision's RetryAfter (or
// shardlimit.ErrExceedsLimit and Never). Cancelling an OK reservation
// settles its units back (Settle).
func (s *Shared) ReserveN(key string, now time.Time, n int) shardlimit.Reservation {
	return shardlimit.NewReservation(s, s.clock, key, now, n, s.AllowN(key, now, n))
}

// WaitN blocks until n units of key are admitted at the limiter's Clock,
// as shardlimit.Limiter.WaitN with its errors, but by deciding again
// after each RetryAfter (see ReserveN): waiters are not admitted in the
// order they called, and a large cost may wait behind small ones. Close
// ends a wait in progress with an error wrapping shardlimit.ErrClosed
// (see Closing).
func (s *Shared) WaitN(ctx context.Context, key string, n int) error {
	return shardlimit.WaitFor(ctx, s, s.clock, key, n)
}

// Wait is WaitN(ctx, key, 1).
func (s *Shared) Wait(ctx context.Context, key string) error { return s.WaitN(ctx, key, 1) }
