package shardlimit

// Tests of the clock rules (CASES.md C11) against stale callers and bad
// instants, found by review.

import (
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/internal/shared"
)

// maxInAnyWindow returns the most instants of ts (ascending) inside any
// half-open interval of length w.
func maxInAnyWindow(ts []time.Time, w time.Duration) int {
	best := 0
	for i := range ts {
		c := 0
		for j := i; j < len(ts) && ts[j].Sub(ts[i]) < w; j++ {
			c++
		}
		best = max(best, c)
	}
	return best
}

// Out-of-order callers: one request in ten arrives with a now 20 ms older
// than the key's latest (fasthttp's ctx.Time() behind a slow auth
// middleware, a request's arrival time, a goroutine descheduled between its
// clock read and the lock). Each such call is taken as a clock step back and
// moves the key's whole state back by 20 ms, so usage expires early and the
// shifts accumulate. Limit 10/s over 10 s: at most 10 may be admitted in any
// one-second interval of the true time (20 for FixedWindow, 20 for GCRA's
// burst plus refill).
func TestStaleCallersDoNotMultiplyTheLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, Config{Algorithm: alg, Limit: 10, Window: time.Second})
			var admitted []time.Time
			for i := range 10000 {
				trueNow := at(float64(i) / 1000) // one call per ms
				now := trueNow
				if i%10 == 0 {
					now = trueNow.Add(-20 * time.Millisecond)
				}
				if l.AllowN("k", now, 1).Allowed {
					admitted = append(admitted, trueNow)
				}
			}
			bound := 10
			if alg == FixedWindow || alg == GCRA {
				bound = 20
			}
			// Allow the 20 ms of skew itself: widen the limit by one unit.
			if got := maxInAnyWindow(admitted, time.Second); got > bound+1 {
				t.Errorf("%d admitted in one second of true time (%d in 10 s), limit 10/s", got, len(admitted))
			}
		})
	}
}

// An instant before the epoch, the zero time.Time included (a caller's
// bug), is an error that changes nothing: it must not wipe a key's usage.
func TestZeroTimeIsAnError(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, Config{Algorithm: alg, Limit: 5, Window: time.Minute})
			admitted := 0
			for i := range 40 {
				now := at(float64(i))
				for range 5 {
					if l.AllowN("k", now, 1).Allowed {
						admitted++
					}
				}
				for _, bad := range []time.Time{{}, time.Unix(-1, 0), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
					wantErr(t, l.AllowN("k", bad, 1).Err, ErrInvalidTime)
					wantErr(t, l.Peek("k", bad, 0).Err, ErrInvalidTime)
				}
			}
			if admitted > 10 {
				t.Errorf("admitted %d in 40 s, limit 5 per minute", admitted)
			}
			if l.Sweep(time.Time{}) != 0 || l.Len() != 1 {
				t.Error("a sweep at the zero time evicted")
			}
		})
	}
}

// SlidingCounter keeps a skew per key that grows by every step back; near
// the largest accepted instant the sum must saturate, never overflow into
// negative durations.
func TestCounterSkewDoesNotOverflow(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingCounter, Limit: 3, Window: time.Millisecond, Buckets: 1})
	hi := time.Unix(0, maxInstant-1)
	for _, now := range []time.Time{hi, time.Unix(0, 0), time.Unix(0, 0), hi, hi} {
		for range 4 {
			r := l.AllowN("k", now, 1)
			checkResultSane(t, r)
			if r.Err != nil {
				t.Fatalf("at %v: %+v", now, r)
			}
		}
	}
}

// TestSlidingLogRingInOrderAfterStep: after a confirmed clock step back the
// shifted stamps (rounded down by less than a step) may be a step later
// than a new unit's; the ring stays in time order, so a denial's
// RetryAfter is the instant the request fits.
func TestSlidingLogRingInOrderAfterStep(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 3, Window: time.Minute, JanitorInterval: -1}) // 100 ns stamps
	last := at(100).Add(50)
	back := last.Add(-(2*time.Second + 90))
	for _, tt := range []time.Time{last, back, back} { // the second is a stale caller, the third confirms the step
		if !l.AllowN("k", tt, 1).Allowed {
			t.Fatal("denied under the limit")
		}
	}
	now := back.Add(time.Second)
	r := l.AllowN("k", now, 3)
	if r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("%+v", r)
	}
	if p := l.Peek("k", now.Add(r.RetryAfter-1), 3); p.Allowed {
		t.Fatalf("admitted before RetryAfter %v", r.RetryAfter)
	}
	if p := l.Peek("k", now.Add(r.RetryAfter), 3); !p.Allowed {
		t.Fatalf("denied RetryAfter %v later: %+v", r.RetryAfter, p)
	}
}

// TestSharedStepBackKeepsRemoteUnits: a shared key keeps the other nodes'
// units by absolute window or bucket, so a clock step back on this node
// decides at the key's latest instant instead of moving the key back past
// them: the limit still counts them,
// and RetryAfter is the instant the request fits.
func TestSharedStepBackKeepsRemoteUnits(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		l, tab := newSharedT(t, Config{Algorithm: alg, Limit: 4, Window: 10 * time.Second, Buckets: 10})
		l.AllowN("k", at(100), 1)
		fl := collectAll(tab)
		totals := make([]int64, len(fl[0].Deltas))
		totals[len(totals)-1] = 3 // 2 remote units beside the local one
		tab.Apply(&fl[0], totals)
		l.AllowN("k", at(95), 5) // a stale caller: decided at 100 (and n is above the limit)
		if r := l.AllowN("k", at(95), 1); !r.Allowed || r.Remaining != 0 {
			t.Fatalf("%v: the step confirmed: %+v, want allowed with remaining 0", alg, r)
		}
		// The first call at 97 is a stale caller again (the key's time did
		// not move back), decided at 100 with durations from 100; the
		// second in a row is this node's stepped clock: durations from 97.
		if r := l.AllowN("k", at(97), 1); r.Allowed {
			t.Fatalf("%v: admitted a fifth unit with limit 4 after the step: %+v", alg, r)
		}
		r := l.AllowN("k", at(97), 1)
		if r.Allowed || r.RetryAfter <= 0 {
			t.Fatalf("%v: admitted a fifth unit with limit 4 after the step: %+v", alg, r)
		}
		if p := l.Peek("k", at(97).Add(r.RetryAfter-1), 1); p.Allowed {
			t.Fatalf("%v: admitted before RetryAfter %v", alg, r.RetryAfter)
		}
		if p := l.Peek("k", at(97).Add(r.RetryAfter), 1); !p.Allowed {
			t.Fatalf("%v: denied RetryAfter %v later: %+v", alg, r.RetryAfter, p)
		}
	}
}

// TestSlidingLogPeekAfterPendingStep: a peek by a caller whose clock
// stepped back (a step pending) answers what an AllowN at the same instant
// would, though it cannot move the stamps.
func TestSlidingLogPeekAfterPendingStep(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 5, Window: 10 * time.Second, JanitorInterval: -1})
	for range 3 {
		l.AllowN("k", at(100), 1)
	}
	l.AllowN("k", at(-3500), 1) // the first call behind: a step back is pending
	p := l.Peek("k", at(-3500), 2)
	a := l.AllowN("k", at(-3500), 2) // confirms the step
	if p.Allowed || a.Allowed || p.RetryAfter != a.RetryAfter || p.ResetAfter != a.ResetAfter || a.RetryAfter != 10*time.Second {
		t.Fatalf("peek %+v, AllowN %+v: want both denied, retry 10s", p, a)
	}
}

// TestSharedStepBackStaysConfirmed: once a shared key's step back is
// confirmed, every later call from the stepped clock gets a RetryAfter
// after which it is admitted, not every other one (the key stands still,
// so each call was taken for a stale caller again).
func TestSharedStepBackStaysConfirmed(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		l, _ := newSharedT(t, Config{Algorithm: alg, Limit: 1, Window: 10 * time.Second, Buckets: 10})
		l.AllowN("k", at(100), 1)
		l.AllowN("k", at(95), 1) // a stale caller
		for i := range 4 {
			now := at(95.01 + float64(i)*0.01)
			r := l.AllowN("k", now, 1)
			if r.Allowed {
				t.Fatalf("%v call %d: admitted over the limit", alg, i)
			}
			if p := l.Peek("k", now.Add(r.RetryAfter), 1); !p.Allowed {
				t.Fatalf("%v call %d: denied RetryAfter %v later: %+v", alg, i, r.RetryAfter, p)
			}
		}
	}
}

// TestSharedLogEmptyRingStepBack: a shared log key whose own ring is empty
// still counts the other nodes' units when a caller behind it (jitter or a
// step) decides.
func TestSharedLogEmptyRingStepBack(t *testing.T) {
	for _, behind := range []float64{105, 109.9} {
		l, tab := newSharedT(t, Config{Algorithm: SlidingLog, Limit: 4, Window: 10 * time.Second, Buckets: 10})
		l.AllowN("k", at(100), 1)
		l.AllowN("k", at(110.1), 5) // n above the limit: denied, the key's latest is 110.1
		fl := collectAll(tab)
		totals := make([]int64, len(fl[0].Deltas))
		totals[len(totals)-1] = 3 // 3 remote units in bucket [110, 111)
		tab.Apply(&fl[0], totals)
		l.AllowN("k", at(110.5), 2) // denied; the local unit of 100 expired: the ring is empty
		admitted := 0
		for range 5 {
			if l.AllowN("k", at(behind), 1).Allowed {
				admitted++
			}
		}
		if admitted != 1 {
			t.Fatalf("behind at %v: admitted %d beside 3 remote units with limit 4, want 1", behind, admitted)
		}
	}
}

// TestSharedSweepKeepsSyncState: the janitor does not evict a shared key
// whose own units no longer count but are not sent yet, or whose other
// nodes' units still count.
func TestSharedSweepKeepsSyncState(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		l, tab := newSharedT(t, Config{Algorithm: alg, Limit: 4, Window: 10 * time.Second, Buckets: 10})
		l.AllowN("remote", at(100), 1)
		if alg == FixedWindow {
			// Into the window [110, 120) with no unit of its own.
			l.AllowN("remote", at(110.2), 5)
		}
		var fl []shared.Flush
		for _, f := range collectAll(tab) {
			if f.Key == "remote" {
				fl = append(fl, f)
			}
		}
		totals := make([]int64, len(fl[0].Deltas))
		totals[len(totals)-1] = int64(fl[0].Deltas[len(totals)-1]) + 3 // 3 remote units
		tab.Apply(&fl[0], totals)
		l.AllowN("unsent", at(100), 1) // never collected
		// At 110.5 the local units of 100 no longer count, but the log's
		// and the counter's bucket [100, 101) still does for the other
		// nodes (until 111), and the fixed window's remote units of
		// [110, 120) do.
		if n := l.Sweep(at(110.5)); alg == FixedWindow && n != 1 || alg != FixedWindow && n != 0 {
			t.Fatalf("%v: swept %d keys (the fixed window's unsent unit of 100 is over)", alg, n)
		}
		if r := l.Peek("remote", at(110.5), 0); r.Remaining == 4 {
			t.Fatalf("%v: the other nodes' units were forgotten: %+v", alg, r)
		}
	}
}

// TestSharedCounterStepBackAndCorrection: a shared sliding counter key
// stands still across a clock step back and the correction after it: it
// never admits over its limit, and its units go to the buckets of the
// key's own (latest) time, where the other nodes count them. (With a skew
// the correction jumped the key an hour ahead: 18 admitted of 10; and the
// skew's drop filed units under a bucket the others no longer counted.)
func TestSharedCounterStepBackAndCorrection(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: SlidingCounter, Limit: 10, Window: 10 * time.Second, Buckets: 10})
	admitted := 0
	for _, c := range []struct {
		at float64
		n  int
	}{{100, 4}, {100.1 - 3600, 1}, {100.2 - 3600, 1}, {101 - 3600, 2}, {102, 10}, {102.5, 2}} {
		if l.AllowN("k", at(c.at), c.n).Allowed {
			admitted += c.n
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d units within 3 s with limit 10, want 10", admitted)
	}
	collectAll(tab)
	l.AllowN("k", at(130-3600), 1) // the stepped clock, 30 s later
	fl := collectAll(tab)
	if len(fl) != 1 || fl[0].Newest != at(102.5).UnixNano()/int64(time.Second) {
		t.Fatalf("flush %+v: want the unit under the key's latest bucket (%d)", fl, at(102.5).UnixNano()/int64(time.Second))
	}
}

// TestSharedLostUnitsAreCounted: unsent units that leave the table are
// counted dropped, never lost silently: Reset of a key with its own limit,
// and a failed flush given back after its key was evicted.
func TestSharedLostUnitsAreCounted(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		l, tab := newSharedT(t, Config{Algorithm: alg, Limit: 10, Window: 10 * time.Second})
		if err := l.SetLimit("own", 5); err != nil {
			t.Fatal(err)
		}
		l.AllowN("own", at(1), 3)
		if err := l.Reset("own"); err != nil {
			t.Fatal(err)
		}
		if dropped, _ := tab.SyncStats(); dropped != 3 {
			t.Fatalf("%v: Reset of a key with its own limit: %d units counted dropped, want 3", alg, dropped)
		}
		l.AllowN("gone", at(1), 2)
		var fl []shared.Flush
		for _, f := range collectAll(tab) {
			if f.Key == "gone" {
				fl = append(fl, f)
			}
		}
		if err := l.Reset("gone"); err != nil { // evicts: its units are out in the flush
			t.Fatal(err)
		}
		tab.Restore(&fl[0]) // the flush failed
		if dropped, _ := tab.SyncStats(); dropped != 5 {
			t.Fatalf("%v: a failed flush of an evicted key: %d units counted dropped, want 5", alg, dropped)
		}
	}
}
