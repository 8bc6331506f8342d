package sync

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// TestExactSettleRefundAcrossWindowsNeverOverAdmits: Exact decides at
// Redis TIME, and Settle refunds the window of at, the caller's instant.
// A caller whose clock runs ahead of Redis (here by one window, 200ms;
// a few ms do the same near a window's end) gets a decision counted in
// Redis's window n and refunds it, later, from window n+1, where it takes
// back a unit of another decision: 3 units admitted in a window of 2.
func TestExactSettleRefundAcrossWindowsNeverOverAdmits(t *testing.T) {
	if skipExactSkew {
		t.Skip("known defect: Exact.Settle refunds the caller's window, not the one Redis decided in")
	}
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

var skipExactSkew = true
