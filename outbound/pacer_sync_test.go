package outbound

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// A call waiting for a hold on a Pacer over a sync.Shared (the shared
// Redis) ends with ErrClosed when the Shared closes: package sync's
// limiters signal their Close (shardlimit.ClosingLimiter), so the wait
// does not sleep on until the hold ends. The ManualClock never moves:
// only the close can end the wait.
func TestTakeOnHeldKeyEndsWhenSharedCloses(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.RequireRedis(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	clock := shardlimit.NewManualClock(t0)
	lim, err := shardsync.NewShared(client, shardsync.SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Second, Clock: clock},
		Prefix:        redistest.Prefix(t),
		FlushInterval: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	p, err := New(Config{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.HoldFor("api", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := takeAsync(ctx, p, "api")
	awaitSleepers(t, clock, 1)
	if err := lim.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	awaitSleepers(t, clock, 0) // fails after 30 s of real time if the wait sleeps on
	if err := <-done; !errors.Is(err, shardlimit.ErrClosed) || errors.Is(err, context.Canceled) {
		t.Fatalf("Take waiting for a hold when its Shared closed = %v, want ErrClosed", err)
	}
}
