package shardlimit

import (
	"fmt"
	"testing"
	"time"
)

// TestReserveGCRARaisedLimitKeepsReservations: a GCRA key of 4 per second
// spends 4 units at 0 and queues two reservations of 4 (at 1s and 2s);
// its limit is then raised to 5, by SetLimit or by SetDefaultLimit. The
// raise may shorten the queued units' spacing, never pull the time
// before the reservations back: 4 more units reserved must not land
// before 2.6s, or [2s, t] holds 8 units where a burst of 5 and a rate of
// 5 per second allow 5 + 5*(t-2s).
func TestReserveGCRARaisedLimitKeepsReservations(t *testing.T) {
	for _, how := range []string{"SetLimit", "SetDefaultLimit"} {
		t.Run(how, func(t *testing.T) {
			l := newReserveLimiter(t, Config{Algorithm: GCRA, Limit: 4, Window: time.Second})
			if !l.AllowN("k", ms(0), 4).Allowed {
				t.Fatal("4 units at 0 denied")
			}
			r1, r2 := l.ReserveN("k", ms(0), 4), l.ReserveN("k", ms(0), 4)
			if !r1.at.Equal(ms(1000)) || !r2.at.Equal(ms(2000)) {
				t.Fatalf("reservations at %v and %v, want 1s and 2s", r1.at.Sub(rt0), r2.at.Sub(rt0))
			}
			var err error
			if how == "SetLimit" {
				err = l.SetLimit("k", 5)
			} else {
				err = l.SetDefaultLimit(5)
			}
			if err != nil {
				t.Fatal(err)
			}
			r3 := l.ReserveN("k", ms(0), 4)
			if want := ms(2600); !r3.OK() || r3.at.Before(want) {
				t.Errorf("4 units reserved at %v (ok %v) beside r2's 4 at 2s under 5 per second: want %v or later", r3.at.Sub(rt0), r3.OK(), want.Sub(rt0))
			}
		})
	}
}

// TestSettleChargeDuringBanCountsAfterIt: a decision of 1 unit is
// settled to 4 (a charge of 3) while its key is banned (SetLimit 0);
// once the ban is lifted, by SetLimit or ClearLimit, the window already
// holds the limit's 4 units, so another unit is denied. Every algorithm,
// with the key's first rate banned, or its second.
func TestSettleChargeDuringBanCountsAfterIt(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, lift := range []string{"SetLimit", "ClearLimit"} {
			for _, banned := range []int{0, 1} {
				t.Run(fmt.Sprintf("%v/%s/rate%d", alg, lift, banned), func(t *testing.T) {
					l := newReserveLimiter(t, Config{Algorithm: alg, Buckets: 4,
						Rates: []Rate{{Limit: 4, Window: time.Second}, {Limit: 6, Window: 3 * time.Second}}})
					if !l.AllowN("k", ms(0), 1).Allowed {
						t.Fatal("1 unit at 0 denied")
					}
					lims := []int{4, 6}
					lims[banned] = 0
					if err := l.SetLimits("k", lims...); err != nil {
						t.Fatal(err)
					}
					if err := l.Settle("k", ms(0), 3); err != nil {
						t.Fatal(err)
					}
					var err error
					if lift == "SetLimit" {
						err = l.SetLimits("k", 4, 6)
					} else {
						err = l.ClearLimit("k")
					}
					if err != nil {
						t.Fatal(err)
					}
					if r := l.AllowN("k", ms(100), 1); r.Allowed {
						t.Errorf("a unit at 100ms admitted beside the 4 settled at 0 under a ban (limit 4 per second): %+v", r)
					}
				})
			}
		}
	}
}

// TestReserveCancelAfterLaterReservation: limit 2 per second, 2 units at
// 0, then two reservations of 1 unit; the first is cancelled after the
// second was made, and two more units are reserved. The fixed window and
// the log give the first one's unit back (its window, its stamp): the
// next reservation takes its instant. The counter gives it back in its
// bucket, but the key stays at the second one's bucket (the buckets
// before it still deny), so the next one comes there. GCRA gives back
// what the second one, queued behind, leaves: nothing (x/time/rate's
// restoreTokens, with its lastEvent). The log holds nothing further than
// one window ahead (ErrNotHeld).
func TestReserveCancelAfterLaterReservation(t *testing.T) {
	cases := []struct {
		alg            Algorithm
		r1, r2, r3, r4 int // ms; -1: not held
	}{
		{FixedWindow, 1000, 1000, 1000, 2000},
		{SlidingLog, 1000, 1000, 1000, -1},
		{SlidingCounter, 1125, 1250, 1250, 2375},
		{GCRA, 500, 1000, 1500, 2000},
	}
	for _, c := range cases {
		t.Run(c.alg.String(), func(t *testing.T) {
			l := newReserveLimiter(t, Config{Algorithm: c.alg, Limit: 2, Window: time.Second, Buckets: 4})
			if !l.AllowN("k", ms(0), 2).Allowed {
				t.Fatal("2 units at 0 denied")
			}
			at := func(r Reservation) int {
				if !r.OK() {
					return -1
				}
				return int(r.at.Sub(rt0) / time.Millisecond)
			}
			r1, r2 := l.ReserveN("k", ms(0), 1), l.ReserveN("k", ms(0), 1)
			r1.CancelAt(ms(100))
			r3, r4 := l.ReserveN("k", ms(100), 1), l.ReserveN("k", ms(100), 1)
			got := [4]int{at(r1), at(r2), at(r3), at(r4)}
			if want := [4]int{c.r1, c.r2, c.r3, c.r4}; got != want {
				t.Fatalf("reservations at %v ms, want %v", got, want)
			}
		})
	}
}
