package shardlimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// unitEvent is units a key really holds at an instant (ns from rt0):
// admitted by AllowN or ReserveN, or charged by Settle, and not given
// back by a cancel or a refund.
type unitEvent struct {
	idx    int   // the call that made it
	at     int64 // ns from rt0
	units  int   // live units
	charge bool  // an overdraft of Settle
	now    time.Time
	res    Reservation // held, if a reservation
	held   bool
	forgot bool // made before a Reset: no window counts it any more
}

// TestSettleReserveNeverOverAdmits runs random AllowN, ReserveN, CancelAt,
// Settle (refunds of a decision's own units, charges) and, rarely, Reset
// (whose forgotten units no window counts, while their refunds and cancels
// still come) with instants
// that sometimes run behind, on every algorithm with one and with two
// rates, against a model of what was really admitted, and checks every
// rate's promise on it: no fixed window, no interval of one window's
// length (the log), no run of a window's buckets (the counter) holds more
// than the limit, and GCRA admits at most L + d*L/W units in any interval
// of length d. A charge made after every admission of a window is an
// overdraft no decision had to count, so it is left out of that window.
func TestSettleReserveNeverOverAdmits(t *testing.T) {
	rates := [][]Rate{
		{{Limit: 4, Window: time.Second}},
		{{Limit: 3, Window: 400 * time.Millisecond}, {Limit: 5, Window: 2 * time.Second}},
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA} {
		for ri, rs := range rates {
			for seed := range checkSeeds {
				t.Run(fmt.Sprintf("%v/rates%d/%d", alg, ri, seed), func(t *testing.T) {
					randomSettles(t, alg, rs, seed, false, false)
				})
			}
		}
	}
}

// checkSeeds is the number of random runs per algorithm and rates.
var checkSeeds = uint64(40)

// TestSettleReserveSetLimitNeverOverAdmits is
// TestSettleReserveNeverOverAdmits with the key's limits changed at
// random (lowered, raised, a ban, cleared back to the defaults) while its
// reservations wait and its decisions are settled: every window then
// holds at most the largest limit in force at a decision counted in it.
func TestSettleReserveSetLimitNeverOverAdmits(t *testing.T) {
	rates := [][]Rate{
		{{Limit: 4, Window: time.Second}},
		{{Limit: 3, Window: 400 * time.Millisecond}, {Limit: 5, Window: 2 * time.Second}},
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA} {
		for ri, rs := range rates {
			for seed := range checkSeeds {
				t.Run(fmt.Sprintf("%v/rates%d/%d", alg, ri, seed), func(t *testing.T) {
					randomSettles(t, alg, rs, seed, true, false)
				})
			}
		}
	}
}

// TestSettleReserveEvictionNeverOverAdmits is
// TestSettleReserveNeverOverAdmits on a table of one key that evicts the
// least recently used: a decision of another key evicts the key, still
// in use, between its reservations and their cancels, its decisions and
// their settles.
func TestSettleReserveEvictionNeverOverAdmits(t *testing.T) {
	rates := [][]Rate{
		{{Limit: 4, Window: time.Second}},
		{{Limit: 3, Window: 400 * time.Millisecond}, {Limit: 5, Window: 2 * time.Second}},
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA} {
		for ri, rs := range rates {
			for seed := range checkSeeds {
				t.Run(fmt.Sprintf("%v/rates%d/%d", alg, ri, seed), func(t *testing.T) {
					randomSettles(t, alg, rs, seed, false, true)
				})
			}
		}
	}
}

// randomSettles is one run of TestSettleReserveNeverOverAdmits, with
// random limit changes if relimit, and evictions of the key by another
// one if evict.
func randomSettles(t *testing.T, alg Algorithm, rates []Rate, seed uint64, relimit, evict bool) {
	rng := rand.New(rand.NewPCG(seed, 23))
	cfg := Config{Algorithm: alg, Rates: rates, Buckets: 4}
	if evict {
		cfg.Shards, cfg.MaxKeys, cfg.WhenFull = 1, 1, EvictLeastRecent
	}
	l := newReserveLimiter(t, cfg)
	var evs []*unitEvent
	var log []string
	defer func() {
		if t.Failed() {
			for _, s := range log {
				t.Log(s)
			}
		}
	}()
	const noLatest = -1 << 40 // before the first decision
	clock, latest := int64(0), int64(noLatest)
	minLim := rates[0].Limit
	cur := make([]int, len(rates)) // the key's limits now
	for k, r := range rates {
		minLim = min(minLim, r.Limit)
		cur[k] = r.Limit
	}
	// hist[i] is the key's limits at call i; under a ban, the limit
	// before it: a ban keeps the key's usage encoded for that limit, and
	// GCRA's bucket drains at it meanwhile.
	var hist [][]int
	enc := slices.Clone(cur)
	limits := func() []int {
		for k, lim := range cur {
			if lim > 0 {
				enc[k] = lim
			}
		}
		return slices.Clone(enc)
	}
	for i := range 300 {
		hist = append(hist, limits())
		clock += int64(rng.IntN(150))
		nowMs := clock
		switch rng.IntN(8) {
		case 0, 1:
			nowMs -= int64(rng.IntN(600))
		case 2:
			nowMs -= int64(rng.IntN(5000)) // behind by windows
		case 3:
			if rng.IntN(4) == 0 {
				nowMs += int64(rng.IntN(3000)) // ahead of the clock
			}
		}
		now := ms(int(nowMs))
		if rng.IntN(60) == 0 {
			// Reset forgets every unit so far; their refunds and cancels
			// still come, and must not take back later decisions' units.
			if err := l.Reset("k"); err != nil {
				t.Fatalf("#%d: Reset: %v", i, err)
			}
			for _, e := range evs {
				e.forgot = true
			}
			log = append(log, fmt.Sprintf("#%d reset", i))
			continue
		}
		if evict && latest > noLatest && rng.IntN(20) == 0 {
			// Another key's decision evicts the key: its units are
			// forgotten, their refunds and cancels still come.
			// At the key's latest instant: the shard's floor stays there,
			// so the key's next instant is the one this model expects.
			l.AllowN("other", rt0.Add(time.Duration(latest)), 1)
			for _, e := range evs {
				e.forgot = true
			}
			log = append(log, fmt.Sprintf("#%d evicted", i))
			continue
		}
		if relimit && rng.IntN(12) == 0 {
			switch rng.IntN(4) {
			case 0: // back to the defaults
				if err := l.ClearLimit("k"); err != nil {
					t.Fatalf("#%d: ClearLimit: %v", i, err)
				}
				for k, r := range rates {
					cur[k] = r.Limit
				}
			case 1: // a ban of one rate
				cur[rng.IntN(len(cur))] = 0
			default: // lowered or raised
				k := rng.IntN(len(cur))
				cur[k] = 1 + rng.IntN(2*rates[k].Limit)
			}
			if err := l.SetLimits("k", cur...); err != nil {
				t.Fatalf("#%d: SetLimits(%v): %v", i, cur, err)
			}
			hist[i] = limits()
			log = append(log, fmt.Sprintf("#%d limits %v", i, cur))
			continue
		}
		switch op := rng.IntN(12); {
		case op < 4:
			n := 1 + rng.IntN(minLim)
			latest = max(latest, nowMs*1e6)
			if res := l.AllowN("k", now, n); res.Allowed {
				evs = append(evs, &unitEvent{idx: i, at: latest, units: n, now: now})
				log = append(log, fmt.Sprintf("#%d allow now=%d n=%d -> at %d (ev %d)", i, nowMs, n, latest, len(evs)-1))
			} else {
				log = append(log, fmt.Sprintf("#%d allow now=%d n=%d denied", i, nowMs, n))
			}
		case op < 7:
			n := 1 + rng.IntN(minLim)
			latest = max(latest, nowMs*1e6)
			r := l.ReserveN("k", now, n)
			if !r.OK() {
				log = append(log, fmt.Sprintf("#%d reserve now=%d n=%d not ok: %v", i, nowMs, n, r.Err()))
				break
			}
			at := int64(r.at.Sub(rt0))
			if r.Delay() == 0 && at != latest {
				t.Fatalf("#%d: reservation admitted at once counts at %d, the key's latest is %d", i, at, latest)
			}
			evs = append(evs, &unitEvent{idx: i, at: at, units: n, now: now, res: r, held: true})
			log = append(log, fmt.Sprintf("#%d reserve now=%d n=%d -> at %d delay %v (ev %d)", i, nowMs, n, at, r.Delay(), len(evs)-1))
		case op < 8 && len(evs) > 0:
			e := evs[rng.IntN(len(evs))]
			if !e.held || e.units != e.res.n {
				break
			}
			e.res.CancelAt(now)
			e.held = false
			if !now.After(e.res.now.Add(e.res.delay)) {
				log = append(log, fmt.Sprintf("#%d cancel ev@%d now=%d: given back", i, e.at, nowMs))
				e.units = 0
			} else {
				log = append(log, fmt.Sprintf("#%d cancel ev@%d now=%d: too late, kept", i, e.at, nowMs))
			}
		case op < 10 && len(evs) > 0:
			e := evs[rng.IntN(len(evs))]
			if e.charge || e.units == 0 {
				break
			}
			m := 1 + rng.IntN(e.units)
			at := e.now // the now the decision was made with
			if e.held && e.res.Delay() > 0 {
				at = e.now.Add(e.res.Delay())
			}
			if err := l.Settle("k", at, -m); err != nil {
				t.Fatalf("#%d: Settle: %v", i, err)
			}
			e.units -= m
			e.held = false // settled: no cancel any more
			log = append(log, fmt.Sprintf("#%d refund %d of ev@%d at=%d", i, m, e.at, int64(at.Sub(rt0))))
		case op < 11 && len(evs) > 0:
			e := evs[rng.IntN(len(evs))]
			if e.charge {
				break
			}
			m := 1 + rng.IntN(3)
			if err := l.Settle("k", e.now, m); err != nil {
				t.Fatalf("#%d: Settle: %v", i, err)
			}
			evs = append(evs, &unitEvent{idx: i, at: latest, units: m, charge: true})
			log = append(log, fmt.Sprintf("#%d charge %d at %d", i, m, latest))
		default:
			l.Peek("k", now, 1)
		}
	}
	for k, r := range rates {
		checkRate(t, alg, r, k, cfg.Buckets, evs, hist)
	}
}

// checkRate checks the promise of rate r, the k-th of Config.Rates, on
// the live units of evs, hist[i] being the limits in force at call i: a
// window holds at most the largest limit in force from the first call
// that put units in it to the last.
func checkRate(t *testing.T, alg Algorithm, r Rate, k, buckets int, evs []*unitEvent, hist [][]int) {
	t.Helper()
	w := int64(r.Window)
	b := w / int64(buckets)
	// count returns the units in [from, to) of events no later than the
	// last admission there, and whether there is one.
	count := func(from, to int64) int {
		last := -1
		for _, e := range evs {
			if !e.charge && !e.forgot && e.units > 0 && e.at >= from && e.at < to {
				last = max(last, e.idx)
			}
		}
		n := 0
		for _, e := range evs {
			if !e.forgot && e.idx <= last && e.at >= from && e.at < to {
				n += e.units
			}
		}
		return n
	}
	// limit returns the largest limit of the rate in force from the first
	// call whose units count counts in [from, to) to the last.
	limit := func(from, to int64) int {
		last := -1
		for _, e := range evs {
			if !e.charge && !e.forgot && e.units > 0 && e.at >= from && e.at < to {
				last = max(last, e.idx)
			}
		}
		most := 0
		first := len(hist)
		for _, e := range evs {
			if !e.forgot && e.idx <= last && e.units > 0 && e.at >= from && e.at < to {
				first = min(first, e.idx)
			}
		}
		for i := first; i <= last; i++ {
			most = max(most, hist[i][k])
		}
		return most
	}
	in := func(from, to int64) string {
		var s string
		for _, e := range evs {
			if e.units > 0 && e.at >= from && e.at < to {
				s += fmt.Sprintf(" #%d@%d×%d(charge %v)", e.idx, e.at, e.units, e.charge)
			}
		}
		return s
	}
	for _, e := range evs {
		if e.units == 0 || e.charge || e.forgot {
			continue
		}
		switch alg {
		case FixedWindow:
			from := e.at - e.at%w
			if n, most := count(from, from+w), limit(from, from+w); n > most {
				t.Fatalf("rate %v: %d units in fixed window [%d, %d), at most %d:%s", r, n, from, from+w, most, in(from, from+w))
			}
		case SlidingLog:
			for _, f := range evs {
				if f.at <= e.at && f.units > 0 && !f.forgot {
					if n, most := count(f.at, f.at+w), limit(f.at, f.at+w); n > most {
						t.Fatalf("rate %v: %d units in [%d, %d), at most %d:%s", r, n, f.at, f.at+w, most, in(f.at, f.at+w))
					}
				}
			}
		case SlidingCounter:
			end := (e.at/b + 1) * b
			if n, most := count(end-w, end), limit(end-w, end); n > most {
				t.Fatalf("rate %v: %d units in buckets [%d, %d), at most %d:%s", r, n, end-w, end, most, in(end-w, end))
			}
		case GCRA:
			for _, f := range evs {
				if f.at <= e.at && f.units > 0 && !f.forgot {
					d := e.at - f.at
					lim := int64(limit(f.at, e.at+1))
					if n, most := count(f.at, e.at+1), int(lim+d*lim/w); n > most {
						t.Fatalf("rate %v: %d units in [%d, %d], at most %d", r, n, f.at, e.at, most)
					}
				}
			}
		}
	}
}

// TestSettleLogChargeThenCancelNeverOverAdmits: a SlidingLog key whose
// ring is full of stamps (its own and a reservation's) takes a charge,
// then the reservation is cancelled. The charge is an overdraft the next
// decisions must count; admitting 4 more units while it is in the window
// puts 6 in [100ms, 1.1s) of a 4 per second limit.
func TestSettleLogChargeThenCancelNeverOverAdmits(t *testing.T) {
	l := newReserveLimiter(t, Config{Algorithm: SlidingLog, Limit: 4, Window: time.Second})
	if !l.AllowN("k", ms(0), 4).Allowed {
		t.Fatal("4 units at 0 denied")
	}
	r := l.ReserveN("k", ms(100), 4)
	if !r.OK() || r.Delay() != 900*time.Millisecond {
		t.Fatalf("ReserveN at 100ms: OK %v, Delay %v, Err %v", r.OK(), r.Delay(), r.Err())
	}
	if err := l.Settle("k", ms(100), 2); err != nil { // 2 units charged at 100ms
		t.Fatal(err)
	}
	r.CancelAt(ms(200))
	if res := l.AllowN("k", ms(1000), 4); res.Allowed {
		t.Errorf("at 1s: 4 units admitted beside the 2 charged at 100ms (limit 4 per second); Result %+v", res)
	}
}

// TestSettleGCRACancelAfterPartialRefundNeverOverAdmits: a GCRA key
// queues two reservations of 4 units (limit 4 per second), the later one
// is settled to 2 units, then the earlier one is cancelled. The later
// reservation's 2 units keep their instant (2s), so a new reservation of
// 4 units must not be placed there too: 6 units at one instant is more
// than a burst of 4.
func TestSettleGCRACancelAfterPartialRefundNeverOverAdmits(t *testing.T) {
	l := newReserveLimiter(t, Config{Algorithm: GCRA, Limit: 4, Window: time.Second})
	if !l.AllowN("k", ms(0), 4).Allowed {
		t.Fatal("4 units at 0 denied")
	}
	r1 := l.ReserveN("k", ms(100), 4)
	r2 := l.ReserveN("k", ms(200), 4)
	if r1.at != ms(1000) || r2.at != ms(2000) {
		t.Fatalf("reservations at %v and %v, want 1s and 2s", r1.at.Sub(rt0), r2.at.Sub(rt0))
	}
	if err := l.Settle("k", r2.at, -2); err != nil { // r2 costs 2 units after all
		t.Fatal(err)
	}
	r1.CancelAt(ms(300))
	r3 := l.ReserveN("k", ms(400), 4)
	if r3.OK() && r3.at.Before(ms(2500)) {
		t.Errorf("4 units reserved at %v beside r2's 2 units at 2s (limit 4 per second, burst 4): want 2.5s or later", r3.at.Sub(rt0))
	}
}

// TestWaitEndsAtClose: a limiter closed while a wait sleeps ends the wait
// at once with an error wrapping ErrClosed (the waiter does not sleep on
// until its units' time, and is not admitted by a closed limiter).
func TestWaitEndsAtClose(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			c := waitClock()
			l := newReserveLimiter(t, Config{Algorithm: alg, Limit: 2, Window: time.Second, Clock: c})
			if !l.AllowN("k", c.Now(), 2).Allowed {
				t.Fatal("denied")
			}
			done := make(chan error, 1)
			go func() { done <- l.Wait(context.Background(), "k") }()
			sleepers(t, c, 1)
			l.Close()
			if err := <-done; !errors.Is(err, ErrClosed) {
				t.Fatalf("a wait ended by Close: %v, want ErrClosed", err)
			}
			sleepers(t, c, 0)
		})
	}
}

// TestSettleGCRARefundBeforeReservationTwoRates: with rates 3 per 400ms
// and 5 per 2s, a decision at 3.05s is refunded after a reservation
// queued at 3.1833s behind it. The reservation arrived after the 2s
// rate's bucket had drained 133ms past the refunded unit, so the refund
// may give back only what that rate's TAT really loses (266.67ms, not
// 400ms). Over-refunded, two later reservations put 7 units in
// [3.1833s, 3.85s], more than GCRA's 5 + 666ms/400ms = 6: the last one
// must be at 3.9833s or later.
func TestSettleGCRARefundBeforeReservationTwoRates(t *testing.T) {
	l := newReserveLimiter(t, Config{Algorithm: GCRA, Rates: []Rate{{Limit: 3, Window: 400 * time.Millisecond}, {Limit: 5, Window: 2 * time.Second}}})
	l.AllowN("k", ms(87), 3)
	l.AllowN("k", ms(415), 1)
	l.ReserveN("k", ms(3050), 1) // admitted at once
	r3 := l.ReserveN("k", ms(307), 3)
	if err := l.Settle("k", ms(3050), -1); err != nil {
		t.Fatal(err)
	}
	r4 := l.ReserveN("k", ms(549), 3)
	r5 := l.ReserveN("k", ms(619), 1)
	t.Logf("reservations at %v, %v, %v", r3.at.Sub(rt0), r4.at.Sub(rt0), r5.at.Sub(rt0))
	if want := ms(3983); r5.OK() && r5.at.Before(want) {
		t.Errorf("the last reservation at %v, want %v or later (7 units in [%v, %v])", r5.at.Sub(rt0), want.Sub(rt0), r3.at.Sub(rt0), r5.at.Sub(rt0))
	}
}
