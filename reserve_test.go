package shardlimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// rt0 is the instant the reservation tests count from: a whole second,
// so windows and buckets start there.
var rt0 = time.Unix(1_700_000_000, 0)

// ms returns rt0 plus d milliseconds.
func ms(d int) time.Time { return rt0.Add(time.Duration(d) * time.Millisecond) }

// newReserveLimiter returns a limiter of alg without a janitor, closed at
// the end of the test.
func newReserveLimiter(tb testing.TB, cfg Config) Limiter {
	tb.Helper()
	cfg.JanitorInterval = -1
	l, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%+v): %v", cfg, err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// TestSettleSteps settles decisions on every algorithm: a refund gives its
// units back, never below zero; a charge is an overdraft the next
// decisions count; a refund of a decision whose window has passed, or of
// a key not stored, gives nothing; a charge stores a new key; several
// rates are settled together.
func TestSettleSteps(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := newReserveLimiter(t, Config{Algorithm: alg, Limit: 3, Window: time.Second})
			allow := func(key string, at time.Time, n int, want bool) {
				t.Helper()
				if got := l.AllowN(key, at, n); got.Allowed != want || got.Err != nil {
					t.Fatalf("AllowN(%q, %v, %d) = %+v, want allowed %v", key, at.Sub(rt0), n, got, want)
				}
			}
			settle := func(key string, at time.Time, delta int) {
				t.Helper()
				if err := l.Settle(key, at, delta); err != nil {
					t.Fatalf("Settle(%q, %v, %d): %v", key, at.Sub(rt0), delta, err)
				}
			}
			allow("a", ms(0), 3, true)
			settle("a", ms(0), -2) // a refund: two units back
			allow("a", ms(0), 2, true)
			allow("a", ms(0), 1, false)
			settle("a", ms(0), -3)
			settle("a", ms(0), 5) // an overdraft beyond the limit
			allow("a", ms(0), 1, false)

			allow("z", ms(0), 1, true)
			settle("z", ms(0), -10) // never below zero
			allow("z", ms(0), 4, false)
			allow("z", ms(0), 3, true)

			// A refund never frees room a window does not have: the decision
			// at 0 has expired, the one at 1.5 s holds the key's units.
			allow("s", ms(0), 3, true)
			allow("s", ms(1500), 3, true)
			settle("s", ms(0), -3)
			allow("s", ms(1600), 1, false)

			keys := l.Len()
			settle("new", ms(0), -1) // a key not stored: nothing
			if l.Len() != keys {
				t.Fatalf("a refund stored a key: %d keys, were %d", l.Len(), keys)
			}
			settle("new", ms(0), 2) // a charge stores it
			if l.Len() != keys+1 {
				t.Fatalf("a charge did not store its key: %d keys, were %d", l.Len(), keys)
			}
			allow("new", ms(0), 2, false)
			allow("new", ms(0), 1, true)
		})
	}
}

// TestSettleRates settles every rate of a key: the refund reaches the long
// window, which would deny otherwise.
func TestSettleRates(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := newReserveLimiter(t, Config{Algorithm: alg, Rates: []Rate{{3, time.Second}, {5, 10 * time.Second}}})
			if !l.AllowN("k", ms(0), 3).Allowed {
				t.Fatal("first decision denied")
			}
			if err := l.Settle("k", ms(0), -3); err != nil {
				t.Fatal(err)
			}
			if r := l.AllowN("k", ms(1500), 3); !r.Allowed {
				t.Fatalf("after the refund: %+v", r)
			}
			if r := l.AllowN("k", ms(3000), 3); r.Allowed {
				t.Fatalf("the long window admitted 6 of 5: %+v", r)
			}
			if err := l.Settle("k", ms(3000), 4); err != nil {
				t.Fatal(err)
			}
			if r := l.AllowN("k", ms(4500), 1); r.Allowed || r.Window != 10*time.Second {
				t.Fatalf("after a charge of the long window: %+v", r)
			}
		})
	}
}

// TestSettleChargeAfterLatest: a charge at an instant after the key's
// latest decision (one made elsewhere, as a store's) counts at that
// instant, in its window: a key first decided a window earlier is full
// after a charge of the limit there, every algorithm, one rate and two.
func TestSettleChargeAfterLatest(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, rates := range [][]Rate{{{4, 10 * time.Second}}, {{4, 10 * time.Second}, {8, time.Minute}}} {
			t.Run(fmt.Sprintf("%v/%d", alg, len(rates)), func(t *testing.T) {
				l := newReserveLimiter(t, Config{Algorithm: alg, Rates: rates})
				if !l.AllowN("k", ms(0), 1).Allowed {
					t.Fatal("first decision denied")
				}
				later := ms(20_000) // two windows on
				if err := l.Settle("k", later, 4); err != nil {
					t.Fatal(err)
				}
				if r := l.AllowN("k", later, 1); r.Allowed {
					t.Fatalf("a charge of the limit at %v left room there: %+v", later, r)
				}
			})
		}
	}
}

// TestSettleErrors: bad input returns errors wrapping the sentinels.
func TestSettleErrors(t *testing.T) {
	l := newReserveLimiter(t, Config{Algorithm: GCRA, Limit: 3, Window: time.Second})
	for _, c := range []struct {
		key   string
		at    time.Time
		delta int
		want  error
	}{
		{"", ms(0), 1, ErrInvalidKey},
		{string(make([]byte, DefaultMaxKeyBytes+1)), ms(0), 1, ErrInvalidKey},
		{"k", ms(0), MaxLimit + 1, ErrInvalidCost},
		{"k", ms(0), -MaxLimit - 1, ErrInvalidCost},
		{"k", time.Time{}, 1, ErrInvalidTime},
		{"k", ms(0), 0, nil},
	} {
		if err := l.Settle(c.key, c.at, c.delta); !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("Settle(len %d, %v, %d) = %v, want %v", len(c.key), c.at, c.delta, err, c.want)
		}
	}
	l.Close()
	if err := l.Settle("k", ms(0), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Settle after Close = %v", err)
	}
}

// TestReserveSteps reserves, on every algorithm of limit 2 per second,
// units the key cannot admit now: the reservation's delay is the
// algorithm's wait, decisions before it are denied, a cancel gives the
// units back (the same slot is reserved again), a cancel after the units'
// time does nothing, and costs above the limit or under a ban are never
// OK.
func TestReserveSteps(t *testing.T) {
	cases := []struct {
		alg   Algorithm
		delay time.Duration // of 1 unit after 2 at 0
		more  bool          // another unit fits at the reservation's instant
	}{
		{FixedWindow, time.Second, true},                 // the next window
		{SlidingLog, time.Second, true},                  // the two units expire
		{SlidingCounter, 1050 * time.Millisecond, false}, // half of bucket 0 weighs 1
		{GCRA, 500 * time.Millisecond, false},            // one emission interval
	}
	for _, c := range cases {
		t.Run(c.alg.String(), func(t *testing.T) {
			l := newReserveLimiter(t, Config{Algorithm: c.alg, Limit: 2, Window: time.Second})
			r1 := l.ReserveN("k", ms(0), 2)
			if !r1.OK() || r1.Delay() != 0 || r1.Err() != nil {
				t.Fatalf("first reservation: ok %v delay %v err %v", r1.OK(), r1.Delay(), r1.Err())
			}
			r2 := l.ReserveN("k", ms(0), 1)
			if !r2.OK() || r2.Delay() != c.delay || r2.DelayFrom(ms(100)) != c.delay-100*time.Millisecond {
				t.Fatalf("second reservation: ok %v delay %v err %v, want delay %v", r2.OK(), r2.Delay(), r2.Err(), c.delay)
			}
			if r := l.AllowN("k", ms(200), 1); r.Allowed || r.RetryAfter <= 0 {
				t.Fatalf("a decision before the reservation's time: %+v", r)
			}
			act := rt0.Add(c.delay)
			if got := l.Peek("k", act, 1).Allowed; got != c.more {
				t.Fatalf("Peek at the reservation's time = %v, want %v", got, c.more)
			}
			if got := l.Peek("k", act, 2).Allowed; got {
				t.Fatal("the reservation's window holds 3 of 2")
			}
			r2.CancelAt(ms(100)) // its unit comes back: the same slot again
			r3 := l.ReserveN("k", ms(100), 1)
			if !r3.OK() || r3.Delay() != c.delay-100*time.Millisecond {
				t.Fatalf("after the cancel: ok %v delay %v, want %v", r3.OK(), r3.Delay(), c.delay-100*time.Millisecond)
			}
			r3.CancelAt(act.Add(time.Millisecond)) // too late: the unit was the caller's
			if l.Peek("k", act, 2).Allowed {
				t.Fatal("a late cancel gave the unit back")
			}
			if r := l.ReserveN("k", ms(0), 3); r.OK() || !errors.Is(r.Err(), ErrExceedsLimit) || r.Delay() != Never {
				t.Fatalf("a cost above the limit: ok %v delay %v err %v", r.OK(), r.Delay(), r.Err())
			}
			if err := l.SetLimit("banned", 0); err != nil {
				t.Fatal(err)
			}
			if r := l.ReserveN("banned", ms(0), 1); r.OK() || !errors.Is(r.Err(), ErrExceedsLimit) {
				t.Fatalf("a ban: ok %v err %v", r.OK(), r.Err())
			}
			if r := l.ReserveN("k", ms(0), 0); !r.OK() || r.Delay() != 0 {
				t.Fatalf("n = 0: ok %v delay %v", r.OK(), r.Delay())
			}
			if r := l.ReserveN("", ms(0), 1); r.OK() || !errors.Is(r.Err(), ErrInvalidKey) {
				t.Fatalf("an empty key: ok %v err %v", r.OK(), r.Err())
			}
		})
	}
}

// TestReserveQueue reserves one unit at a time at one instant, 20 times:
// reservations come in the order made, never more than the limit in a
// window of the fixed window or of the log, and the log's horizon (one
// window) ends its queue with ErrNotHeld.
func TestReserveQueue(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := newReserveLimiter(t, Config{Algorithm: alg, Limit: 3, Window: time.Second})
			var acts []time.Time
			for i := range 20 {
				r := l.ReserveN("k", ms(0), 1)
				if !r.OK() {
					if alg != SlidingLog || !errors.Is(r.Err(), ErrNotHeld) || i < 4 {
						t.Fatalf("reservation %d: %v", i, r.Err())
					}
					break
				}
				acts = append(acts, ms(0).Add(r.Delay()))
			}
			if (len(acts) == 20) == (alg == SlidingLog) {
				t.Fatalf("%d reservations held", len(acts))
			}
			if !slices.IsSortedFunc(acts, func(a, b time.Time) int { return a.Compare(b) }) {
				t.Fatalf("reservations out of order: %v", acts)
			}
			checkWindows(t, alg, acts, 3, time.Second)
		})
	}
}

// checkWindows fails if a window of the fixed window, or any interval of
// length w for the sliding log, holds more than lim of the instants acts.
func checkWindows(t *testing.T, alg Algorithm, acts []time.Time, lim int, w time.Duration) {
	t.Helper()
	for _, a := range acts {
		from, to := a, a.Add(w)
		if alg == FixedWindow {
			from = a.Truncate(w)
			to = from.Add(w)
		} else if alg != SlidingLog {
			return
		}
		n := 0
		for _, b := range acts {
			if !b.Before(from) && b.Before(to) {
				n++
			}
		}
		if n > lim {
			t.Fatalf("%d units in [%v, %v): %v", n, from.Sub(rt0), to.Sub(rt0), acts)
		}
	}
}

// TestReservationPortXTimeRate ports golang.org/x/time/rate's reservation
// tests to GCRA: rate 10 per second and burst b is a limit of b per b
// tenths of a second, and ti is t0 plus i tenths. Where x/time/rate lets
// an instant behind the latest start over (its jump-back case), this
// package decides it at the latest instant (the time rule), so that case
// expects the later instants.
func TestReservationPortXTimeRate(t *testing.T) {
	ti := func(i int) time.Time { return ms(100 * i) }
	type req struct {
		at, n, act int // instants as tenths
		ok         bool
	}
	type step struct {
		r      req
		cancel int // after the reservation of step cancel, cancel at this tenth (-1: none)
		of     int // the step whose reservation to cancel
		allow  bool
	}
	cases := []struct {
		name  string
		burst int
		steps []step
	}{
		{"simple", 2, []step{{r: req{0, 2, 0, true}}, {r: req{0, 2, 2, true}}, {r: req{3, 2, 4, true}}}},
		{"cancel invalid", 2, []step{{r: req{0, 2, 0, true}}, {r: req{0, 3, 0, false}}, {cancel: 0, of: 1}, {r: req{0, 2, 2, true}}}},
		{"cancel last", 2, []step{{r: req{0, 2, 0, true}}, {r: req{0, 2, 2, true}}, {cancel: 1, of: 1}, {r: req{1, 2, 2, true}}}},
		{"cancel too late", 2, []step{{r: req{0, 2, 0, true}}, {r: req{0, 2, 2, true}}, {cancel: 3, of: 1}, {r: req{3, 2, 4, true}}}},
		{"cancel 0 tokens", 2, []step{{r: req{0, 2, 0, true}}, {r: req{0, 1, 1, true}}, {r: req{0, 1, 2, true}}, {cancel: 0, of: 1}, {r: req{0, 1, 3, true}}}},
		{"cancel 1 token", 2, []step{{r: req{0, 2, 0, true}}, {r: req{0, 2, 2, true}}, {r: req{0, 1, 3, true}}, {cancel: 2, of: 1}, {r: req{2, 2, 4, true}}}},
		{"cancel multi", 4, []step{{r: req{0, 4, 0, true}}, {r: req{0, 3, 3, true}}, {r: req{0, 1, 4, true}}, {r: req{0, 1, 5, true}}, {cancel: 1, of: 3}, {cancel: 1, of: 1}, {r: req{1, 3, 5, true}}}},
		{"jump back", 2, []step{{r: req{1, 2, 1, true}}, {r: req{0, 1, 2, true}}, {r: req{2, 2, 4, true}}}},
		{"mix", 2, []step{{r: req{0, 3, 0, false}}, {r: req{0, 2, 0, true}}, {r: req{1, 2, 0, false}, allow: true}, {r: req{1, 2, 2, true}}, {r: req{1, 1, 0, false}, allow: true}, {r: req{3, 1, 0, true}, allow: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newReserveLimiter(t, Config{Algorithm: GCRA, Limit: c.burst, Window: time.Duration(c.burst) * 100 * time.Millisecond})
			rs := make([]Reservation, len(c.steps))
			for i, s := range c.steps {
				switch {
				case s.r.n == 0: // a cancel
					rs[s.of].CancelAt(ti(s.cancel))
				case s.allow:
					if got := l.AllowN("k", ti(s.r.at), s.r.n).Allowed; got != s.r.ok {
						t.Fatalf("step %d: AllowN at t%d of %d = %v", i, s.r.at, s.r.n, got)
					}
				default:
					r := l.ReserveN("k", ti(s.r.at), s.r.n)
					rs[i] = r
					if r.OK() != s.r.ok {
						t.Fatalf("step %d: ReserveN at t%d of %d: ok %v (%v)", i, s.r.at, s.r.n, r.OK(), r.Err())
					}
					if r.OK() && !ti(s.r.at).Add(r.Delay()).Equal(ti(s.r.act)) {
						t.Fatalf("step %d: ReserveN at t%d of %d acts at %v, want t%d", i, s.r.at, s.r.n, ti(s.r.at).Add(r.Delay()).Sub(rt0), s.r.act)
					}
				}
			}
		})
	}
}

// sleepers waits (bounded) until c has n sleepers: an event the waiting
// goroutines cause, polled without sleeping.
func sleepers(t *testing.T, c *ManualClock, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Sleepers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sleepers, want %d", c.Sleepers(), n)
		}
		runtime.Gosched()
	}
}

// waitClock returns a ManualClock an hour ahead of the real time, so a
// context's deadline set from its readings never passes in a test.
func waitClock() *ManualClock {
	return NewManualClock(time.Now().Add(time.Hour).Truncate(time.Second))
}

// TestWaitManualClock: WaitN returns at once when the key admits the
// units, or when no wait can (a cost above the limit) or the wait is
// longer than ctx's deadline allows (holding nothing); otherwise it sleeps
// on the Clock until the units are the caller's, and returns when the
// clock gets there, not a nanosecond earlier.
func TestWaitManualClock(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			c := waitClock()
			l := newReserveLimiter(t, Config{Algorithm: alg, Limit: 2, Window: time.Second, Clock: c})
			ctx := context.Background()
			if err := l.WaitN(ctx, "k", 2); err != nil {
				t.Fatal(err)
			}
			if err := l.WaitN(ctx, "k", 3); !errors.Is(err, ErrExceedsLimit) {
				t.Fatalf("a cost above the limit: %v", err)
			}
			before := l.Peek("k", c.Now(), 1)
			short, cancel := context.WithDeadline(ctx, c.Now().Add(400*time.Millisecond))
			defer cancel()
			if err := l.WaitN(short, "k", 1); !errors.Is(err, ErrWouldExceedDeadline) {
				t.Fatalf("a wait beyond the deadline: %v", err)
			}
			if after := l.Peek("k", c.Now(), 1); after != before {
				t.Fatalf("a refused wait held units: %+v, was %+v", after, before)
			}
			wait := l.ReserveN("probe", c.Now(), 0) // a clock reading: no units
			_ = wait
			need := l.Peek("k", c.Now(), 1).RetryAfter
			done := make(chan error, 1)
			go func() { done <- l.Wait(ctx, "k") }()
			sleepers(t, c, 1)
			c.Advance(need - time.Nanosecond)
			if c.Sleepers() != 1 {
				t.Fatal("the waiter woke early")
			}
			c.Advance(time.Nanosecond)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWaitCancelled: a waiter whose context is cancelled returns an error
// wrapping ctx.Err() and holds nothing: the next reservation gets its
// slot.
func TestWaitCancelled(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			c := waitClock()
			l := newReserveLimiter(t, Config{Algorithm: alg, Limit: 2, Window: time.Second, Clock: c})
			if !l.AllowN("k", c.Now(), 2).Allowed {
				t.Fatal("denied")
			}
			want := l.Peek("k", c.Now(), 1).RetryAfter
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.WaitN(ctx, "k", 1) }()
			sleepers(t, c, 1)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait: %v", err)
			}
			if r := l.ReserveN("k", c.Now(), 1); !r.OK() || r.Delay() != want {
				t.Fatalf("after the cancelled wait: ok %v delay %v, want %v", r.OK(), r.Delay(), want)
			}
			cancelled, stop := context.WithCancel(context.Background())
			stop()
			if err := l.WaitN(cancelled, "k", 1); !errors.Is(err, context.Canceled) {
				t.Fatalf("a wait on a done context: %v", err)
			}
		})
	}
}

// TestWaitFIFO: waiters on one key are admitted in the order they called,
// a large cost before the small ones after it (GCRA, whose queue of
// waits gives each its own instant).
func TestWaitFIFO(t *testing.T) {
	c := waitClock()
	l := newReserveLimiter(t, Config{Algorithm: GCRA, Limit: 6, Window: time.Second, Clock: c})
	if !l.AllowN("k", c.Now(), 6).Allowed {
		t.Fatal("denied")
	}
	costs := []int{3, 1, 1, 1}
	order := make(chan int, len(costs))
	var wg sync.WaitGroup
	for i, n := range costs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.WaitN(context.Background(), "k", n); err != nil {
				t.Error(err)
			}
			order <- i
		}()
		sleepers(t, c, i+1) // waiter i sleeps before i+1 calls
	}
	var got []int
	for range 100 {
		if len(got) == len(costs) {
			break
		}
		c.Advance(50 * time.Millisecond)
		for c.Sleepers()+len(got) < len(costs) {
			got = append(got, <-order) // a woken waiter is on its way
		}
	}
	wg.Wait()
	if !slices.IsSorted(got) || len(got) != len(costs) {
		t.Fatalf("admitted in order %v", got)
	}
}

// TestReserveRace runs reservations, cancels, decisions and settles of a
// few keys from many goroutines (meant for -race), and checks that the
// sliding log's held units never put more than the limit in a window.
func TestReserveRace(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			const lim, workers, ops = 4, 8, 300
			l := newReserveLimiter(t, Config{Algorithm: alg, Limit: lim, Window: 100 * time.Millisecond})
			var mu sync.Mutex
			held := map[string][]time.Time{}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					for i := range ops {
						key := string(rune('a' + rng.IntN(2)))
						now := ms(i)
						switch rng.IntN(4) {
						case 0:
							l.AllowN(key, now, 1)
						case 1:
							_ = l.Settle(key, now, rng.IntN(2)) // a charge, units the check does not track
						default:
							r := l.ReserveN(key, now, 1+rng.IntN(2))
							if !r.OK() {
								continue
							}
							n := r.n
							switch rng.IntN(3) {
							case 0:
								r.CancelAt(now)
								continue
							case 1:
								// A refund of one of its own units: the limiter
								// drops one stamp of r.at (its own or another's
								// of that instant, the same unit to the count).
								_ = l.Settle(key, r.at, -1)
								n--
							}
							mu.Lock()
							for range n {
								held[key] = append(held[key], r.at)
							}
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			if alg != SlidingLog {
				return // decisions and charges made the other units: no count to check
			}
			for _, acts := range held {
				slices.SortFunc(acts, func(a, b time.Time) int { return a.Compare(b) })
				checkWindows(t, alg, acts, lim, 100*time.Millisecond)
			}
		})
	}
}

// TestReserveKeepsTheKey: a key holding a reservation is never idle, so a
// sweep keeps it (evicting it would forget the units held, and those its
// reservation gave up), before and after a cancel; long after, its state
// is a fresh key's again and a sweep evicts it, and a decision then
// admits the limit.
func TestReserveKeepsTheKey(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := newReserveLimiter(t, Config{Algorithm: alg, Limit: 2, Window: time.Second})
			l.AllowN("k", ms(0), 2)
			r := l.ReserveN("k", ms(0), 2)
			if !r.OK() || r.Delay() <= 0 {
				t.Fatalf("reservation: ok %v delay %v err %v", r.OK(), r.Delay(), r.Err())
			}
			if n := l.Sweep(ms(500)); n != 0 || l.Len() != 1 {
				t.Fatalf("a sweep before the reservation's time evicted %d keys", n)
			}
			r.CancelAt(ms(600))
			if n := l.Sweep(ms(600)); n != 0 && (alg == FixedWindow || alg == SlidingCounter) {
				t.Fatalf("a sweep after the cancel evicted %d keys", n)
			}
			if r := l.AllowN("k", ms(700), 1); r.Allowed && alg != GCRA { // GCRA's bucket refills
				t.Fatalf("admitted in a full window after the cancel: %+v", r)
			}
			if n := l.Sweep(ms(10_000)); n != 1 || l.Len() != 0 {
				t.Fatalf("a sweep long after evicted %d keys, %d left", n, l.Len())
			}
			if r := l.AllowN("k", ms(10_000), 2); !r.Allowed {
				t.Fatalf("a fresh key denied: %+v", r)
			}
		})
	}
}

// TestReserveLongGap: reservations' stamps ahead of the key's latest
// instant expire like any other when the key comes back long after, and
// a decision in between counts them.
func TestReserveLongGap(t *testing.T) {
	l := newReserveLimiter(t, Config{Algorithm: SlidingLog, Limit: 2, Window: time.Second})
	l.AllowN("k", ms(0), 2)
	if r := l.ReserveN("k", ms(0), 2); !r.OK() || r.Delay() != time.Second {
		t.Fatalf("reservation: ok %v delay %v err %v", r.OK(), r.Delay(), r.Err())
	}
	if r := l.AllowN("k", ms(1500), 1); r.Allowed {
		t.Fatalf("the reserved stamps did not count: %+v", r)
	}
	if r := l.AllowN("k", ms(2000), 2); !r.Allowed {
		t.Fatalf("the reserved stamps did not expire: %+v", r)
	}
	if r := l.AllowN("k", ms(1_000_000_000), 2); !r.Allowed {
		t.Fatalf("after a long gap: %+v", r)
	}
}

// TestReserveRandomNeverOverAdmits runs random reservations, cancels,
// refunds and decisions with instants that sometimes run behind, on the
// fixed window and the sliding log, and checks that the units held by
// reservations not cancelled never put more than the limit in a window
// (the fixed window's) or in any interval of one window's length (the
// log's).
func TestReserveRandomNeverOverAdmits(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingLog} {
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("%v/%d", alg, seed), func(t *testing.T) { randomReserves(t, alg, seed) })
		}
	}
}

// randomReserves is one run of TestReserveRandomNeverOverAdmits.
func randomReserves(t *testing.T, alg Algorithm, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 22))
	const lim, w = 3, time.Second
	l := newReserveLimiter(t, Config{Algorithm: alg, Limit: lim, Window: w})
	type held struct {
		r    Reservation
		live bool
	}
	var hs []held
	var dbg []string
	defer func() {
		if t.Failed() {
			for _, d := range dbg {
				t.Log(d)
			}
		}
	}()
	clock := 0
	for range 400 {
		clock += rng.IntN(120)
		now := ms(clock - rng.IntN(4)/3*rng.IntN(500)) // one in four behind
		switch op := rng.IntN(10); {
		case op < 6:
			r := l.ReserveN("k", now, 1+rng.IntN(lim))
			if r.OK() {
				hs = append(hs, held{r, true})
			}
			if r.OK() {
				dbg = append(dbg, fmt.Sprintf("reserve #%d now=%v n=%d at=%v", len(hs)-1, now.Sub(rt0), r.n, r.at.Sub(rt0)))
			}
		case op < 8 && len(hs) > 0:
			i := rng.IntN(len(hs))
			if !hs[i].live {
				break // at most once: see Reservation
			}
			hs[i].r.CancelAt(now)
			hs[i].live = false
			dbg = append(dbg, fmt.Sprintf("cancel %d now=%v", i, now.Sub(rt0)))
		case op < 9 && len(hs) > 0:
			// A refund of a held reservation's units (its own decision).
			i := rng.IntN(len(hs))
			if hs[i].live {
				_ = l.Settle("k", hs[i].r.at, -hs[i].r.n)
				hs[i].live = false
				dbg = append(dbg, fmt.Sprintf("refund %d at=%v", i, hs[i].r.at.Sub(rt0)))
			}
		default:
			l.Peek("k", now, 1)
		}
	}
	var acts []time.Time
	for _, h := range hs {
		if h.live {
			for range h.r.n {
				acts = append(acts, h.r.at)
			}
		}
	}
	slices.SortFunc(acts, func(a, b time.Time) int { return a.Compare(b) })
	checkWindows(t, alg, acts, lim, w)
}

// TestSettleAfterResetNeverOverAdmits: a decision made before its key was
// Reset is settled after a decision made after the Reset. The Reset forgot
// the first decision's units, so its refund has nothing to give back: it
// must not take back the units admitted after the Reset (a key with a
// limit of its own keeps its record through a Reset, and is checked too).
func TestSettleAfterResetNeverOverAdmits(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, own := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/own=%v", alg, own), func(t *testing.T) {
				l := newReserveLimiter(t, Config{Algorithm: alg, Limit: 3, Window: time.Second, Buckets: 4})
				if own {
					if err := l.SetLimit("k", 3); err != nil {
						t.Fatal(err)
					}
				}
				if !l.AllowN("k", ms(100), 3).Allowed {
					t.Fatal("3 units at 100ms denied")
				}
				if err := l.Reset("k"); err != nil {
					t.Fatal(err)
				}
				if r := l.AllowN("k", ms(200), 3); !r.Allowed {
					t.Fatalf("3 units at 200ms after the Reset denied: %+v", r)
				}
				if err := l.Settle("k", ms(100), -3); err != nil { // the decision before the Reset
					t.Fatal(err)
				}
				if r := l.AllowN("k", ms(300), 1); r.Allowed {
					t.Errorf("a unit at 300ms admitted beside the 3 admitted at 200ms (limit 3 per second): %+v", r)
				}
			})
		}
	}
}

// TestReserveGCRACancelOrder: GCRA reservations cancelled newest first
// all come back whole (each cancel makes the one before it the latest, as
// x/time/rate's lastEvent); cancelled oldest first, the older one gives
// back only what the newer one, queued behind it, leaves (as x/time/rate:
// 2 of its 4 units), and the newer one then all of its own.
func TestReserveGCRACancelOrder(t *testing.T) {
	for _, newestFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("newestFirst=%v", newestFirst), func(t *testing.T) {
			l := newReserveLimiter(t, Config{Algorithm: GCRA, Limit: 4, Window: time.Second})
			if !l.AllowN("k", ms(0), 4).Allowed {
				t.Fatal("4 units at 0 denied")
			}
			r1 := l.ReserveN("k", ms(0), 4)
			r2 := l.ReserveN("k", ms(0), 2)
			if !r1.at.Equal(ms(1000)) || !r2.at.Equal(ms(1500)) {
				t.Fatalf("reservations at %v and %v, want 1s and 1.5s", r1.at.Sub(rt0), r2.at.Sub(rt0))
			}
			want := ms(1000) // every reserved unit back: 4 units fit at 1s again
			if newestFirst {
				r2.CancelAt(ms(100))
				r1.CancelAt(ms(100))
			} else {
				r1.CancelAt(ms(100))
				r2.CancelAt(ms(100))
				want = ms(1500) // r1's 2 units under r2's place stay taken
			}
			r3 := l.ReserveN("k", ms(100), 4)
			if !r3.OK() || !r3.at.Equal(want) {
				t.Fatalf("4 units reserved after the cancels at %v (ok %v), want %v", r3.at.Sub(rt0), r3.OK(), want.Sub(rt0))
			}
		})
	}
}
