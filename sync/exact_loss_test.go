package sync

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/internal/redistest"
)

// skipExactLoss skips the tests of a known defect: a store that lost a
// key's state (evicted, restarted empty) decides it from empty state
// until INFO shows the loss (up to EvictionCheck), even for a process
// whose journal holds units the store's reply lacks. A fix (proving the
// loss from the replies, as Shared does from its counters) must also
// tell a loss from another process's Reset and from concurrent decisions
// whose replies cross (a reply computed before a grant this process has
// already recorded): a first attempt degraded on both.
var skipExactLoss = true

// TestExactLossFromReplies: the store loses a key's state (its keys
// deleted, as an eviction does) and INFO shows nothing (evicted_keys does
// not grow), so only the replies can tell. Redis had granted half the
// limit; the next reply counts less than this process's units, which
// proves the loss: the window must hold L (without the proof Redis grants
// the whole limit again: 1.5 L). Every algorithm, one rate and two.
func TestExactLossFromReplies(t *testing.T) {
	if skipExactLoss {
		t.Skip("known defect: a lost state is noticed by INFO only")
	}
	for _, c := range outageConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each has its own redis-server; the verdicts are counts
			srv := redistest.StartServer(t)
			e := newExact(t, newClient(t, srv.Addr), ExactConfig{
				Config: c.cfg, Prefix: redistest.Prefix(t),
				Timeout: 300 * time.Millisecond, EvictionCheck: time.Millisecond,
				HealthInterval: time.Hour,
			})
			e.callerTime = true
			const key = "user"
			now := at(time.Second)
			L := c.lims[0]
			U := L / 2
			if got := send(t, e, key, now, U); got != U {
				t.Fatalf("Redis admitted %d of %d", got, U)
			}
			keys := e.StateKeys(key)
			if err := newClient(t, srv.Addr).Del(context.Background(), keys...).Err(); err != nil {
				t.Fatal(err)
			}
			during := send(t, e, key, now, 25)
			total := U + during
			t.Logf("U = %d, after the loss %d: %d admitted (L = %d); %+v", U, during, total, L, e.ExactStats())
			if total > L {
				t.Errorf("%d admitted in the window, more than L = %d", total, L)
			}
		})
	}
}
