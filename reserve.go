package shardlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit/internal/core"
)

// Sentinel errors of reservations and waits (see Limiter.ReserveN and
// Limiter.WaitN).
var (
	// ErrExceedsLimit reports a cost that no wait can admit: above the
	// key's limit, or a limit of 0 (RetryAfter Never).
	ErrExceedsLimit = core.ErrExceedsLimit
	// ErrNotHeld reports a reservation the limiter did not hold for the
	// caller: a SlidingLog holds units only up to its longest window
	// after the key's latest instant and twice its limit of stamps, and
	// package sync's limiters hold none for later. The Reservation's
	// Delay says when to try again.
	ErrNotHeld = core.ErrNotHeld
	// ErrWouldExceedDeadline reports a wait longer than the context's
	// deadline allows: WaitN returns it at once, holding nothing.
	ErrWouldExceedDeadline = core.ErrWouldExceedDeadline
	// ErrUnsupported reports a method the limiter cannot carry out (the
	// limiter cannot do this).
	ErrUnsupported = core.ErrUnsupported
)

// Reservation is units of one key held for a caller by Limiter.ReserveN,
// returned by value (it allocates nothing). Its zero value is not OK.
//
// A reservation holds its limiter, key, cost and instants, so it can be
// cancelled. It is safe for concurrent use (it never changes). Cancel it
// at most once, counting every copy of the value (copies are the same
// reservation), and do not also Settle a refund of its units: a value
// cannot remember that it was cancelled (it would need memory shared by
// its copies, an allocation per reservation), and a second cancel gives
// back units again, which by then are other decisions'
// (TestReserveRandomNeverOverAdmits found this). A charge (Settle with a
// positive delta) of a reservation's units is always safe.
type Reservation struct {
	lim   Limiter
	core  reserver // nil for a Limiter that holds no units for later
	prev  int64    // core's Reserved.Prev, for Cancel
	clock Clock
	key   string
	now   time.Time     // ReserveN's now
	at    time.Time     // the instant the units count at
	delay time.Duration // from now until the units are the caller's
	n     int
	err   error
	ok    bool
}

// OK reports whether the units are held for the caller: false when the
// cost can never be admitted (Err wraps ErrExceedsLimit), when they are
// free only too far ahead (ErrNotHeld) or when the call failed (an invalid
// key, cost or instant, a full table, a closed limiter).
func (r Reservation) OK() bool { return r.ok }

// Err returns why the reservation is not OK, nil if it is.
func (r Reservation) Err() error { return r.err }

// Delay returns DelayFrom(now), now the instant passed to ReserveN: 0 if
// the units were admitted at once.
func (r Reservation) Delay() time.Duration { return r.DelayFrom(r.now) }

// DelayFrom returns the time from t until the units are the caller's, 0
// if they are already. Not OK: the time from t until the same request
// could succeed, as Result.RetryAfter (Never if none can).
func (r Reservation) DelayFrom(t time.Time) time.Duration {
	if r.delay == Never {
		return Never
	}
	return max(0, r.now.Add(r.delay).Sub(t))
}

// Cancel is CancelAt at the limiter's Clock.
func (r Reservation) Cancel() {
	if r.ok && r.n > 0 {
		r.CancelAt(r.clock.Now())
	}
}

// CancelAt gives the reservation's units back, as far as decisions made
// after it allow, if now is before the units are the caller's (as
// x/time/rate's CancelAt; a reservation whose time has passed is the
// caller's, and cancelling it does nothing). It settles the units
// at the instant they count at, Limiter.Settle(key, at, -n), so each
// algorithm gives back exactly what that documents: the fixed window the
// units of its window while current, the counter those of their bucket,
// the sliding log their stamps, GCRA the TAT (less what the bucket has
// drained since and what the reservations after it hold; cancelling the
// key's latest reservation restores the one before it as the latest, as
// x/time/rate does, so reservations cancelled newest first all come back
// whole). A fixed window or counter reservation moved the
// key to a later window or bucket; after a cancel the key stays there (the
// windows before it still deny), so a cancel never frees room a window
// does not have.
func (r Reservation) CancelAt(now time.Time) {
	if !r.ok || r.n == 0 || now.After(r.now.Add(r.delay)) {
		return
	}
	if r.core != nil {
		_ = r.core.Cancel(r.key, r.at, r.n, r.prev)
		return
	}
	_ = r.lim.Settle(r.key, r.at, -r.n)
}

// NewReservation returns the reservation a Limiter that holds no units
// for later (package sync's) makes of res, its decision of n units for
// key at now: OK, and cancellable through l.Settle, if res admitted them;
// otherwise not OK, with res.RetryAfter as its Delay and an Err wrapping
// ErrNotHeld, ErrExceedsLimit or res.Err. Cancel reads clock, the
// limiter's. Use it to implement Limiter.ReserveN.
func NewReservation(l Limiter, clock Clock, key string, now time.Time, n int, res Result) Reservation {
	r := Reservation{lim: l, clock: clock, key: key, now: now, at: now, n: n, ok: res.Allowed}
	switch {
	case res.Err != nil:
		r.err, r.delay = res.Err, Never
	case res.Allowed:
	case res.RetryAfter == Never:
		r.err, r.delay = ErrExceedsLimit, Never
	default:
		r.err, r.delay = ErrNotHeld, res.RetryAfter
	}
	return r
}

// reserver is what the root's limiters hold: internal/core's limiter.
type reserver interface {
	Reserve(key string, now time.Time, n int, maxWait time.Duration) core.Reserved
	Clock() core.Clock
	Instant(now time.Time) int64
	Closing() context.Context
	Cancel(key string, at time.Time, n int, prev int64) error
}

// reserveN is Limiter.ReserveN of l, whose core limiter is c.
func reserveN(l Limiter, c reserver, key string, now time.Time, n int) Reservation {
	return reservation(l, c, key, now, n, c.Reserve(key, now, n, Never))
}

// reservation returns the Reservation of l that core's r describes.
func reservation(l Limiter, c reserver, key string, now time.Time, n int, r core.Reserved) Reservation {
	res := Reservation{lim: l, core: c, prev: r.Prev, clock: c.Clock(), key: key, now: now, delay: r.Delay, n: n, err: r.Err, ok: r.OK}
	if r.OK {
		res.at = now.Add(time.Duration(r.At - c.Instant(now)))
	}
	return res
}

// waitN is Limiter.WaitN of l, whose core limiter is c: it reserves the
// units at the limiter's Clock, never longer ahead than ctx's deadline
// allows, and sleeps on the Clock until they are the caller's. Waiters
// on one key are served in the order of their reservations, which is the
// order they called in (see core's reserve for the sliding log). A
// cancelled waiter cancels its reservation: it holds nothing.
func waitN(ctx context.Context, l Limiter, c reserver, key string, n int) error {
	clock := c.Clock()
	return waitLoop(ctx, clock, c.Closing(), key, n, func(now time.Time, maxWait time.Duration) Reservation {
		return reservation(l, c, key, now, n, c.Reserve(key, now, n, maxWait))
	})
}

// WaitFor implements Limiter.WaitN for a Limiter l that holds no units for
// later (package sync's): it decides n units at clock's time and, when
// they are denied, sleeps until their RetryAfter and tries again, so
// waiters are not served in any order. The errors are WaitN's; the error
// wrapping ErrClosed when l closes during a sleep needs l to be a
// ClosingLimiter (without it, the sleep lasts until the RetryAfter or
// until ctx ends). A key that admits at once costs one AllowN and
// allocates nothing more.
func WaitFor(ctx context.Context, l Limiter, clock Clock, key string, n int) error {
	return waitLoop(ctx, clock, closingOf(l), key, n, func(now time.Time, _ time.Duration) Reservation {
		return NewReservation(l, clock, key, now, n, l.AllowN(key, now, n))
	})
}

// ClosingLimiter is a Limiter, implemented outside this package, that
// signals its Close to its waits: WaitFor and WaitUntil end a sleep on
// it with an error wrapping ErrClosed as soon as Closing's context is
// done, and at once if it already is. Package sync's Shared and Exact
// implement it. The limiters of this package (New and the constructors)
// end their waits themselves and need not implement it.
//
// The signal is a context.Context rather than a bare channel because a
// sleep ties it to the caller's context with context.AfterFunc, which
// starts no goroutine for a context of package context (a bare channel
// would need one goroutine per sleeping waiter).
type ClosingLimiter interface {
	Limiter
	// Closing returns a context that is done once Close (or a Shutdown)
	// has begun, and never before: the same context at every call, never
	// nil, and allocating nothing (a waiter calls it before it sleeps).
	// Build it with context.WithCancel(context.Background()) and cancel it
	// in Close. Safe for concurrent use.
	Closing() context.Context
}

// closingOf returns l's close signal: a context done when l closes, nil if
// l gives none (not a ClosingLimiter).
func closingOf(l Limiter) context.Context {
	if c, ok := l.(coreHolder); ok {
		return c.coreLimiter().Closing()
	}
	if c, ok := l.(ClosingLimiter); ok {
		return c.Closing()
	}
	return nil
}

// maxWaitRounds bounds the reservations one wait makes when the limiter
// does not hold its units (ErrNotHeld): each round sleeps until the units
// should be free.
const maxWaitRounds = 1 << 20

// waitLoop waits for reserve's units: at once if they are admitted, after
// sleeping on clock until they are the caller's if held, and again after
// the Delay if not held. A sleep ends when closing (the limiter's, nil if
// none) is done too: a limiter closed during the wait returns ErrClosed.
func waitLoop(ctx context.Context, clock Clock, closing context.Context, key string, n int, reserve func(now time.Time, maxWait time.Duration) Reservation) error {
	for range maxWaitRounds {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("shardlimit: wait for %d units of %q: %w", n, key, err)
		}
		now := clock.Now()
		maxWait := Never
		if dl, ok := ctx.Deadline(); ok {
			maxWait = dl.Sub(now)
		}
		r := reserve(now, maxWait)
		d := r.DelayFrom(now)
		switch {
		case r.ok && d == 0:
			return nil
		case r.ok:
		case errors.Is(r.err, ErrNotHeld) && d <= maxWait:
		case errors.Is(r.err, ErrNotHeld):
			return fmt.Errorf("%w: %d units of %q are free in %v", ErrWouldExceedDeadline, n, key, d)
		default:
			return fmt.Errorf("shardlimit: wait for %d units of %q: %w", n, key, r.err)
		}
		if err := sleepUntil(ctx, closing, clock, now.Add(d)); err != nil {
			r.CancelAt(clock.Now())
			return fmt.Errorf("shardlimit: wait for %d units of %q: %w", n, key, err)
		}
		if r.ok {
			return nil
		}
	}
	return fmt.Errorf("%w: %d units of %q after %d tries", ErrNotHeld, n, key, maxWaitRounds)
}

// sleepUntil is SleepUntil, ended early when closing (the limiter's,
// nil if none) is done too: then, or at once if it already is, it
// returns ErrClosed. It starts no goroutine while it sleeps.
func sleepUntil(ctx, closing context.Context, clock Clock, t time.Time) error {
	if closing == nil {
		return SleepUntil(ctx, clock, t)
	}
	if closing.Err() != nil {
		return ErrClosed
	}
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(closing, cancel)
	err := SleepUntil(sctx, clock, t)
	stop()
	cancel()
	if err != nil && ctx.Err() == nil && closing.Err() != nil {
		err = ErrClosed
	}
	return err
}

// coreHolder is a Limiter of this package: it reaches its core limiter.
type coreHolder interface{ coreLimiter() reserver }

// WaitUntil sleeps on l's Clock until it reads t or later, and returns
// nil: a wait of your own on a limiter's time (until the instant a
// server asked a client to wait for, say) that ends with the limiter as
// WaitN's waits do. It returns an error wrapping ctx.Err() when ctx ends
// first, and one wrapping ErrClosed when l is closed first, at once if it
// already is: l is a limiter of this package (New and the constructors)
// or a ClosingLimiter (package sync's Shared and Exact). Another Limiter
// gives no close signal: with it WaitUntil sleeps until t or until ctx
// ends. A ManualClock's sleepers wake when it is advanced. A nil l
// returns an error wrapping ErrInvalidConfig. Safe for concurrent use; it
// starts no goroutine while it sleeps.
func WaitUntil(ctx context.Context, l Limiter, t time.Time) error {
	var clock Clock
	if l == nil {
		return fmt.Errorf("%w: WaitUntil of a nil Limiter", ErrInvalidConfig)
	}
	if c, ok := l.(coreHolder); ok {
		clock = c.coreLimiter().Clock()
	} else if clock = l.Config().Clock; clock == nil {
		clock = DefaultClock()
	}
	if err := sleepUntil(ctx, closingOf(l), clock, t); err != nil {
		return fmt.Errorf("shardlimit: wait until %v: %w", t, err)
	}
	return nil
}

// SleepClock is a Clock that can sleep until it reads an instant.
// SystemClock, DefaultClock and ManualClock implement it; WaitN sleeps on
// the limiter's Clock through it.
type SleepClock interface {
	Clock
	// SleepUntil blocks until the clock reads t or later, or ctx is done
	// (it returns ctx.Err() then). Safe for concurrent use.
	SleepUntil(ctx context.Context, t time.Time) error
}

// SleepUntil sleeps until clock reads t or later, or ctx is done (it
// returns ctx.Err() then): through clock's SleepUntil if it is a
// SleepClock, else on a timer of the real time t.Sub(clock.Now()).
func SleepUntil(ctx context.Context, clock Clock, t time.Time) error {
	if c, ok := clock.(SleepClock); ok {
		return c.SleepUntil(ctx, t)
	}
	return core.SleepFor(ctx, t.Sub(clock.Now()))
}
