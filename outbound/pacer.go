package outbound

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit"
)

// Sentinel errors. Every error of this package wraps one of them, or the
// error of the limiter, the context or the request that caused it, so
// callers test with errors.Is.
var (
	// ErrLimited reports a call failed fast (Config.FailFast): its key's
	// limiter denied it, or a hold covers it (then the error wraps
	// ErrHeld too). errors.As with a *LimitError reads when to try again.
	ErrLimited = errors.New("outbound: rate limited")
	// ErrHeld reports a call on a key that a server asked to wait (Hold):
	// failed fast while the hold lasts, or waiting for it would pass the
	// context's deadline (then the error wraps
	// shardlimit.ErrWouldExceedDeadline too).
	ErrHeld = errors.New("outbound: key held by the server's answer")
	// ErrInvalidConfig reports a Config or TransportConfig field out of
	// range or missing.
	ErrInvalidConfig = errors.New("outbound: invalid config")
	// ErrInvalidKey reports an empty key, one longer than the limiter's
	// MaxKeyBytes, or a request no key could be made of. It is
	// shardlimit.ErrInvalidKey, so one errors.Is finds it whether the
	// limiter (Take) or this package (Hold, a Transport's Key) refused
	// the key.
	ErrInvalidKey = shardlimit.ErrInvalidKey
)

// Defaults and bounds of Config.
const (
	// DefaultMaxHolds is Config.MaxHolds when zero: keys held at once.
	DefaultMaxHolds = 4096
	// MaxMaxHolds is the largest Config.MaxHolds.
	MaxMaxHolds = 1 << 20
	// DefaultMaxHold is Config.MaxHold when zero: the longest hold honoured.
	DefaultMaxHold = time.Hour
)

// Config configures a Pacer. Limiter is required; every other field has a
// default.
type Config struct {
	// Limiter decides each call's units per key (required): configure it
	// with the service's limit, or below it. Its Clock is the Pacer's:
	// waits, holds and Retry-After dates are read on it.
	Limiter shardlimit.Limiter

	// FailFast makes Take return at once an error wrapping ErrLimited when
	// the limiter denies the call or a hold covers it, instead of waiting.
	// Default false: Take waits.
	FailFast bool

	// MaxHolds caps the keys held at once, in [1, MaxMaxHolds]; default
	// DefaultMaxHolds. A new hold in a full table first removes expired
	// holds, then the hold that ends soonest (the holds are a min-heap by
	// their end: O(log MaxHolds) per hold removed), so many keys never
	// grow memory past the cap; a dropped hold's key is then paced by its
	// limiter alone.
	MaxHolds int

	// MaxHold is the longest hold honoured, in (0, shardlimit.MaxWindow];
	// default DefaultMaxHold. A later until is cut to now+MaxHold, so a
	// server's absurd Retry-After cannot stop a key for days.
	MaxHold time.Duration
}

// Pacer paces outgoing calls per key: Take takes each call's units from
// the limiter, waiting for them or failing fast, and honours holds set by
// Hold (a server's "retry after"). It never lets a call through that the
// limiter denies or that a stored hold covers (a table full of holds
// drops one to store another: see Config.MaxHolds). All methods are safe for
// concurrent use. A Pacer starts no goroutine and needs no Close: close
// its limiter when done.
type Pacer struct {
	lim      shardlimit.Limiter
	clock    shardlimit.Clock
	holds    *holdTable
	maxHold  time.Duration
	maxKey   int
	failFast bool
}

// New returns a Pacer for cfg. It returns an error wrapping
// ErrInvalidConfig if cfg.Limiter is nil or a field is out of range.
func New(cfg Config) (*Pacer, error) {
	if cfg.Limiter == nil {
		return nil, fmt.Errorf("%w: Limiter is required", ErrInvalidConfig)
	}
	if cfg.MaxHolds == 0 {
		cfg.MaxHolds = DefaultMaxHolds
	}
	if cfg.MaxHolds < 1 || cfg.MaxHolds > MaxMaxHolds {
		return nil, fmt.Errorf("%w: MaxHolds %d out of [1, %d]", ErrInvalidConfig, cfg.MaxHolds, MaxMaxHolds)
	}
	if cfg.MaxHold == 0 {
		cfg.MaxHold = DefaultMaxHold
	}
	if cfg.MaxHold < 0 || cfg.MaxHold > shardlimit.MaxWindow {
		return nil, fmt.Errorf("%w: MaxHold %v out of (0, %v]", ErrInvalidConfig, cfg.MaxHold, shardlimit.MaxWindow)
	}
	lc := cfg.Limiter.Config()
	clock := lc.Clock
	if clock == nil {
		clock = shardlimit.DefaultClock()
	}
	return &Pacer{
		lim: cfg.Limiter, clock: clock, holds: newHoldTable(cfg.MaxHolds),
		maxHold: cfg.MaxHold, maxKey: lc.MaxKeyBytes, failFast: cfg.FailFast,
	}, nil
}

// Clock returns the limiter's Clock, on which the Pacer reads time.
func (p *Pacer) Clock() shardlimit.Clock { return p.clock }

// FailFast reports whether Take fails fast (Config.FailFast).
func (p *Pacer) FailFast() bool { return p.failFast }

// Take takes n units of key for one call, n >= 0 (0 takes nothing but
// still honours holds). Waiting (the default), it sleeps on the Clock
// until no hold covers key and the limiter admits the units
// (shardlimit.Limiter.WaitN: a key's waiters go in the order they came),
// and returns nil; a hold that begins while it waits makes it take its
// units again after the hold, so calls never burst at a hold's end (the
// units taken first are spent: the promise wins). It returns an error
// wrapping ErrHeld and shardlimit.ErrWouldExceedDeadline at once when a
// hold ends after ctx's deadline, WaitN's errors (ErrExceedsLimit,
// ErrWouldExceedDeadline, ctx.Err(), ErrClosed, ErrInvalidKey...),
// ctx.Err() if ctx ends while it waits for a hold, or
// shardlimit.ErrClosed, at once, if the limiter is closed before it
// waits for a hold or while it does (the latter for a limiter of package
// shardlimit or a shardlimit.ClosingLimiter, as package sync's are; see
// shardlimit.WaitUntil).
//
// Failing fast (Config.FailFast), it returns at once nil or a *LimitError
// wrapping ErrLimited (and ErrHeld if a hold covers key) that says when
// to try again, the limiter's error (Result.Err: ErrClosed comes before
// a hold's ErrHeld), or, if ctx is already done, an error wrapping
// ctx.Err(). It takes nothing when it fails. The allowed path allocates
// nothing.
func (p *Pacer) Take(ctx context.Context, key string, n int) error {
	if p.failFast {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("outbound: %d units of %q: %w", n, key, err)
		}
		return p.takeNow(key, n)
	}
	return p.wait(ctx, key, n)
}

// nowNanos reads the Clock in Unix nanoseconds.
func (p *Pacer) nowNanos() int64 { return p.clock.Now().UnixNano() }

// takeNow is Take failing fast. One unit is decided by Allow, which
// builds no Result; its denial (which consumed nothing) is described by
// Peek, which consumes and counts nothing.
func (p *Pacer) takeNow(key string, n int) error {
	if u, at, err := p.heldUntil(key); err != nil {
		return fmt.Errorf("outbound: %d units of %q: %w", n, key, err)
	} else if u != 0 {
		return &LimitError{Key: key, RetryAfter: time.Duration(u - at), Held: true}
	}
	if n == 1 {
		if p.lim.Allow(key) {
			return nil
		}
		if r := p.lim.Peek(key, p.clock.Now(), 1); r.Err != nil || !r.Allowed {
			return denial(key, n, r)
		}
		// Room came between Allow and Peek: decide again.
	}
	return denial(key, n, p.lim.AllowN(key, p.clock.Now(), n))
}

// denial returns the error of r, a decision of n units of key: nil if
// it admitted them.
func denial(key string, n int, r shardlimit.Result) error {
	switch {
	case r.Err != nil:
		return fmt.Errorf("outbound: %d units of %q: %w", n, key, r.Err)
	case !r.Allowed:
		return &LimitError{Key: key, RetryAfter: r.RetryAfter}
	}
	return nil
}

// wait is Take waiting.
func (p *Pacer) wait(ctx context.Context, key string, n int) error {
	for {
		sets := p.holds.sets.Load()
		if err := p.waitHold(ctx, key); err != nil {
			return err
		}
		if err := p.lim.WaitN(ctx, key, n); err != nil {
			return fmt.Errorf("outbound: wait for %d units of %q: %w", n, key, err)
		}
		if p.holds.sets.Load() == sets || !p.held(key) {
			return nil // no hold began since the last look
		}
		// A hold began while this call waited: its units would go out
		// during the hold. Take them again after it.
	}
}

// held reports whether a hold covers key now. It reads the Clock only if
// key has a hold stored.
func (p *Pacer) held(key string) bool {
	u, _ := p.holds.until(key, p.nowNanos)
	return u != 0
}

// heldUntil returns, as holdTable.until, the instant (Unix ns) until
// which a hold covers key and the Clock's reading, or the limiter's error
// if a hold covers key but the limiter can decide nothing for it (it is
// closed): a hold never hides that error, which no wait ends.
func (p *Pacer) heldUntil(key string) (until, at int64, err error) {
	until, at = p.holds.until(key, p.nowNanos)
	if until == 0 {
		return 0, at, nil
	}
	if r := p.lim.Peek(key, time.Unix(0, at), 0); r.Err != nil {
		return 0, at, r.Err
	}
	return until, at, nil
}

// waitHold sleeps on the Clock until no hold covers key. The limiter's
// Close ends the sleep (shardlimit.WaitUntil) with ErrClosed.
func (p *Pacer) waitHold(ctx context.Context, key string) error {
	for {
		u, at, err := p.heldUntil(key)
		if err != nil {
			return fmt.Errorf("outbound: wait for the hold of %q: %w", key, err)
		}
		if u == 0 {
			return nil
		}
		now, until := time.Unix(0, at), time.Unix(0, u)
		if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
			return fmt.Errorf("%w: %w: %q is held for %v", shardlimit.ErrWouldExceedDeadline, ErrHeld, key, until.Sub(now))
		}
		if err := shardlimit.WaitUntil(ctx, p.lim, until); err != nil {
			return fmt.Errorf("outbound: wait for the hold of %q: %w", key, err)
		}
	}
}

// Hold makes every call on key wait, or fail fast, until until (a
// server's "retry after"), read on the Clock. A hold is never shortened
// (but a full table may drop it, see Config.MaxHolds): a later Hold with
// an earlier until keeps the later one. An until at or
// before now holds nothing; one more than Config.MaxHold after now is cut
// to now+MaxHold. Holds live in a table capped at Config.MaxHolds keys
// (see there). It returns an error wrapping ErrInvalidKey for an empty
// key or one longer than the limiter's MaxKeyBytes.
func (p *Pacer) Hold(key string, until time.Time) error {
	if key == "" || len(key) > p.maxKey {
		return fmt.Errorf("%w: hold of a key of %d bytes (1 to %d)", ErrInvalidKey, len(key), p.maxKey)
	}
	now := p.clock.Now()
	if !until.After(now) {
		return nil
	}
	if until.Sub(now) > p.maxHold {
		until = now.Add(p.maxHold)
	}
	p.holds.set(key, until.UnixNano(), now.UnixNano())
	return nil
}

// HoldFor is Hold(key, now+d), now the Clock's reading: d <= 0 holds
// nothing.
func (p *Pacer) HoldFor(key string, d time.Duration) error {
	if d <= 0 {
		return p.Hold(key, time.Time{})
	}
	return p.Hold(key, p.clock.Now().Add(min(d, p.maxHold)))
}

// Held returns the instant until which key is held and true, or the zero
// time and false if no hold covers it now.
func (p *Pacer) Held(key string) (time.Time, bool) {
	u, _ := p.holds.until(key, p.nowNanos)
	if u == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, u), true
}

// Holds returns the number of holds stored, at most Config.MaxHolds
// (expired ones not yet removed included).
func (p *Pacer) Holds() int { return p.holds.len() }

// LimitError is the error of a call failed fast (Config.FailFast). It
// wraps ErrLimited, and ErrHeld when a hold covers the key.
type LimitError struct {
	// Key is the call's key.
	Key string
	// RetryAfter is the time from the decision until the call could
	// succeed: the hold's end, or the limiter's Result.RetryAfter
	// (shardlimit.Never when no wait can admit the call: a cost above the
	// limit, a limit of 0). Always positive.
	RetryAfter time.Duration
	// Held reports a hold (a server's answer) rather than the limiter.
	Held bool
}

// Error describes the denial.
func (e *LimitError) Error() string {
	if e.Held {
		return fmt.Sprintf("outbound: rate limited: %q is held by the server for %v", e.Key, e.RetryAfter)
	}
	if e.RetryAfter == shardlimit.Never {
		return fmt.Sprintf("outbound: rate limited: %q can never admit the call", e.Key)
	}
	return fmt.Sprintf("outbound: rate limited: %q admits the call in %v", e.Key, e.RetryAfter)
}

// Is reports whether target is ErrLimited, ErrHeld for a hold, or
// shardlimit.ErrExceedsLimit when no wait can admit the call.
func (e *LimitError) Is(target error) bool {
	return target == ErrLimited || e.Held && target == ErrHeld ||
		e.RetryAfter == shardlimit.Never && target == shardlimit.ErrExceedsLimit
}
