package core

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func TestIdleKeysEvicted(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100,000 keys per algorithm")
	}
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, cfgFor(alg, 10, 10*time.Second, time.Second))
			h0 := heapAlloc()
			var buf [16]byte
			for i := range 100_000 {
				if !l.AllowBytesN(fmt.Appendf(buf[:0], "10.%d.%d", i/256, i%256), at(0.5), 1).Allowed {
					t.Fatalf("key %d denied", i)
				}
			}
			if n := l.Len(); n != 100_000 {
				t.Fatalf("len %d", n)
			}
			h1 := heapAlloc()
			busyAt := 5.0
			if alg == GCRA {
				busyAt = 1.4
			}
			if n := l.Sweep(at(busyAt)); n != 0 || l.Len() != 100_000 {
				t.Fatalf("sweep at %v evicted %d, len %d", busyAt, n, l.Len())
			}
			idleAt := 11.0
			if alg == GCRA {
				idleAt = 1.5 // one unit of 10 per 10 s refills in 1 s
			}
			if alg == SlidingLog {
				// Expired at 10.5: still counted at 10.4.
				if n := l.Sweep(at(10.4)); n != 0 {
					t.Fatalf("sweep at 10.4 evicted %d", n)
				}
			}
			if n := l.Sweep(at(idleAt)); n != 100_000 || l.Len() != 0 {
				t.Fatalf("sweep at %v evicted %d, len %d", idleAt, n, l.Len())
			}
			if st := l.Stats(); st.Evicted != 100_000 || st.Keys != 0 || st.Allowed != 100_000 {
				t.Fatalf("stats %+v", st)
			}
			h2 := heapAlloc()
			if h2 > h0+(h1-h0)/4 {
				t.Fatalf("heap after eviction %d, before keys %d, with keys %d: emptied shards kept their memory", h2, h0, h1)
			}

			// A key that is still limited is never evicted.
			steps := concat(countdown(20, 10, 0), []step{{20, 1, false, 0, dontCare}})
			runSteps(t, l, "hot", steps)
			l.Sweep(at(25))
			if l.Len() != 1 {
				t.Fatal("limited key evicted")
			}
			if r := l.AllowN("hot", at(25), 1); alg != GCRA && (r.Allowed || r.Remaining != 0) {
				t.Fatalf("hot at 25: %+v", r)
			}
			l.Sweep(at(31))
			if l.Len() != 0 {
				t.Fatal("hot not evicted at 31")
			}
		})
	}
}

func TestJanitorRunsOnItsOwn(t *testing.T) {
	clock := NewManualClock(at(0))
	l, err := NewFixedWindow(Config{Limit: 1, Window: time.Second, JanitorInterval: time.Millisecond, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 100 {
		l.Allow(fmt.Sprint("k", i))
	}
	clock.Advance(2 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for l.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("janitor left %d keys", l.Len())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestJanitorTreatsFutureKeysAsJustUsed(t *testing.T) {
	// Time never goes back: a key whose latest instant is after the janitor's now (the
	// clock stepped back) has age 0.
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 5, 10*time.Second, time.Second))
		l.AllowN("k", at(100), 1)
		if n := l.Sweep(at(50)); n != 0 {
			t.Fatalf("%v: evicted a key used in the janitor's future", alg)
		}
	}
}

func TestNoLeakAfterClose(t *testing.T) {
	// Close returns once the janitor has closed its done channel, a moment
	// before its goroutine is gone: goleak retries until it is (counting
	// goroutines right after Close failed 1-3% of -race runs).
	before := goleak.IgnoreCurrent()
	for i := range 1000 {
		l, err := New(Config{Algorithm: allAlgorithms[i%4], Limit: 5, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l.Allow("k")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("after closing 1000 limiters: %v", err)
	}
	l, _ := New(Config{Algorithm: SlidingLog, Limit: 5, Window: time.Second})
	l.Close()
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if l.Allow("k") {
		t.Fatal("allowed after Close")
	}
	wantErr(t, l.AllowN("k", at(0), 1).Err, ErrClosed)
	wantErr(t, l.AllowBytesN([]byte("k"), at(0), 1).Err, ErrClosed)
	wantErr(t, l.Peek("k", at(0), 1).Err, ErrClosed)
	wantErr(t, l.SetLimit("k", 1), ErrClosed)
	wantErr(t, l.ClearLimit("k"), ErrClosed)
	wantErr(t, l.Reset("k"), ErrClosed)
	wantErr(t, l.SetDefaultLimit(1), ErrClosed)
	if l.Sweep(at(0)) != 0 {
		t.Fatal("sweep after close")
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("calls after Close restarted a goroutine: %v", err)
	}
}

// janitorJob returns the limiter's place in the sweeper's schedule, nil if
// its janitor is disabled.
func (l *limiter[E]) janitorJob() *janitorJob { return l.jan }

// touchTableUnlocked writes every shard's slice header without its lock:
// after Close nothing else may touch the table, and -race reports a sweep
// that still does.
func (l *limiter[E]) touchTableUnlocked() {
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		s.recs = s.recs[:len(s.recs):len(s.recs)]
	}
}

func jobOf(tb testing.TB, l Limiter) *janitorJob {
	tb.Helper()
	j, ok := l.(interface{ janitorJob() *janitorJob })
	if !ok {
		tb.Fatalf("%T has no janitor job", l)
	}
	return j.janitorJob()
}

// sweepsOf returns how many sweeps of j the sweeper has begun.
func sweepsOf(j *janitorJob) uint64 {
	sweeper.mu.Lock()
	defer sweeper.mu.Unlock()
	return j.sweeps
}

// eventually polls cond until it holds, failing the test after a deadline
// far beyond what it needs on an idle machine: the verdict is the
// condition, never the time.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("still not %s after 30s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// newJanitored returns a limiter with a janitor every interval, on clock.
func newJanitored(tb testing.TB, alg Algorithm, window, interval time.Duration, clock Clock) Limiter {
	tb.Helper()
	l, err := New(cfgWith(alg, window, interval, clock))
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func cfgWith(alg Algorithm, window, interval time.Duration, clock Clock) Config {
	return Config{Algorithm: alg, Limit: 10, Window: window, JanitorInterval: interval, Clock: clock}
}

func TestJanitorOneGoroutineForManyLimiters(t *testing.T) {
	before := goleak.IgnoreCurrent()
	g0 := runtime.NumGoroutine()
	clock := NewManualClock(at(0))
	ls := make([]Limiter, 1000)
	for i := range ls {
		interval := time.Duration(1+i%20) * time.Millisecond
		if i%10 == 9 {
			interval = 0 // the default, 1s for a window of 1s
		}
		ls[i] = newJanitored(t, allAlgorithms[i%4], time.Second, interval, clock)
		ls[i].Allow("k")
	}
	if g := runtime.NumGoroutine() - g0; g > 1 {
		t.Fatalf("1000 limiters started %d goroutines, want at most 1", g)
	}
	clock.Advance(2 * time.Second)
	eventually(t, "every limiter swept", func() bool {
		for _, l := range ls {
			if l.Len() != 0 {
				return false
			}
		}
		return true
	})
	if g := runtime.NumGoroutine() - g0; g > 1 {
		t.Fatalf("1000 limiters swept by %d goroutines, want at most 1", g)
	}
	for _, l := range ls {
		l.Close()
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("after closing the 1000 limiters: %v", err)
	}
}

func TestJanitorSweepsEachAtItsOwnClockAndInterval(t *testing.T) {
	// Three limiters on clocks of their own, one sweeper: keys idle at
	// their limiter's clock are evicted at each one's interval; keys idle
	// at the caller's instants but not at their limiter's clock stay.
	fastClock, midClock, stillClock := NewManualClock(at(0)), NewManualClock(at(0)), NewManualClock(at(0))
	fast := newJanitored(t, FixedWindow, time.Second, time.Millisecond, fastClock)
	defer fast.Close()
	mid := newJanitored(t, GCRA, time.Minute, 3*time.Millisecond, midClock)
	defer mid.Close()
	still := newJanitored(t, SlidingLog, time.Second, 2*time.Millisecond, stillClock)
	defer still.Close()
	slow := newJanitored(t, SlidingCounter, time.Second, time.Hour, fastClock)
	defer slow.Close()
	for i := range 100 {
		k := fmt.Sprint("k", i)
		fast.Allow(k)
		mid.Allow(k)
		still.AllowN(k, at(0), 1)
		slow.Allow(k)
	}
	jFast, jStill, jSlow := jobOf(t, fast), jobOf(t, still), jobOf(t, slow)

	// The short interval is kept while a long one waits: the sweeper
	// wakes for the earliest due limiter, not the latest registered.
	n := sweepsOf(jFast)
	eventually(t, "fast swept 20 times", func() bool { return sweepsOf(jFast) >= n+20 })
	if fast.Len() != 100 || mid.Len() != 100 {
		t.Fatalf("keys evicted while busy at their clocks: fast %d, mid %d", fast.Len(), mid.Len())
	}

	fastClock.Advance(2 * time.Second) // past fast's window; slow's interval is an hour
	midClock.Advance(2 * time.Minute)
	eventually(t, "fast and mid emptied", func() bool { return fast.Len() == 0 && mid.Len() == 0 })

	// At 2 s the log's keys are idle at the caller's instants, but its
	// own clock still reads 0: two more of its sweeps evict nothing.
	n = sweepsOf(jStill)
	eventually(t, "still swept twice more", func() bool { return sweepsOf(jStill) >= n+2 })
	if still.Len() != 100 || still.Sweep(at(2)) != 100 {
		t.Fatal("the janitor judged keys idle by another clock than its limiter's")
	}
	if got := sweepsOf(jSlow); got != 0 || slow.Len() != 100 {
		t.Fatalf("a limiter with an hour's interval swept %d times, %d keys left", got, slow.Len())
	}
}

func TestJanitorCloseWhileSweeping(t *testing.T) {
	// Limiters close, one by one and concurrently, while the sweeper walks
	// their tables (keys busy at their clock, so each sweep visits every
	// key). After Close no sweep of its limiter begins and none runs:
	// the test then writes to its table without locks, which -race
	// reports if the sweeper still reads it.
	before := goleak.IgnoreCurrent()
	clock := NewManualClock(at(0))
	const limiters = 24
	ls := make([]Limiter, limiters)
	for i := range ls {
		ls[i] = newJanitored(t, allAlgorithms[i%4], time.Minute, time.Millisecond, clock)
		for k := range 5000 {
			ls[i].Allow(fmt.Sprint("k", k))
		}
	}
	// The last one stays open to the end: its sweeps show the sweeper
	// going on after the others closed.
	witness := ls[limiters-1]
	jw := jobOf(t, witness)
	closedAt := make([]uint64, limiters-1)
	var wg sync.WaitGroup
	for i := range ls[:limiters-1] {
		wg.Go(func() {
			j := jobOf(t, ls[i])
			eventually(t, "swept once", func() bool { return sweepsOf(j) >= 1 })
			ls[i].Allow("k1")
			ls[i].Close()
			sweeper.mu.Lock()
			closedAt[i] = j.sweeps
			if j.sweeping || j.index >= 0 {
				t.Errorf("limiter %d: after Close, sweeping %v, in the schedule at %d", i, j.sweeping, j.index)
			}
			sweeper.mu.Unlock()
			ls[i].(interface{ touchTableUnlocked() }).touchTableUnlocked()
		})
	}
	wg.Wait()
	n := sweepsOf(jw)
	eventually(t, "witness swept 5 more times", func() bool { return sweepsOf(jw) >= n+5 })
	for i, l := range ls[:limiters-1] {
		if got := sweepsOf(jobOf(t, l)); got != closedAt[i] {
			t.Fatalf("limiter %d swept %d times after Close", i, got-closedAt[i])
		}
		if l.Close() != nil {
			t.Fatal("second Close")
		}
	}
	witness.Close()
	sweeper.mu.Lock()
	left := len(sweeper.jobs)
	sweeper.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d jobs left in the schedule", left)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("the sweeper outlived the last limiter: %v", err)
	}
}

func TestJanitorDisabledDoesNotRegister(t *testing.T) {
	sweeper.mu.Lock()
	n := len(sweeper.jobs)
	sweeper.mu.Unlock()
	for _, alg := range allAlgorithms {
		l := newJanitored(t, alg, time.Second, -1, nil)
		if j := jobOf(t, l); j != nil {
			t.Fatalf("%v: a disabled janitor registered", alg)
		}
		sweeper.mu.Lock()
		m := len(sweeper.jobs)
		sweeper.mu.Unlock()
		if m != n {
			t.Fatalf("%v: %d jobs scheduled, want %d", alg, m, n)
		}
		l.Close()
	}
}

func TestJanitorCloseWaitsForItsOwnSweepOnly(t *testing.T) {
	// A sweep that ends only when told to stands for a slow one: Close of
	// another limiter returns while it runs, and the removal of its own
	// job returns only once it has ended.
	before := goleak.IgnoreCurrent()
	entered := make(chan struct{})
	var once sync.Once
	var ended atomic.Bool
	slow := newJanitorJob(time.Millisecond, func(stop <-chan struct{}) {
		once.Do(func() { close(entered) })
		<-stop
		ended.Store(true)
	}, func() bool { return true })
	sweeper.add(slow)
	slow.arm()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow job was never swept")
	}
	l := newJanitored(t, FixedWindow, time.Second, time.Millisecond, nil)
	closed := make(chan struct{})
	go func() {
		l.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close of one limiter waited for the sweep of another")
	}
	sweeper.remove(slow)
	if !ended.Load() {
		t.Fatal("remove returned while its job's sweep ran")
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("the sweeper outlived its last job: %v", err)
	}
}

// TestKeyIdleOnlyWhenEveryRateIs: with 5 per second and 3 per
// minute, a unit at 0 s leaves the second idle at 1 s but the minute busy
// until its algorithm lets the unit go; Sweep evicts the key exactly when
// its state equals a fresh key's, and the key returns as a fresh one, a
// stale instant included.
func TestKeyIdleOnlyWhenEveryRateIs(t *testing.T) {
	rates := []Rate{{5, time.Second}, {3, time.Minute}}
	idleAt := map[Algorithm]float64{
		FixedWindow:    60, // the minute's window ends
		SlidingLog:     60, // the unit expires
		SlidingCounter: 66, // its 6 s bucket stops weighing
		GCRA:           20, // one emission interval of the minute
	}
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := rateCfg(alg, rates)
			cfg.Shards = 1
			l, fresh := mustNew(t, cfg), mustNew(t, cfg)
			if r := l.AllowN("k", at(0), 1); !r.Allowed {
				t.Fatal(r)
			}
			evictedAt := sweepUntilEvicted(t, l, fresh, 0, 70, 6, true)
			if evictedAt != idleAt[alg] {
				t.Fatalf("evicted at %v s, want %v s", evictedAt, idleAt[alg])
			}
			// It returns fresh: as a fresh key's first requests at the
			// eviction's instant, for a request read before it too.
			for i, sec := range []float64{1, evictedAt, evictedAt + 0.5} {
				for range 4 {
					got, want := l.AllowN("k", at(sec), 1), fresh.AllowN("k", at(max(sec, evictedAt)), 1)
					if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.Window != want.Window ||
						!at(sec).Add(got.ResetAfter).Equal(at(max(sec, evictedAt)).Add(want.ResetAfter)) {
						t.Fatalf("return %d at %v s: %+v, want as a fresh key's %+v", i, sec, got, want)
					}
				}
			}
		})
	}
}

// sweepUntilEvicted sweeps l every 100 ms from after sec0 to sec1 until it
// evicts its one key "k", checking that a sweep evicts it only when its
// peeks at every cost up to maxCost equal those of fresh's key "k", which
// is never used, and, if iff, always then; it returns the instant of the
// eviction, -1 if none. (Peeks show the binding rate: a rate that cannot
// bind, its limit well above another's, may hide its usage from them.)
func sweepUntilEvicted(t *testing.T, l, fresh Limiter, sec0, sec1 float64, maxCost int, iff bool) float64 {
	t.Helper()
	for i := int(sec0*10) + 1; i <= int(sec1*10); i++ {
		x := float64(i) / 10
		p, f := fingerprint(l, "k", at(x), maxCost), fingerprint(fresh, "k", at(x), maxCost)
		same := fmt.Sprint(p) == fmt.Sprint(f)
		n := l.Sweep(at(x))
		if n != 0 && !same || n == 0 && same && iff {
			t.Fatalf("sweep at %v s evicted %d; the key's peeks %+v, a fresh key's %+v", x, n, p, f)
		}
		if n != 0 {
			return x
		}
	}
	return -1
}

// TestSweepWaitsForTheLastRateToGoIdle: a key is idle only when every
// rate is, and the last rate to go idle need not be the longest window's:
// fixed windows of 7 s and a minute do not nest (a unit at 59.5 s leaves
// the minute idle at 60 s and its 7 s window [55 s, 62 s) busy until
// 62 s: t0 is 1 s past a multiple of 7 s); one-bucket counters of 1.5 s
// and 1.4 s windows let a unit at 1.85 s go at 4.5 s and 4.6 s; GCRA's 1
// per 10 s holds a unit longer than 10 per minute. The sliding log's
// shorter windows always end first: it waits for the minute.
func TestSweepWaitsForTheLastRateToGoIdle(t *testing.T) {
	for _, c := range []struct {
		alg        Algorithm
		rates      []Rate
		buckets    int
		used, idle float64
	}{
		{FixedWindow, []Rate{{5, time.Minute}, {2, 7 * time.Second}}, 0, 59.5, 62},
		{SlidingCounter, []Rate{{2, 1500 * time.Millisecond}, {2, 1400 * time.Millisecond}}, 1, 1.85, 4.6},
		{GCRA, []Rate{{10, time.Minute}, {1, 10 * time.Second}}, 0, 59.5, 69.5},
		{SlidingLog, []Rate{{5, time.Minute}, {2, 7 * time.Second}}, 0, 59.5, 119.5},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			cfg := Config{Algorithm: c.alg, Rates: c.rates, Buckets: c.buckets, Shards: 1, JanitorInterval: -1}
			l, fresh := mustNew(t, cfg), mustNew(t, cfg)
			if r := l.AllowN("k", at(c.used), 1); !r.Allowed {
				t.Fatal(r)
			}
			if got := sweepUntilEvicted(t, l, fresh, c.used, c.idle+10, 6, false); got != c.idle {
				t.Fatalf("evicted at %v s, want %v s", got, c.idle)
			}
		})
	}
}

// TestJanitorIntervalDefaultsToTheLongestWindow: the janitor's default interval is the
// window clamped to [1 s, 1 min]; with several rates, the longest window,
// after which a key used once is idle. Config.Window is 0 then, and the
// default read it: a limiter of 3 per second and 100 per hour swept its
// whole table every second, though no key could be idle for an hour.
func TestJanitorIntervalDefaultsToTheLongestWindow(t *testing.T) {
	for _, c := range []struct {
		rates []Rate
		want  time.Duration
	}{
		{[]Rate{{3, time.Second}, {100, time.Hour}}, time.Minute},
		{[]Rate{{3, 10 * time.Millisecond}, {5, 5 * time.Second}}, 5 * time.Second},
		{[]Rate{{5, 30 * time.Second}}, 30 * time.Second},
		{[]Rate{{5, time.Millisecond}, {9, 2 * time.Millisecond}}, time.Second},
	} {
		l, err := New(Config{Algorithm: GCRA, Rates: c.rates})
		if err != nil {
			t.Fatal(err)
		}
		got := l.Config().JanitorInterval
		l.Close()
		if got != c.want {
			t.Errorf("rates %v: janitor interval %v, want %v", c.rates, got, c.want)
		}
	}
}

// armedOf reports whether j is in the sweeper's schedule or being swept.
func armedOf(j *janitorJob) bool {
	sweeper.mu.Lock()
	defer sweeper.mu.Unlock()
	return j.index >= 0 || j.sweeping
}

func TestJanitorVisitsNoIdleLimiter(t *testing.T) {
	// Limiters that hold no key are never swept, however many sweeps of
	// others the sweeper runs; the first key arms exactly its limiter,
	// and a sweep that leaves it empty takes it out again. Sweeps are
	// counted, not timed: a witness busy at its clock is swept every
	// millisecond, and its count says how many ticks went by.
	clock := NewManualClock(at(0))
	witness := newJanitored(t, FixedWindow, time.Minute, time.Millisecond, clock)
	defer witness.Close()
	witness.Allow("w")
	jw := jobOf(t, witness)
	idle := make([]Limiter, 100)
	for i := range idle {
		idle[i] = newJanitored(t, allAlgorithms[i%4], time.Second, time.Millisecond, clock)
		defer idle[i].Close()
	}
	swept := func() (n uint64) {
		for _, l := range idle {
			n += sweepsOf(jobOf(t, l))
		}
		return n
	}
	const K = 20
	n := sweepsOf(jw)
	eventually(t, "witness swept K times", func() bool { return sweepsOf(jw) >= n+K })
	if got := swept(); got != 0 {
		t.Fatalf("limiters holding no key swept %d times over %d ticks", got, K)
	}

	// A peek, a Reset and a SetLimit store no key: still not armed.
	idle[0].Peek("k", at(0), 1)
	idle[0].Reset("k")
	j0, j1 := jobOf(t, idle[0]), jobOf(t, idle[1])
	if armedOf(j0) {
		t.Fatal("a peek armed the janitor")
	}

	// One decision arms exactly its limiter.
	idle[1].Allow("k")
	eventually(t, "the used limiter swept", func() bool { return sweepsOf(j1) >= 1 })
	if got := swept() - sweepsOf(j1); got != 0 {
		t.Fatalf("a decision on one limiter had %d sweeps of the others", got)
	}

	// Once its key is idle, a sweep evicts it and takes it out.
	clock.Advance(2 * time.Second)
	eventually(t, "the key evicted and the limiter out", func() bool { return idle[1].Len() == 0 && !armedOf(j1) })
	after := sweepsOf(j1)
	n = sweepsOf(jw)
	eventually(t, "witness swept K more times", func() bool { return sweepsOf(jw) >= n+K })
	if got := sweepsOf(j1); got != after {
		t.Fatalf("an emptied limiter swept %d more times", got-after)
	}
	if witness.Len() != 1 {
		t.Fatal("the witness's busy key was evicted")
	}

	// And a new key arms it again.
	idle[1].Allow("k2")
	eventually(t, "swept again", func() bool { return sweepsOf(j1) > after })
}

func TestJanitorArmRace(t *testing.T) {
	// Keys stored while the sweeper takes their limiter out: however the
	// two interleave, a limiter that holds a key is armed once the
	// inserts are done, and its key is swept when idle.
	clock := NewManualClock(at(0))
	for round := range 200 {
		l := newJanitored(t, FixedWindow, time.Millisecond, time.Millisecond, clock)
		l.Allow("a")
		clock.Advance(time.Second)
		// The sweeper evicts "a" and may be taking l out right now.
		l.Allow(fmt.Sprint("b", round))
		j := jobOf(t, l)
		if l.Len() > 0 {
			sweeper.mu.Lock()
			ok := j.armed.Load() || j.index >= 0 || j.sweeping
			sweeper.mu.Unlock()
			if !ok && l.Len() > 0 {
				t.Fatalf("round %d: a limiter holding %d keys is out of the schedule", round, l.Len())
			}
		}
		clock.Advance(time.Second)
		eventually(t, "every key evicted", func() bool { return l.Len() == 0 })
		l.Close()
	}
}
