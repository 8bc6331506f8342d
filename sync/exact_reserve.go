package sync

import (
	"context"
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit"
)

// Settle is not yet supported by Exact: it returns an error wrapping
// shardlimit.ErrUnsupported (a charge script in Redis will carry it out
// in one call).
func (e *Exact) Settle(key string, at time.Time, delta int) error {
	return fmt.Errorf("%w: Exact.Settle", shardlimit.ErrUnsupported)
}

// ReserveN decides n units of key now, as AllowN does (in Redis), and
// returns the outcome as a Reservation: Exact holds no units for later,
// so the reservation is OK with Delay 0 when the units are admitted, and
// otherwise not OK, its Err wrapping shardlimit.ErrNotHeld and its Delay
// the decision's RetryAfter (or shardlimit.ErrExceedsLimit and Never).
// Cancelling it settles its units back through Settle.
func (e *Exact) ReserveN(key string, now time.Time, n int) shardlimit.Reservation {
	return shardlimit.NewReservation(e, e.cfg.Clock, key, now, n, e.AllowN(key, now, n))
}

// WaitN blocks until n units of key are admitted, as
// shardlimit.Limiter.WaitN with its errors, deciding in Redis again after
// each RetryAfter (on Config.Clock): waiters are not admitted in the
// order they called.
func (e *Exact) WaitN(ctx context.Context, key string, n int) error {
	return shardlimit.WaitFor(ctx, e, e.cfg.Clock, key, n)
}

// Wait is WaitN(ctx, key, 1).
func (e *Exact) Wait(ctx context.Context, key string) error { return e.WaitN(ctx, key, 1) }
