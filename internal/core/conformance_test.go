package core

import (
	"fmt"
	"testing"
	"time"
)

// TestConformance is one step table every algorithm must pass as written:
// the behaviour they share (limit 3 per 10 s; a burst at one instant, the
// cost rules, idle recovery), with that rate alone and beside looser ones
// that never bind (100 per 100 s, 50 per second). Where they differ (the window boundary burst)
// see TestWindowBoundaryBurst and TestSeedScenarioBoundaryBurst.
func TestConformance(t *testing.T) {
	steps := []step{
		{0, 0, true, 3, 0},           // a peek on a fresh key: allowed, nothing stored
		{0, 1, true, 2, 0},           // the burst: limit units at one instant
		{0, 2, true, 0, 0},           //
		{0, 1, false, 0, dontCare},   // the limit is spent
		{0, 0, true, 0, 0},           // a peek on a spent key still answers allowed
		{0, 4, false, 0, never},      // a cost above the limit can never succeed
		{0.5, 1, false, 0, dontCare}, // still spent half a second later
		{100, 3, true, 0, 0},         // long idle: the whole limit again
		{100, 1, false, 0, dontCare},
	}
	rates := []Rate{{3, 10 * time.Second}, {100, 100 * time.Second}, {50, time.Second}}
	for k := 1; k <= len(rates); k++ {
		for _, alg := range allAlgorithms {
			t.Run(fmt.Sprint(k, "_rates/", alg), func(t *testing.T) {
				l := mustNew(t, Config{Algorithm: alg, Rates: rates[:k], Buckets: 10})
				runSteps(t, l, "k", steps)
				if l.Len() != 1 {
					t.Fatalf("len %d", l.Len())
				}
				// Errors change nothing and are the same for everyone.
				wantErr(t, l.AllowN("k", at(100), -1).Err, ErrInvalidCost)
				wantErr(t, l.AllowN("", at(100), 1).Err, ErrInvalidKey)
				wantErr(t, l.AllowN("k", time.Time{}, 1).Err, ErrInvalidTime)
				if r := l.Peek("k", at(100), 0); r.Remaining != 0 || r.Limit != 3 {
					t.Fatalf("after errors: %+v", r)
				}
			})
		}
	}
}
