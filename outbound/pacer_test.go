package outbound

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

func TestNewRejectsBadConfig(t *testing.T) {
	lim, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: 1, Window: time.Second, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for _, cfg := range []Config{
		{},
		{Limiter: lim, MaxHolds: -1},
		{Limiter: lim, MaxHolds: MaxMaxHolds + 1},
		{Limiter: lim, MaxHold: -time.Second},
		{Limiter: lim, MaxHold: shardlimit.MaxWindow + 1},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := NewTransport(TransportConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewTransport without a Pacer = %v, want ErrInvalidConfig", err)
	}
}

func TestTakeFailFast(t *testing.T) {
	p, clock := newPacer(t, shardlimit.FixedWindow, 2, time.Minute, Config{FailFast: true})
	ctx := context.Background()
	for i := range 2 {
		if err := p.Take(ctx, "api", 1); err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
	}
	err := p.Take(ctx, "api", 1)
	var le *LimitError
	if !errors.Is(err, ErrLimited) || errors.Is(err, ErrHeld) || !errors.As(err, &le) || le.RetryAfter != time.Minute || le.Held {
		t.Fatalf("third take = %v (%+v), want ErrLimited, not held, RetryAfter 1m", err, le)
	}
	if err := p.Take(ctx, "api", 3); !errors.Is(err, shardlimit.ErrExceedsLimit) || !errors.Is(err, ErrLimited) {
		t.Fatalf("take of 3 > limit = %v, want ErrLimited and ErrExceedsLimit", err)
	}
	if err := p.Take(ctx, "", 1); !errors.Is(err, shardlimit.ErrInvalidKey) {
		t.Fatalf("take of an empty key = %v, want shardlimit.ErrInvalidKey", err)
	}

	if err := p.HoldFor("other", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	err = p.Take(ctx, "other", 1)
	if !errors.Is(err, ErrHeld) || !errors.Is(err, ErrLimited) || !errors.As(err, &le) || le.RetryAfter != 10*time.Second {
		t.Fatalf("take of a held key = %v, want ErrHeld, RetryAfter 10s", err)
	}
	if got := p.lim.Stats(); got.Allowed+got.Denied != 4 {
		t.Fatalf("the limiter decided %d calls, want 4 (a held call takes nothing)", got.Allowed+got.Denied)
	}
	clock.Advance(10 * time.Second)
	if err := p.Take(ctx, "other", 1); err != nil {
		t.Fatalf("take when the hold ended: %v", err)
	}
	if p.Holds() != 0 {
		t.Fatalf("%d holds stored after the only one ended and was looked up, want 0", p.Holds())
	}
}

// takeAsync runs Take in a goroutine and returns the channel of its error.
func takeAsync(ctx context.Context, p *Pacer, key string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- p.Take(ctx, key, 1) }()
	return done
}

func assertWaiting(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Take returned %v while it should wait", err)
	default:
	}
}

func TestTakeWaitsForHold(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 10, time.Second, Config{})
	if err := p.HoldFor("api", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	done := takeAsync(context.Background(), p, "api")
	awaitSleepers(t, clock, 1)
	clock.Advance(5*time.Second - 1)
	awaitSleepers(t, clock, 1)
	assertWaiting(t, done)
	clock.Advance(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, held := p.Held("api"); held {
		t.Fatal("api still held after its hold ended")
	}
}

// A hold that begins while a call waits for its units makes it take them
// again after the hold: a call never goes out during a hold, and calls
// queued before it do not burst at its end.
func TestTakeRetakesAfterHoldBegunDuringWait(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 1, time.Second, Config{})
	ctx := context.Background()
	if err := p.Take(ctx, "api", 1); err != nil {
		t.Fatal(err)
	}
	first := takeAsync(ctx, p, "api")
	awaitSleepers(t, clock, 1)
	second := takeAsync(ctx, p, "api")
	awaitSleepers(t, clock, 2)
	if err := p.HoldFor("api", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // both waiters' units are theirs now, but the hold covers them
	awaitSleepers(t, clock, 2)
	assertWaiting(t, first)
	assertWaiting(t, second)
	clock.Advance(8 * time.Second) // the hold ends: one unit is free, the other a second later
	var errs []error
	select {
	case err := <-first:
		errs = append(errs, err)
	case err := <-second:
		errs = append(errs, err)
	}
	awaitSleepers(t, clock, 1)
	select {
	case err := <-first:
		t.Fatalf("both waiters went out at the hold's end (%v); the limiter admits one per second", err)
	case err := <-second:
		t.Fatalf("both waiters went out at the hold's end (%v); the limiter admits one per second", err)
	default:
	}
	clock.Advance(time.Second)
	select {
	case err := <-first:
		errs = append(errs, err)
	case err := <-second:
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestTakeHoldPastDeadline(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 10, time.Second, Config{})
	clock.Set(time.Now()) // the context's deadline is read against this clock
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(time.Minute))
	defer cancel()
	if err := p.HoldFor("api", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	err := p.Take(ctx, "api", 1)
	if !errors.Is(err, ErrHeld) || !errors.Is(err, shardlimit.ErrWouldExceedDeadline) {
		t.Fatalf("Take past the deadline = %v, want ErrHeld and ErrWouldExceedDeadline", err)
	}
	if clock.Sleepers() != 0 {
		t.Fatal("Take sleeps although it failed")
	}
	// A context that ends while the call waits for a hold ends the wait.
	ctx2, cancel2 := context.WithCancel(context.Background())
	done := takeAsync(ctx2, p, "api")
	awaitSleepers(t, clock, 1)
	cancel2()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Take whose context was cancelled = %v, want context.Canceled", err)
	}
}

func TestHold(t *testing.T) {
	p, clock := newPacer(t, shardlimit.GCRA, 10, time.Second, Config{MaxHold: time.Minute})
	now := clock.Now()
	if err := p.Hold("api", now.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	_ = p.Hold("api", now.Add(10*time.Second)) // never shortened
	if until, ok := p.Held("api"); !ok || !until.Equal(now.Add(30*time.Second)) {
		t.Fatalf("Held = %v %v, want %v (a hold is never shortened)", until, ok, now.Add(30*time.Second))
	}
	_ = p.Hold("api", now.Add(24*time.Hour))
	if until, _ := p.Held("api"); !until.Equal(now.Add(time.Minute)) {
		t.Fatalf("Held = %v, want now+MaxHold %v", until, now.Add(time.Minute))
	}
	_ = p.Hold("past", now.Add(-time.Second))
	_ = p.HoldFor("zero", 0)
	if p.Holds() != 1 {
		t.Fatalf("%d holds, want 1 (a hold that ends by now is not stored)", p.Holds())
	}
	if err := p.Hold("", now.Add(time.Second)); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("Hold of an empty key = %v, want ErrInvalidKey", err)
	}
	long := string(make([]byte, shardlimit.DefaultMaxKeyBytes+1))
	if err := p.Hold(long, now.Add(time.Second)); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("Hold of a too long key = %v, want ErrInvalidKey", err)
	}
}

// Holds of many keys never grow past MaxHolds: a full table drops the
// expired ones, then the one that ends soonest.
func TestHoldTableCapped(t *testing.T) {
	const max = 8
	p, clock := newPacer(t, shardlimit.GCRA, 10, time.Second, Config{MaxHolds: max})
	for i := range 1000 {
		_ = p.HoldFor(fmt.Sprint("k", i), time.Duration(1000+i)*time.Second)
		if p.Holds() > max {
			t.Fatalf("%d holds after %d keys, want at most %d", p.Holds(), i+1, max)
		}
	}
	for i := 1000 - max; i < 1000; i++ { // the latest-ending ones are kept
		if _, ok := p.Held(fmt.Sprint("k", i)); !ok {
			t.Fatalf("k%d, among the %d latest-ending holds, was dropped", i, max)
		}
	}
	clock.Advance(time.Hour)
	_ = p.HoldFor("new", time.Second) // all expired: removed, not the soonest live one
	if p.Holds() != 1 {
		t.Fatalf("%d holds after all but one expired, want 1", p.Holds())
	}
}

func TestTakeInvalidCost(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		p, _ := newPacer(t, shardlimit.GCRA, 10, time.Second, Config{FailFast: failFast})
		if err := p.Take(context.Background(), "api", -1); !errors.Is(err, shardlimit.ErrInvalidCost) {
			t.Errorf("failFast %v: Take of -1 units = %v, want ErrInvalidCost", failFast, err)
		}
		if err := p.Take(context.Background(), "api", 0); err != nil {
			t.Errorf("failFast %v: Take of 0 units = %v, want nil", failFast, err)
		}
	}
}

// A Pacer whose limiter was closed refuses every call with ErrClosed.
func TestTakeClosedLimiter(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		p, _ := newPacer(t, shardlimit.GCRA, 10, time.Second, Config{FailFast: failFast})
		p.lim.Close()
		if err := p.Take(context.Background(), "api", 1); !errors.Is(err, shardlimit.ErrClosed) {
			t.Errorf("failFast %v: Take after Close = %v, want ErrClosed", failFast, err)
		}
	}
}
