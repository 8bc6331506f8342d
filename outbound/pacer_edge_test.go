package outbound

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// Closing the limiter ends waits in progress with ErrClosed (Limiter.Close)
// and Take documents ErrClosed among its errors; a Pacer needs no Close of
// its own. A call waiting for a hold must end too, not sleep until the
// hold ends (up to MaxHold, an hour by default) after its limiter is gone.
func TestTakeOnHeldKeyEndsWhenLimiterCloses(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 10, time.Second, Config{})
	if err := p.HoldFor("api", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := takeAsync(ctx, p, "api")
	awaitSleepers(t, clock, 1)
	p.lim.Close()
	awaitSleepers(t, clock, 0) // fails after 30 s of real time if the wait sleeps on
	if err := <-done; !errors.Is(err, shardlimit.ErrClosed) {
		t.Fatalf("Take waiting for a hold when its limiter closed = %v, want ErrClosed", err)
	}
}

// A held key of a closed limiter: Take answers ErrClosed at once, failing
// fast or waiting, never ErrHeld nor a sleep until the hold ends; the
// hold hides no error of the limiter.
func TestTakeOnHeldKeyOfClosedLimiter(t *testing.T) {
	for _, failFast := range []bool{true, false} {
		p, clock := newPacer(t, shardlimit.FixedWindow, 10, time.Second, Config{FailFast: failFast})
		if err := p.HoldFor("api", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		p.lim.Close()
		err := p.Take(context.Background(), "api", 1)
		if !errors.Is(err, shardlimit.ErrClosed) || errors.Is(err, ErrHeld) {
			t.Fatalf("FailFast %v: Take on a held key of a closed limiter = %v, want ErrClosed (not ErrHeld)", failFast, err)
		}
		if n := clock.Sleepers(); n != 0 {
			t.Fatalf("FailFast %v: %d goroutines sleep on the clock, want 0", failFast, n)
		}
	}
}

// A call whose context is already done is not sent, so failing fast it
// takes no units either: it returns the context's error, as a wait does.
func TestTakeFailFastDoneContextTakesNothing(t *testing.T) {
	p, _ := newPacer(t, shardlimit.FixedWindow, 1, time.Minute, Config{FailFast: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Take(ctx, "api", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take with a cancelled context = %v, want context.Canceled", err)
	}
	if err := p.Take(context.Background(), "api", 1); err != nil {
		t.Fatalf("Take after a cancelled one = %v, want nil: the cancelled call took the only unit", err)
	}
}
