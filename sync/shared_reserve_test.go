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

// TestExactSettle: Exact settles in Redis, per algorithm: an overdraft
// on a full key is taken and denies until refunded, a refund never takes
// the count below zero, and the fallback, which records this process's
// usage, is settled too; bad input is refused.
func TestExactSettle(t *testing.T) {
	for _, c := range chargeConfigs {
		t.Run(c.name, func(t *testing.T) {
			e := replay(t, c.cfg)
			now := at(time.Second)
			settle := func(d int) {
				t.Helper()
				if err := e.Settle("k", now, d); err != nil {
					t.Fatalf("Settle(%d): %v", d, err)
				}
			}
			if r := e.AllowN("k", now, 10); !r.Allowed {
				t.Fatalf("10 of 10: %+v", r)
			}
			settle(2) // an overdraft: 12 of 10
			settle(-2)
			if e.Peek("k", now, 1).Allowed {
				t.Fatal("12 - 2 of 10: one more admitted")
			}
			settle(-15) // never below zero
			if !e.Peek("k", now, 10).Allowed || e.Peek("k", now, 11).Allowed {
				t.Fatalf("after refunding everything: want room for exactly 10, %+v", e.Peek("k", now, 10))
			}
			if fb := e.fallback.Peek("k", now, 10); !fb.Allowed {
				t.Fatalf("the fallback was not refunded: %+v", fb)
			}
			for _, d := range []int{shardlimit.MaxLimit + 1, -shardlimit.MaxLimit - 1} {
				if err := e.Settle("k", now, d); !errors.Is(err, shardlimit.ErrInvalidCost) {
					t.Errorf("Settle(%d) = %v, want ErrInvalidCost", d, err)
				}
			}
			if err := e.Settle("", now, 1); !errors.Is(err, shardlimit.ErrInvalidKey) {
				t.Errorf("Settle of an empty key = %v, want ErrInvalidKey", err)
			}
		})
	}
}
