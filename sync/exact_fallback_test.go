package sync

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestExactFallbackSharesLaterWindow: two processes with the default
// fallback (FallbackLocal at the limit L) decide a key through the store
// in one window, then fill a window two windows later through the store; the store
// then loses the key (its keys deleted, as an eviction does) and each
// process sends 25 more in that window. The fallbacks were told each
// store decision's share of the cluster's usage, in the window of the
// decision, so the window admits at most N*L in all, counted from what
// was sent (L from the store before the loss). The first window is what
// made this fail: a fallback key created there took the later shares into
// that window, so each fallback admitted L more (3 L in all). Fixed
// window, sliding counter and GCRA.
func TestExactFallbackSharesLaterWindow(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel() // each has its own redis-server; the verdicts are counts
			fallbackSharesLaterWindow(t, alg)
		})
	}
}

func fallbackSharesLaterWindow(t *testing.T, alg shardlimit.Algorithm) {
	const L, N, W = 4, 2, 10 * time.Second
	srv := redistest.StartServer(t)
	prefix := redistest.Prefix(t)
	cfg := shardlimit.Config{Algorithm: alg, Limit: L, Window: W}
	nodes := make([]*Exact, N)
	for i := range nodes {
		nodes[i] = newExact(t, newClient(t, srv.Addr), ExactConfig{
			Config: cfg, Prefix: prefix, Timeout: 300 * time.Millisecond,
			EvictionCheck: time.Millisecond, HealthInterval: time.Hour,
		})
		nodes[i].callerTime = true
	}
	const key = "user"
	first := at(time.Second)
	for _, e := range nodes {
		if got := send(t, e, key, first, 1); got != 1 {
			t.Fatalf("first window: Redis admitted %d of 1", got)
		}
	}
	now := first.Add(2 * W) // clear of the first window's units in every algorithm
	before := 0
	for range L + N { // in turns, until every node was refused once
		for _, e := range nodes {
			before += send(t, e, key, now, 1)
		}
	}
	if before != L {
		t.Fatalf("before the loss Redis admitted %d in the window, want L = %d", before, L)
	}
	keys := nodes[0].StateKeys(key)
	if err := newClient(t, srv.Addr).Del(context.Background(), keys...).Err(); err != nil {
		t.Fatal(err)
	}
	during := 0
	for _, e := range nodes {
		during += send(t, e, key, now, 25)
	}
	total := before + during
	t.Logf("L = %d: %d before the loss, %d after (2 x 25 sent)", L, before, during)
	if total > N*L {
		t.Errorf("%d admitted in the window, more than N*L = %d", total, N*L)
	}
}
