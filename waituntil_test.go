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
