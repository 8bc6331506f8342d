package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Attacks on Exact's outage and settle rules (issue 21, issue 22): each
// verdict counts what was admitted against the bound computed from what
// was sent.

// redisWindow returns the index of the window of length w that Redis TIME
// is in, and how far into it.
func redisWindow(t *testing.T, c RedisClient, w time.Duration) (id int64, into time.Duration) {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixNano() / int64(w), time.Duration(tm.UnixNano() % int64(w))
}

// untilRedisWindow waits until Redis TIME is in the first quarter of a
// window of length w after window after, and returns its index.
func untilRedisWindow(t *testing.T, c RedisClient, w time.Duration, after int64) int64 {
	t.Helper()
	for range 100000 {
		if id, into := redisWindow(t, c, w); id > after && into < w/4 {
			return id
		}
		time.Sleep(time.Millisecond) // polling Redis TIME: the event is its clock
	}
	t.Fatal("Redis TIME did not reach a window's start")
	return 0
}

// TestExactSettleRefundOfForgottenDecisionAtRepeatedInstant: a caller
// gives every decision one instant (a clock read once per batch, a
// ManualClock). A decision D the store counted in window n is refunded
// after more than the 8 grants whose store instants the journal keeps,
// all given at the same instant and all counted in window n+1. D's own
// store instant is forgotten, so the refund cannot tell its window: it
// must be given back only locally, never to window n+1, which would then
// admit limit+1.
func TestExactSettleRefundOfForgottenDecisionAtRepeatedInstant(t *testing.T) {
	const (
		w     = time.Second
		limit = journalStamps + 1
	)
	c := sharedClient(t)
	e := newExact(t, c, ExactConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: limit, Window: w}})
	caller := time.Now() // every decision's instant
	n := untilRedisWindow(t, c, w, 0)
	if !e.AllowN("k", caller, 1).Allowed {
		t.Fatal("decision D denied")
	}
	untilRedisWindow(t, c, w, n)
	for i := range limit {
		if !e.AllowN("k", caller, 1).Allowed {
			t.Fatalf("unit %d of window n+1 denied", i+1)
		}
	}
	if err := e.Settle("k", caller, -1); err != nil && !errors.Is(err, shardlimit.ErrInvalidCost) {
		t.Logf("refund: %v", err)
	}
	r := e.AllowN("k", caller, 1)
	if id, _ := redisWindow(t, c, w); id != n+1 {
		t.Skip("Redis TIME left window n+1 during the test")
	}
	if r.Allowed {
		t.Errorf("%d units admitted in window n+1 of a limit of %d: the refund of a decision of window n took back a unit of window n+1", limit+1, limit)
	}
}

var _ = redistest.Prefix
