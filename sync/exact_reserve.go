package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit"
)

// Settle settles a decision made for key at at to its final cost, as
// shardlimit.Limiter.Settle says, in Redis: one call of the algorithm's
// charge script for every rate of the key (an overdraft for delta > 0,
// never refused; a refund for delta < 0, never below zero), in the window
// or bucket the store decided in (GCRA: its theoretical arrival time
// never behind the later of that instant and the store's now). The store
// decides at its own clock (Redis TIME), not at the caller's, so Settle
// finds the store's instant of the decision that at names among the last
// grants of key (the last 8; ExactStats.JournalKeys keys): a charge of a
// decision no longer known goes to the store's current window or bucket
// (later: it counts at least as long), and a refund of one, or of several
// decisions given at the same instant that the store decided in
// different windows, is given back only locally (the store keeps
// counting the units: the strict side, never a unit taken from another
// decision's window); so is a refund at an instant at which a grant
// no longer known was also given. The local fallback, which records this process's
// usage at the caller's instants, is settled too.
//
// While the limiter is Degraded, or when the call fails, a charge is
// kept: the fallback counts it and the journal sends it to Redis when
// the store answers again (see Outages in the package doc), so Settle
// returns nil; when the journal is full of other keys (see
// ExactConfig.JournalKeys), Settle sends the charge at once instead and
// returns the store's error if it fails (the charge is then counted only
// locally, and the store may admit its units again); a refund that cannot reach Redis is given back only
// locally and Settle returns the store's error (the store keeps counting
// the units: the strict side). Errors: shardlimit.ErrInvalidCost for
// |delta| above shardlimit.MaxLimit, ErrInvalidKey, ErrClosed, or the
// store's failure of a refund. Safe for concurrent use.
func (e *Exact) Settle(key string, at time.Time, delta int) error {
	switch {
	case e.closed.Load():
		return shardlimit.ErrClosed
	case delta < -shardlimit.MaxLimit || delta > shardlimit.MaxLimit:
		return fmt.Errorf("%w: settle of %d units, beyond MaxLimit", shardlimit.ErrInvalidCost, delta)
	case len(key) == 0 || len(key) > e.cfg.MaxKeyBytes:
		return shardlimit.ErrInvalidKey
	case delta == 0:
		return nil
	}
	target, found, one := e.storeInstant(key, at)
	var err error
	sent := !e.bypass.Load() && (delta > 0 || one)
	if sent {
		if delta < 0 {
			e.births.forget(key) // a refund may shorten the state's life (GCRA)
		}
		err = e.chargeAt(context.Background(), key, target, delta)
		if errors.Is(err, shardlimit.ErrClosed) {
			return err
		}
	}
	if e.fallback != nil {
		_ = e.fallback.Settle(key, at, delta) // this process's usage, as decisions record it
	}
	if delta < 0 {
		return err
	}
	at0 := target // the store's instant (-1: its now)
	if !found {
		target = e.journalNow()
	}
	// A charge the store did not take (Degraded, or the call failed) waits
	// in the journal for the store to answer again; one it took is
	// recorded as granted, to be restored should the store lose it.
	if !e.journal.record(key, target, delta, !sent || err != nil) {
		if !sent {
			// No room to keep it for the store: send it now (more units
			// in the store, never fewer), or tell the caller it is lost.
			err = e.chargeAt(context.Background(), key, at0, delta)
		}
		return err // nil: applied in the store; only its restoration is lost (JournalFull counts it)
	}
	return nil
}

// storeInstant returns the store's instant (Unix µs) of the decision of
// key given at at: with callerTime, at itself; else the latest of key's
// last grants given at at (see journal.storeInstant), or -1 (the store's
// now) if none is known; found says whether one is, one whether all of
// them fall in one window or bucket of every rate.
func (e *Exact) storeInstant(key string, at time.Time) (target int64, found, one bool) {
	caller := e.instant(at)
	if e.callerTime {
		return caller, true, true
	}
	target, found, one = e.journal.storeInstant(key, caller)
	if !found {
		target = -1
	}
	return target, found, one
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
// order they called. Close ends a wait in progress with an error
// wrapping shardlimit.ErrClosed (see Closing).
func (e *Exact) WaitN(ctx context.Context, key string, n int) error {
	return shardlimit.WaitFor(ctx, e, e.cfg.Clock, key, n)
}

// Wait is WaitN(ctx, key, 1).
func (e *Exact) Wait(ctx context.Context, key string) error { return e.WaitN(ctx, key, 1) }
