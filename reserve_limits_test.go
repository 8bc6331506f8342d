package shardlimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
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

// TestReserveRaceWithAdmin runs, from many goroutines (meant for -race),
// reservations, cancels, settles and waits (on a ManualClock, some
// cancelled) of a few keys while others change their limits, Reset them,
// sweep, and other keys evict them from a capped table: no call panics,
// none fails but with the errors its documentation names (a table full of
// keys with limits of their own refuses new keys), and every wait ends.
func TestReserveRaceWithAdmin(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			c := waitClock()
			l := newReserveLimiter(t, Config{Algorithm: alg, Clock: c, Shards: 2, MaxKeys: 4, WhenFull: EvictLeastRecent,
				Rates: []Rate{{Limit: 4, Window: 100 * time.Millisecond}, {Limit: 6, Window: 300 * time.Millisecond}}})
			var wg sync.WaitGroup
			errs := make(chan error, 1024)
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					for range 300 {
						key := string(rune('a' + rng.IntN(6)))
						now := c.Now().Add(time.Duration(rng.IntN(200)-100) * time.Millisecond)
						var err error
						switch rng.IntN(9) {
						case 0:
							err = l.SetLimits(key, rng.IntN(6), rng.IntN(8))
						case 1:
							err = l.ClearLimit(key)
						case 2:
							err = l.Reset(key)
						case 3:
							l.Sweep(now)
						case 4:
							err = l.Settle(key, now, rng.IntN(5)-2)
						case 5:
							ctx, cancel := context.WithCancel(context.Background())
							if rng.IntN(2) == 0 {
								cancel()
							} else {
								ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(3))*time.Millisecond)
							}
							err = l.WaitN(ctx, key, 1+rng.IntN(3))
							cancel()
							if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
								errors.Is(err, ErrWouldExceedDeadline) || errors.Is(err, ErrExceedsLimit) {
								err = nil
							}
						default:
							r := l.ReserveN(key, now, 1+rng.IntN(3))
							if !r.OK() {
								if e := r.Err(); !errors.Is(e, ErrExceedsLimit) && !errors.Is(e, ErrNotHeld) && !errors.Is(e, ErrTooManyKeys) {
									err = e
								}
								break
							}
							if rng.IntN(2) == 0 {
								r.CancelAt(now)
							} else {
								err = l.Settle(key, r.at, -1)
							}
						}
						if errors.Is(err, ErrTooManyKeys) {
							err = nil // keys with limits of their own fill the table: none can be evicted
						}
						if err != nil {
							errs <- fmt.Errorf("key %q: %w", key, err)
							return
						}
					}
				}()
			}
			stop := make(chan struct{})
			ticked := make(chan struct{})
			go func() { // the clock moves on, so every sleeping wait ends
				defer close(ticked)
				for {
					select {
					case <-stop:
						return
					default:
						c.Advance(time.Millisecond)
						runtime.Gosched()
					}
				}
			}()
			wg.Wait()
			close(stop)
			<-ticked
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestSettleLogOverdraftThenRaisedLimit: a SlidingLog key of 2 per second
// spends 2 units at 0 and is charged 3 more (its ring, of twice the
// limit, has room for 2: the last unit is an overdraft's excess, which
// the ring's oldest stamp holds besides its own); its limit is then
// raised to 6. The window already holds 5 units, so 2
// more must be denied: the raise must not forget the unit the ring could
// not stamp.
func TestSettleLogOverdraftThenRaisedLimit(t *testing.T) {
	l := newReserveLimiter(t, Config{Algorithm: SlidingLog, Limit: 2, Window: time.Second})
	if !l.AllowN("k", ms(0), 2).Allowed {
		t.Fatal("2 units at 0 denied")
	}
	if err := l.Settle("k", ms(0), 3); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLimit("k", 6); err != nil {
		t.Fatal(err)
	}
	if r := l.AllowN("k", ms(100), 2); r.Allowed {
		t.Errorf("2 units at 100ms admitted beside the 5 of [0, 1s) (limit 6 per second): %+v", r)
	}
	if r := l.AllowN("k", ms(200), 0); r.Remaining != 1 {
		t.Errorf("a peek at 200ms: %+v, want 1 remaining", r)
	}
	// The excess expires with the stamps that hold it, one step after 0.
	if r := l.AllowN("k", ms(1001), 6); !r.Allowed {
		t.Errorf("6 units at 1001ms, after the window of the 5, denied: %+v", r)
	}
}

// TestWaitCancelledWhileOthersReserve: on a ManualClock, limit 2 per
// second with 2 units spent, a waiter sleeps for 1 unit and another
// caller then reserves 1 behind it; the waiter's context is cancelled.
// The waiter's cancel gives back what TestReserveCancelAfterLaterReservation
// says per algorithm, and the reservations that follow land where that
// test's do (from the waiter's instant): never beside the held unit
// beyond the limit.
func TestWaitCancelledWhileOthersReserve(t *testing.T) {
	cases := []struct {
		alg    Algorithm
		r2, r3 time.Duration // the reservation behind the waiter, and the next one
	}{
		{FixedWindow, time.Second, time.Second},
		{SlidingLog, time.Second, time.Second},
		{SlidingCounter, 1250 * time.Millisecond, 1250 * time.Millisecond},
		{GCRA, time.Second, 1500 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.alg.String(), func(t *testing.T) {
			clock := waitClock()
			l := newReserveLimiter(t, Config{Algorithm: c.alg, Limit: 2, Window: time.Second, Buckets: 4, Clock: clock})
			t0 := clock.Now()
			if !l.AllowN("k", t0, 2).Allowed {
				t.Fatal("2 units denied")
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.WaitN(ctx, "k", 1) }()
			sleepers(t, clock, 1)
			r2 := l.ReserveN("k", t0, 1)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the cancelled wait: %v", err)
			}
			r3 := l.ReserveN("k", t0, 1)
			if !r2.OK() || !r3.OK() || r2.Delay() != c.r2 || r3.Delay() != c.r3 {
				t.Fatalf("after the cancelled wait: reservations in %v (ok %v) and %v (ok %v), want %v and %v", r2.Delay(), r2.OK(), r3.Delay(), r3.OK(), c.r2, c.r3)
			}
		})
	}
}
