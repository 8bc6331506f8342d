package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardlimit/shardlimit"
)

// TestWaitEndsAtClose: a WaitN and a shardlimit.WaitUntil sleeping on a
// Shared or an Exact (on the shared Redis, a ManualClock never advanced,
// so only Close can end them) return an error wrapping ErrClosed when the
// limiter is closed, not the context's error; later waits return it at
// once, nothing sleeps on the clock any more, and no goroutine is left.
func TestWaitEndsAtClose(t *testing.T) {
	type kind struct {
		algs  []shardlimit.Algorithm // those it shares
		build func(t *testing.T, cfg shardlimit.Config) shardlimit.Limiter
	}
	kinds := map[string]kind{
		"Shared": {[]shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingLog, shardlimit.SlidingCounter},
			func(t *testing.T, cfg shardlimit.Config) shardlimit.Limiter {
				return newShared(t, sharedClient(t), SharedConfig{Config: cfg})
			}},
		"Exact": {[]shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.GCRA},
			func(t *testing.T, cfg shardlimit.Config) shardlimit.Limiter {
				e := newExact(t, sharedClient(t), ExactConfig{Config: cfg})
				e.callerTime = true // decide at the ManualClock's instants
				return e
			}},
	}
	for name, k := range kinds {
		for _, alg := range k.algs {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				base := goleak.IgnoreCurrent()
				c := shardlimit.NewManualClock(at(time.Second))
				l := k.build(t, shardlimit.Config{Algorithm: alg, Limit: 1, Window: time.Minute, Clock: c})
				if err := l.WaitN(context.Background(), "k", 1); err != nil {
					t.Fatalf("WaitN of a free unit = %v, want nil", err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 2)
				go func() { done <- l.WaitN(ctx, "k", 1) }()
				go func() { done <- shardlimit.WaitUntil(ctx, l, c.Now().Add(time.Hour)) }()
				waitSleepers(t, c, 2)
				if err := l.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				for range 2 {
					if err := receive(t, done); !errors.Is(err, shardlimit.ErrClosed) || errors.Is(err, context.Canceled) {
						t.Fatalf("wait when the limiter closed = %v, want ErrClosed", err)
					}
				}
				if n := c.Sleepers(); n != 0 {
					t.Fatalf("%d sleepers after Close, want 0", n)
				}
				if err := l.WaitN(ctx, "k", 1); !errors.Is(err, shardlimit.ErrClosed) {
					t.Fatalf("WaitN after Close = %v, want ErrClosed", err)
				}
				if err := shardlimit.WaitUntil(ctx, l, c.Now().Add(time.Hour)); !errors.Is(err, shardlimit.ErrClosed) {
					t.Fatalf("WaitUntil after Close = %v, want ErrClosed", err)
				}
				goleak.VerifyNone(t, base)
			})
		}
	}
}

// TestWaitEndsWithContextBeforeClose: a wait on a Shared or an Exact whose
// context is cancelled returns the context's error, not ErrClosed: the
// close signal is not mistaken for the caller's cancellation.
func TestWaitEndsWithContextBeforeClose(t *testing.T) {
	c := shardlimit.NewManualClock(at(time.Second))
	cfg := shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 1, Window: time.Minute, Clock: c}
	e := newExact(t, sharedClient(t), ExactConfig{Config: cfg})
	e.callerTime = true
	for _, l := range []shardlimit.Limiter{newShared(t, sharedClient(t), SharedConfig{Config: cfg}), e} {
		l.Allow("k")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.WaitN(ctx, "k", 1) }()
		waitSleepers(t, c, 1)
		cancel()
		if err := receive(t, done); !errors.Is(err, context.Canceled) || errors.Is(err, shardlimit.ErrClosed) {
			t.Fatalf("WaitN with its context cancelled = %v, want context.Canceled", err)
		}
	}
}

// waitSleepers waits until n goroutines sleep on c.
func waitSleepers(t *testing.T, c *shardlimit.ManualClock, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() string {
		if got := c.Sleepers(); got != n {
			return "sleepers on the clock: not yet the waiters"
		}
		return ""
	})
}

// receive returns the next error from done. The 10 s bound only turns a
// wait that never ends into a failure instead of a hung test: a waiter
// that Close ends returns without the clock moving.
func receive(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end")
		return nil
	}
}
