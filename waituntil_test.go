package shardlimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitUntil: WaitUntil sleeps on the limiter's Clock until the
// instant, not a nanosecond less; the limiter's Close ends it with
// ErrClosed (at once if the limiter is already closed); a cancelled
// context ends it with the context's error, not ErrClosed.
func TestWaitUntil(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			c := waitClock()
			l := newReserveLimiter(t, Config{Algorithm: alg, Limit: 2, Window: time.Second, Clock: c})
			until := c.Now().Add(time.Second)
			done := make(chan error, 1)
			go func() { done <- WaitUntil(context.Background(), l, until) }()
			sleepers(t, c, 1)
			c.Advance(time.Second - time.Nanosecond)
			if c.Sleepers() != 1 {
				t.Fatal("WaitUntil woke early")
			}
			c.Advance(time.Nanosecond)
			if err := <-done; err != nil {
				t.Fatalf("WaitUntil at its instant = %v, want nil", err)
			}

			ctx, cancel := context.WithCancel(context.Background())
			go func() { done <- WaitUntil(ctx, l, c.Now().Add(time.Hour)) }()
			sleepers(t, c, 1)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) {
				t.Fatalf("WaitUntil with its context cancelled = %v, want context.Canceled", err)
			}

			go func() { done <- WaitUntil(context.Background(), l, c.Now().Add(time.Hour)) }()
			sleepers(t, c, 1)
			l.Close()
			if err := <-done; !errors.Is(err, ErrClosed) {
				t.Fatalf("WaitUntil when its limiter closed = %v, want ErrClosed", err)
			}
			if err := WaitUntil(context.Background(), l, c.Now().Add(time.Hour)); !errors.Is(err, ErrClosed) {
				t.Fatalf("WaitUntil on a closed limiter = %v, want ErrClosed", err)
			}
			if n := c.Sleepers(); n != 0 {
				t.Fatalf("%d sleepers after Close, want 0", n)
			}
		})
	}
}

// TestWaitUntilNilLimiter: a nil Limiter is an error, not a panic.
func TestWaitUntilNilLimiter(t *testing.T) {
	if err := WaitUntil(context.Background(), nil, time.Now()); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("WaitUntil of a nil Limiter = %v, want ErrInvalidConfig", err)
	}
}

// TestWaitUntilOtherLimiter: a Limiter not of this package (here one
// wrapping it, as package sync's are other types) is slept on through
// its Config's Clock until the instant.
func TestWaitUntilOtherLimiter(t *testing.T) {
	c := waitClock()
	l := struct{ Limiter }{newReserveLimiter(t, Config{Algorithm: GCRA, Limit: 2, Window: time.Second, Clock: c})}
	done := make(chan error, 1)
	go func() { done <- WaitUntil(context.Background(), l, c.Now().Add(time.Second)) }()
	sleepers(t, c, 1)
	c.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("WaitUntil at its instant = %v, want nil", err)
	}
}

// closingLimiter is a Limiter of another package that signals its Close
// (a ClosingLimiter), as package sync's are: it wraps one of this
// package, which it does not close.
type closingLimiter struct {
	Limiter
	ctx    context.Context
	cancel context.CancelFunc
}

func newClosingLimiter(l Limiter) *closingLimiter {
	ctx, cancel := context.WithCancel(context.Background())
	return &closingLimiter{Limiter: l, ctx: ctx, cancel: cancel}
}

// Closing returns the context Close cancels.
func (c *closingLimiter) Closing() context.Context { return c.ctx }

// Close signals the close; the wrapped limiter stays open.
func (c *closingLimiter) Close() error { c.cancel(); return nil }

// TestWaitForClosingLimiter: WaitFor and WaitUntil sleeping on a
// ClosingLimiter return an error wrapping ErrClosed when it closes (a
// ManualClock never advanced: only the close can end them), and at once
// once it is closed; on a Limiter that gives no close signal the same
// close leaves them asleep until their context ends.
func TestWaitForClosingLimiter(t *testing.T) {
	c := waitClock()
	inner := newReserveLimiter(t, Config{Algorithm: GCRA, Limit: 1, Window: time.Second, Clock: c})
	inner.Allow("k")
	l := newClosingLimiter(inner)
	silent := struct{ Limiter }{newClosingLimiter(inner)} // hides Closing
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, silentDone := make(chan error, 2), make(chan error, 1)
	go func() { done <- WaitFor(ctx, l, c, "k", 1) }()
	go func() { done <- WaitUntil(ctx, l, c.Now().Add(time.Hour)) }()
	go func() { silentDone <- WaitFor(ctx, silent, c, "k", 1) }()
	sleepers(t, c, 3)
	l.Close()
	silent.Close()
	for range 2 {
		if err := <-done; !errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) {
			t.Fatalf("wait when the limiter closed = %v, want ErrClosed", err)
		}
	}
	sleepers(t, c, 1) // the silent limiter's waiter sleeps on
	cancel()
	if err := <-silentDone; !errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) {
		t.Fatalf("wait on a Limiter without a close signal = %v, want context.Canceled", err)
	}
	bg := context.Background()
	if err := WaitFor(bg, l, c, "k", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitFor on a closed ClosingLimiter = %v, want ErrClosed", err)
	}
	if err := WaitUntil(bg, l, c.Now().Add(time.Hour)); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitUntil on a closed ClosingLimiter = %v, want ErrClosed", err)
	}
	if n := c.Sleepers(); n != 0 {
		t.Fatalf("%d sleepers, want 0", n)
	}
}
