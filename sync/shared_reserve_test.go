package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedSettleAndReserve: Shared settles through its local limiter (a
// refund gives units back locally, takes back only what was not sent, so
// the other node still counts what the store was sent), and its
// reservations decide now: OK at once, or not held with the RetryAfter.
func TestSharedSettleAndReserve(t *testing.T) {
	c := sharedClient(t)
	cfg := SharedConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 4, Window: time.Minute}, Prefix: redistest.Prefix(t)}
	a := newShared(t, c, cfg)
	b := newShared(t, c, cfg)
	now := at(time.Second)
	if !a.AllowN("k", now, 3).Allowed {
		t.Fatal("denied")
	}
	if err := a.Settle("k", now, -2); err != nil { // not sent: the store never sees them
		t.Fatal(err)
	}
	mustFlush(t, a)
	if err := a.Settle("k", now, -1); err != nil { // sent: the store keeps it
		t.Fatal(err)
	}
	mustFlush(t, a)
	if !b.AllowN("k", now, 1).Allowed { // b keeps k: its flush reads a's units
		t.Fatal("denied")
	}
	mustFlush(t, b)
	if r := b.AllowN("k", now, 2); !r.Allowed {
		t.Fatalf("node b after a's refunds: %+v", r)
	}
	if r := b.AllowN("k", now, 1); r.Allowed {
		t.Fatalf("node b admitted past the unit the store keeps: %+v", r)
	}
	r := b.ReserveN("k", now, 1)
	if r.OK() || !errors.Is(r.Err(), shardlimit.ErrNotHeld) || r.Delay() <= 0 {
		t.Fatalf("a reservation Shared cannot hold: ok %v err %v delay %v", r.OK(), r.Err(), r.Delay())
	}
	if r := a.ReserveN("j", now, 2); !r.OK() || r.Delay() != 0 {
		t.Fatalf("a reservation admitted at once: ok %v err %v", r.OK(), r.Err())
	}
	short, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	if err := a.WaitN(short, "j", 5); !errors.Is(err, shardlimit.ErrExceedsLimit) {
		t.Fatalf("WaitN above the limit: %v", err)
	}
}

// TestExactSettleUnsupported: Exact.Settle says it cannot settle yet.
func TestExactSettleUnsupported(t *testing.T) {
	e := newExact(t, sharedClient(t), ExactConfig{Config: shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: 2, Window: time.Second}})
	if err := e.Settle("k", T0, 1); !errors.Is(err, shardlimit.ErrUnsupported) {
		t.Fatalf("Exact.Settle = %v", err)
	}
}
