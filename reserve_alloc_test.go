//go:build !race

package shardlimit

import (
	"context"
	"testing"
	"time"
)

// TestNoAllocationsReserve: Settle, ReserveN (admitted at once, held for
// later and cancelled) and WaitN on a key that admits at once allocate
// nothing, nor does WaitFor on a ClosingLimiter (package sync's way).
func TestNoAllocationsReserve(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := NewManualClock(rt0)
			l := newReserveLimiter(t, Config{Algorithm: alg, Limit: 1000, Window: time.Minute, Clock: clock})
			full := newReserveLimiter(t, Config{Algorithm: alg, Limit: 2, Window: time.Second})
			key := "192.0.2.1"
			l.AllowN(key, rt0, 1)
			full.AllowN(key, rt0, 2)
			ctx := context.Background()
			closing := newClosingLimiter(l)
			cases := map[string]func(){
				"Settle": func() {
					_ = l.Settle(key, rt0, 1)
					_ = l.Settle(key, rt0, -1)
				},
				"ReserveN now": func() {
					l.ReserveN(key, rt0, 1).CancelAt(rt0)
				},
				"ReserveN later": func() {
					r := full.ReserveN(key, rt0, 1)
					if !r.OK() {
						t.Fatal(r.Err())
					}
					r.CancelAt(rt0)
				},
				"WaitN at once": func() {
					if err := l.WaitN(ctx, "wait", 1); err != nil {
						t.Fatal(err)
					}
					_ = l.Settle("wait", rt0, -1)
				},
				"WaitFor at once, ClosingLimiter": func() {
					if err := WaitFor(ctx, closing, clock, "wait", 1); err != nil {
						t.Fatal(err)
					}
					_ = l.Settle("wait", rt0, -1)
				},
			}
			for name, f := range cases {
				for range 100 {
					f()
				}
				if n := testing.AllocsPerRun(1000, f); n != 0 {
					t.Errorf("%s: %v allocations per call, want 0", name, n)
				}
			}
		})
	}
}
