package sync

import (
	"context"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestExactLossFromReplies: the store loses a key's state (its keys
// deleted, as an eviction does) and INFO shows nothing (evicted_keys does
// not grow), so only the replies can tell. Redis had granted half the
// limit; the next reply counts less than this process's units, which
// proves the loss: the window must hold L (without the proof Redis grants
// the whole limit again: 1.5 L). It counts the loss in ExactStats.
// Every algorithm, one rate and two.
func TestExactLossFromReplies(t *testing.T) {
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
			if st := e.ExactStats(); st.Losses == 0 || st.LostUnits == 0 {
				t.Errorf("the loss is not counted: %+v", st)
			}
		})
	}
}

// TestExactResetIsNotALoss: another process's Reset forgets a key's usage
// in the store; the process that was granted units of it before reads
// the Reset's marker and forgets them too, instead of proving a loss and
// sending them back (which would undo the Reset): after the Reset it is
// granted the whole limit by the store, stays Healthy and counts no loss.
// Its own Reset alike. Every algorithm, one rate and two.
func TestExactResetIsNotALoss(t *testing.T) {
	for _, c := range outageConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each has its own redis-server; the verdicts are counts
			srv := redistest.StartServer(t)
			prefix := redistest.Prefix(t)
			mk := func() *Exact {
				e := newExact(t, newClient(t, srv.Addr), ExactConfig{
					Config: c.cfg, Prefix: prefix, Timeout: 300 * time.Millisecond,
					EvictionCheck: time.Millisecond, HealthInterval: time.Hour,
				})
				e.callerTime = true
				return e
			}
			a, b := mk(), mk()
			const key = "user"
			now := at(time.Second)
			L := c.lims[0]
			for _, resetter := range []*Exact{b, a} {
				if got := send(t, a, key, now, L/2); got != L/2 {
					t.Fatalf("Redis admitted %d of %d", got, L/2)
				}
				if err := resetter.Reset(key); err != nil {
					t.Fatal(err)
				}
				got := send(t, a, key, now, L+5)
				st := a.ExactStats()
				if got != L || st.Losses != 0 || st.LostUnits != 0 || st.PolicyDecisions != 0 || st.State != Healthy {
					t.Fatalf("after a Reset: %d admitted, want L = %d from the store; %+v", got, L, st)
				}
				if err := a.Reset(key); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
