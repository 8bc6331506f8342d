package sync

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Close and Shutdown return within their deadline whatever the store does
// (issue 11, item 3): here a black hole that accepts connections and never
// answers, reached by a client that would wait for it forever (no read or
// write timeout, context deadlines not applied to its sockets), so a Close
// that waited for the store's replies would never return.

// blackHoleClient returns a client of a store that never answers and that
// never gives up on a reply by itself. Its calls end when it is closed (by
// the test's cleanup, after the limiters').
func blackHoleClient(t *testing.T) *redis.Client {
	t.Helper()
	hole := redistest.StartProxy(t, "127.0.0.1:1") // nothing upstream
	hole.SetMode(redistest.Blackhole)
	c := redis.NewClient(&redis.Options{
		Addr:          hole.Addr,
		MaxRetries:    -1,
		DialerRetries: 1,
		ReadTimeout:   -1, // wait for a reply forever
		WriteTimeout:  -1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// returnsWithin runs f and fails the test if it has not returned within d,
// a generous multiple of the deadline f was given.
func returnsWithin(t *testing.T, d time.Duration, f func() error) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err, time.Since(start)
	case <-time.After(d):
		t.Fatalf("did not return within %v", d)
		return nil, d
	}
}

// TestExactCloseBoundedByBlackHole: calls into the black hole are
// abandoned at their Timeout and stay in flight; Close returns at its
// deadline (one Timeout) with an error saying so, instead of waiting for
// them.
func TestExactCloseBoundedByBlackHole(t *testing.T) {
	const timeout = 100 * time.Millisecond
	c := blackHoleClient(t)
	e, err := NewExact(c, ExactConfig{Config: fixedCfg(5, time.Minute), Timeout: timeout,
		DegradeAfter: time.Nanosecond, ProbeInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The first call times out; the background goroutine's checks of the
	// store after it time out too, and degrade the limiter.
	if r := e.AllowN("k", time.Now(), 1); !r.Allowed || r.Err != nil {
		t.Fatalf("decided by the fallback: %+v", r)
	}
	eventually(t, 30*time.Second, func() string {
		if st := e.ExactStats(); st.State != Degraded || st.Timeouts != 1 {
			return fmt.Sprintf("stats %+v", st)
		}
		return ""
	})
	err, took := returnsWithin(t, 10*time.Second, e.Close)
	t.Logf("Close took %v (deadline %v): %v", took, timeout, err)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close: %v, want ErrUnavailable and DeadlineExceeded (calls left in flight)", err)
	}
	if r := e.AllowN("k", time.Now(), 1); !errors.Is(r.Err, shardlimit.ErrClosed) {
		t.Errorf("after Close: %+v", r)
	}
	if err2 := e.Close(); err2 != err {
		t.Errorf("second Close: %v, want the first's %v", err2, err)
	}
}

// TestSharedShutdownBoundedByBlackHole: the reconciler's flush into the
// black hole is in flight when Shutdown is called; Shutdown returns at its
// deadline, the flush's unit unknown and the final flush's dropped.
func TestSharedShutdownBoundedByBlackHole(t *testing.T) {
	const deadline = 100 * time.Millisecond
	c := blackHoleClient(t)
	s, err := NewShared(c, SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute, Clock: shardlimit.NewManualClock(at(time.Second))},
		FlushInterval: time.Millisecond, FlushTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Allow("a")
	// The reconciler has collected a's unit: its flush is under way.
	eventually(t, 10*time.Second, func() string {
		if st := s.SharedStats(); st.Pending != 0 {
			return "a's unit not collected"
		}
		return ""
	})
	s.Allow("b") // left for the final flush
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	err, took := returnsWithin(t, 10*time.Second, func() error { return s.Shutdown(ctx) })
	t.Logf("Shutdown took %v (deadline %v): %v", took, deadline, err)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if st := s.SharedStats(); st.UnknownUnits != 1 || st.DroppedUnits != 1 || st.RetriedUnits != 0 {
		t.Errorf("stats %+v: want a's unit unknown and b's dropped", st)
	}
}
