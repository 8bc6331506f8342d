package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// chargeConfigs are a limit of 10 per minute by each algorithm, and two
// rates.
var chargeConfigs = []struct {
	name string
	cfg  shardlimit.Config
}{
	{"fixed", ratesCfg(shardlimit.FixedWindow, 0, rate(10, time.Minute))},
	{"counter", ratesCfg(shardlimit.SlidingCounter, 6, rate(10, time.Minute))},
	{"gcra", ratesCfg(shardlimit.GCRA, 0, rate(10, time.Minute))},
	{"gcra-two-rates", ratesCfg(shardlimit.GCRA, 0, rate(10, time.Minute), rate(100, time.Hour))},
}

// TestExactChargeOverdraftAndRefund: the charge script adds units at an
// instant whatever the limit (an overdraft the decisions then deny), takes
// them off with a negative count never below zero, and leaves a window
// that no longer counts alone.
func TestExactChargeOverdraftAndRefund(t *testing.T) {
	ctx := context.Background()
	for _, c := range chargeConfigs {
		t.Run(c.name, func(t *testing.T) {
			e := replay(t, c.cfg)
			now := at(time.Second)
			admits := func(n int) bool { return e.Peek("k", now, n).Allowed }
			charge := func(n int) {
				t.Helper()
				if err := e.charge(ctx, "k", now, n); err != nil {
					t.Fatalf("charge %d: %v", n, err)
				}
			}
			if r := e.AllowN("k", now, 3); !r.Allowed {
				t.Fatalf("first 3: %+v", r)
			}
			// A refund larger than the count: the count is 0, not -2.
			charge(-5)
			if !admits(10) || admits(11) {
				t.Fatalf("after a refund of 5 of 3 units: want room for exactly 10, %+v", e.Peek("k", now, 10))
			}
			if r := e.AllowN("k", now, 10); !r.Allowed {
				t.Fatalf("10 after the refund: %+v", r)
			}
			// An overdraft of 3 on a full key, refunded in steps.
			charge(3)
			charge(-2)
			if admits(1) {
				t.Fatal("10 + 3 - 2 units: 1 more admitted")
			}
			charge(-1)
			if admits(1) {
				t.Fatal("10 + 3 - 3 units: 1 more admitted")
			}
			charge(-1)
			if !admits(1) || admits(2) {
				t.Fatalf("9 units: want room for exactly 1, %+v", e.Peek("k", now, 1))
			}
			// Units of a window that no longer counts change nothing (GCRA:
			// units whose debt has drained by now).
			if err := e.charge(ctx, "old", at(-2*time.Minute), 5); err != nil {
				t.Fatal(err)
			}
			if !e.Peek("old", now, 10).Allowed {
				t.Fatalf("a charge two minutes back counted: %+v", e.Peek("old", now, 10))
			}
			// An empty key refunded stays empty.
			if err := e.charge(ctx, "other", now, -4); err != nil {
				t.Fatal(err)
			}
			if !e.Peek("other", now, 10).Allowed {
				t.Fatal("a refund of an empty key took room")
			}
		})
	}
}

// TestExactChargeRejectsBadInput: charges out of range or of a bad key are
// refused with our sentinels, and sent nowhere.
func TestExactChargeRejectsBadInput(t *testing.T) {
	e := replay(t, fixedCfg(10, time.Minute))
	ctx := context.Background()
	if err := e.charge(ctx, "k", at(0), 1<<30+1); !errors.Is(err, shardlimit.ErrInvalidCost) {
		t.Errorf("charge of 2^30+1: %v, want ErrInvalidCost", err)
	}
	if err := e.charge(ctx, "k", at(0), -(1<<30)-1); !errors.Is(err, shardlimit.ErrInvalidCost) {
		t.Errorf("charge of -2^30-1: %v, want ErrInvalidCost", err)
	}
	if err := e.charge(ctx, "", at(0), 1); !errors.Is(err, shardlimit.ErrInvalidKey) {
		t.Errorf("charge of an empty key: %v, want ErrInvalidKey", err)
	}
	if err := e.charge(ctx, "k", at(0), 0); err != nil {
		t.Errorf("charge of 0: %v", err)
	}
}

// TestExactReplayRestoresAfterRestart: a store restarted empty gets back
// the units Redis granted this node before the restart and those its
// fallback granted during the outage, before the node decides by Redis
// again.
func TestExactReplayRestoresAfterRestart(t *testing.T) {
	for _, c := range chargeConfigs {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			nodes := newOutageNodes(t, srv.Addr, redistest.Prefix(t), c.cfg, nil)
			n := nodes[0]
			now := at(time.Second)
			if got := send(t, n.e, "k", now, 4); got != 4 {
				t.Fatalf("Redis admitted %d of 4", got)
			}
			srv.Stop()
			sent, got := untilDegraded(t, n, "k", now, 10)
			got += send(t, n.e, "k", now, max(0, 3-sent))
			srv.Start()
			n.ch.wait(t, Healthy, 30*time.Second)
			// 4 + got units in the store: exactly the rest fits.
			rest := 10 - 4 - got
			if r := n.e.Peek("k", now, rest); !r.Allowed || n.e.Peek("k", now, rest+1).Allowed {
				t.Fatalf("after the restart: want room for exactly %d, %+v; %+v", rest, r, n.e.ExactStats())
			}
			if st := n.e.ExactStats(); st.Replayed == 0 || st.JournalKeys != 1 {
				t.Errorf("stats %+v: want a replay of one key", st)
			}
		})
	}
}
