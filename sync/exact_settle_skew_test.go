package sync

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// TestExactSettleRefundAcrossWindowsNeverOverAdmits: Exact decides at
// Redis TIME, and Settle refunds the window the store decided in, not the
// window of at, the caller's instant. A caller whose clock runs ahead of
// Redis (here by one window, 200ms; a few ms do the same near a window's
// end) gets a decision counted in Redis's window n and refunds it, later,
// when Redis is in window n+1: the refund goes to window n (ended: it
// changes nothing), never to a unit of another decision of window n+1.
// (Before, it took back one of them: 3 units admitted in a window of 2.)
func TestExactSettleRefundAcrossWindowsNeverOverAdmits(t *testing.T) {
	const w = 200 * time.Millisecond
	c := sharedClient(t)
	e := newExact(t, c, ExactConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 2, Window: w}})
	ctx := context.Background()
	redisNow := func() time.Time {
		t.Helper()
		tm, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	// untilWindowStart returns Redis's window index once Redis TIME is in
	// the first quarter of a window after the one given.
	untilWindow := func(after int64) int64 {
		t.Helper()
		for range 10000 {
			r := redisNow()
			if id := r.UnixNano() / int64(w); id > after && r.UnixNano()%int64(w) < int64(w/4) {
				return id
			}
			time.Sleep(time.Millisecond) // polling Redis TIME: the event is its clock
		}
		t.Fatal("Redis TIME did not reach a window's start")
		return 0
	}
	n := untilWindow(0)
	callerNow := time.Unix(0, (n+1)*int64(w)) // the caller's clock: one window ahead
	if !e.AllowN("k", callerNow, 1).Allowed {
		t.Fatal("the first unit denied")
	}
	untilWindow(n)
	for i := range 2 {
		if !e.AllowN("k", redisNow(), 1).Allowed {
			t.Fatalf("unit %d of window n+1 denied", i+1)
		}
	}
	if err := e.Settle("k", callerNow, -1); err != nil { // the first decision's unit
		t.Fatal(err)
	}
	if r := e.AllowN("k", redisNow(), 1); r.Allowed && redisNow().UnixNano()/int64(w) == n+1 {
		t.Errorf("a third unit admitted in window n+1 of a limit of 2 (the refund took back a unit of window n+1 for a decision of window n): %+v", r)
	}
}

// TestExactSettleUnknownDecision: Settle of an instant at which no grant
// of the key is known (never decided there, or forgotten) cannot tell the
// store's window of it: a refund is given back only locally (the store
// keeps counting the units: no unit of another decision is taken back),
// and a charge goes to the store's current window (it counts at least as
// long as the decision's).
func TestExactSettleUnknownDecision(t *testing.T) {
	const w = time.Hour
	c := sharedClient(t)
	e := newExact(t, c, ExactConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 2, Window: w}})
	ctx := context.Background()
	window := func() int64 {
		t.Helper()
		tm, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixNano() / int64(w)
	}
	before := window()
	now := time.Now()
	unknown := now.Add(-time.Millisecond) // no decision was given at it
	for i := range 2 {
		if !e.AllowN("full", now, 1).Allowed {
			t.Fatalf("unit %d denied", i+1)
		}
	}
	if err := e.Settle("full", unknown, -1); err != nil {
		t.Fatal(err)
	}
	refunded := e.AllowN("full", now, 1).Allowed
	if err := e.Settle("charged", unknown, 1); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 2 {
		if e.AllowN("charged", now, 1).Allowed {
			admitted++
		}
	}
	if window() != before {
		t.Skip("Redis TIME crossed an hour's window during the test")
	}
	if refunded {
		t.Error("a refund of an unknown decision took back a unit of another: 3 admitted of 2")
	}
	if admitted != 1 {
		t.Errorf("after a charge of 1 at an unknown instant, %d admitted of 2, want 1", admitted)
	}
}
