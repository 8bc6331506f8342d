package core

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// Tests of the promises in real time, on an overloaded machine: the
// default clock's readings must never lag the true instant, or every
// algorithm but the sliding log admits early in real time (a clock read
// from a value a goroutine advances falls 14-130 ms behind when that
// goroutine waits for a core). Each test loads every core with busy
// goroutines of its own, brackets every decision with time.Now() before
// and after it, and checks the admissions against what the limit allows
// for any instants inside those brackets: an exact clock passes under any
// load, a lagging one fails as soon as it decides at an instant before
// its bracket.

// busy starts 3 busy goroutines per processor until the returned stop is
// called.
func busy() (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-quit:
					return
				default:
				}
			}
		}()
	}
	return func() { close(quit); wg.Wait() }
}

// bracket is what the limiter's timeline may have read during one call:
// [lo, hi], Unix ns.
type bracket struct{ lo, hi int64 }

// timelineOf maps readings of time.Now() to bounds on clock's timeline: the
// clock read between o1 and o2 reads c, so an instant x lies at or after
// c + (x - o2) and at or before c + (x - o1) on it. It keeps the tightest
// of a few tries.
func timelineOf(clock Clock) (lo, hi func(time.Time) int64) {
	var o1, o2 time.Time
	var c int64
	for i := range 100 {
		a := time.Now()
		r := clock.Now().UnixNano()
		b := time.Now()
		if i == 0 || b.Sub(a) < o2.Sub(o1) {
			o1, o2, c = a, b, r
		}
	}
	return func(x time.Time) int64 { return c + int64(x.Sub(o2)) },
		func(x time.Time) int64 { return c + int64(x.Sub(o1)) }
}

// hammer calls l.Allow("k") from 8 goroutines for d (at most 200,000 calls
// each) and returns the brackets of the admitted calls, by lo.
func hammer(l Limiter, d time.Duration) []bracket {
	lo, hi := timelineOf(DefaultClock())
	var mu sync.Mutex
	var got []bracket
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []bracket
			for i := 0; i < 200000 && time.Now().Before(end); i++ {
				b := time.Now()
				ok := l.Allow("k")
				a := time.Now()
				if ok {
					mine = append(mine, bracket{lo(b), hi(a)})
				}
			}
			mu.Lock()
			got = append(got, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(got, func(x, y bracket) int { return int(x.lo - y.lo) })
	return got
}

// within returns the admissions whose decision lay in [from, to) for any
// instants inside their brackets.
func within(adm []bracket, from, to int64) int {
	n := 0
	for _, b := range adm {
		if b.lo >= from && b.hi < to {
			n++
		}
	}
	return n
}

// realTimeExcess returns a description of the first interval in which adm
// holds more admissions than alg's limit allows ("" if none).
func realTimeExcess(alg Algorithm, adm []bracket, limit int, w, g int64) string {
	for _, b := range adm {
		var from, to int64
		var allowed int
		switch alg {
		case FixedWindow: // the aligned window of b's lo
			from = b.lo - b.lo%w
			to, allowed = from+w, limit
		case SlidingLog: // any interval of length W
			from, to, allowed = b.lo, b.lo+w, limit
		case SlidingCounter: // any W/G aligned buckets count in full
			from = b.lo - b.lo%g
			to, allowed = from+w, limit
		case GCRA: // a bucket of L refilled at L per W: L + D*L/W in D
			for _, c := range adm {
				if c.lo < b.lo {
					continue
				}
				d := c.hi - b.lo
				if got, max := within(adm, b.lo, c.hi+1), limit+int(d*int64(limit)/w); got > max {
					return fmt.Sprintf("gcra: %d admitted within %v, at most %d", got, time.Duration(d), max)
				}
			}
			continue
		}
		if got := within(adm, from, to); got > allowed {
			return fmt.Sprintf("%v: %d admitted within %v from %v, limit %d", alg, got, time.Duration(to-from), time.Unix(0, from).Format("15:04:05.000000"), allowed)
		}
	}
	return ""
}

// TestDefaultClockKeepsLimitsInRealTimeUnderLoad: with the default clock,
// under busy goroutines on every core, no algorithm admits more in real
// time than its limit allows: the instants it decides at are the true
// ones.
func TestDefaultClockKeepsLimitsInRealTimeUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("loads every core for a few seconds")
	}
	stop := busy()
	defer stop()
	const limit = 20
	w, g := int64(100*time.Millisecond), int64(10*time.Millisecond)
	for _, alg := range allAlgorithms {
		l := mustNew(t, Config{Algorithm: alg, Limit: limit, Window: time.Duration(w), Buckets: int(w / g)})
		adm := hammer(l, 600*time.Millisecond)
		if len(adm) < limit {
			t.Fatalf("%v: only %d admitted: the test tests little", alg, len(adm))
		}
		if bad := realTimeExcess(alg, adm, limit, w, g); bad != "" {
			t.Errorf("default clock: %s", bad)
		}
	}
}

// TestRetryAfterHoldsForAClientThatWaitsIt: under load, a client denied
// with a RetryAfter that waits it in real time is admitted by Allow, which
// decides at the default clock.
func TestRetryAfterHoldsForAClientThatWaitsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("loads every core")
	}
	stop := busy()
	defer stop()
	for _, alg := range allAlgorithms {
		l := mustNew(t, Config{Algorithm: alg, Limit: 5, Window: 50 * time.Millisecond, Buckets: 5})
		for i := range 10 {
			var now time.Time
			var r Result
			for {
				now = time.Now()
				if r = l.AllowN("k", now, 1); !r.Allowed {
					break
				}
			}
			if r.RetryAfter <= 0 || r.RetryAfter == Never {
				t.Fatalf("%v: denied with RetryAfter %v", alg, r.RetryAfter)
			}
			for d := r.RetryAfter - time.Since(now); d > 0; d = r.RetryAfter - time.Since(now) {
				time.Sleep(d)
			}
			if !l.Allow("k") {
				t.Fatalf("%v: retry %d after waiting RetryAfter %v was denied", alg, i, r.RetryAfter)
			}
		}
	}
}
