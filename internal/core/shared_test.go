package core

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tests of the sync state a limiter keeps for package sync, without a
// store: the test plays the reconciler.

func newSharedT(t *testing.T, cfg Config) (Limiter, Synced) {
	t.Helper()
	cfg.JanitorInterval = -1
	tab, err := NewSynced(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var l Limiter = tab
	t.Cleanup(func() { l.Close() })
	return l, tab
}

func collectAll(tab Synced) []Flush {
	var out []Flush
	for i := range tab.Shards() {
		out = tab.Collect(i, out)
	}
	return out
}

func TestSharedRemoteCountsInDecisions(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			l, tab := newSharedT(t, Config{Algorithm: alg, Limit: 10, Window: 10 * time.Second})
			rates := tab.SyncRates()
			if len(rates) != 1 || rates[0].Window != int64(10*time.Second) {
				t.Fatalf("rates %+v", rates)
			}
			size, m := rates[0].Size, rates[0].Count
			wantM := map[Algorithm]int{FixedWindow: 1, SlidingCounter: 11, SlidingLog: 11}[alg]
			if m != wantM || size != int64(10*time.Second)/int64(max(1, m-1)) {
				t.Fatalf("buckets %d of %d ns", m, size)
			}
			runSteps(t, l, "k", countdown(1, 3, 7))
			fl := collectAll(tab)
			if len(fl) != 1 || fl[0].Key != "k" {
				t.Fatalf("collect %+v", fl)
			}
			f := fl[0]
			if got := f.Deltas[len(f.Deltas)-1]; got != 3 || f.Sent[len(f.Sent)-1] != 3 {
				t.Fatalf("deltas %v sent %v", f.Deltas, f.Sent)
			}
			if again := collectAll(tab); len(again) != 0 {
				t.Fatalf("a second collect without decisions returned %+v", again)
			}
			// The store says 8 units in the bucket: 5 from other nodes.
			totals := make([]int64, len(f.Deltas))
			totals[len(totals)-1] = 8
			tab.Apply(&f, totals)
			runSteps(t, l, "k", []step{{1, 1, true, 1, 0}, {1, 1, true, 0, 0}, {1, 1, false, 0, dontCare}})
			// Those 2 are collected with the sent total as the heal floor.
			fl = collectAll(tab)
			if d := fl[0].Deltas[len(fl[0].Deltas)-1]; d != 2 || fl[0].Sent[len(fl[0].Sent)-1] != 5 {
				t.Fatalf("second flush %+v", fl[0])
			}
			// The flush provably failed: restored, collected again.
			tab.Restore(&fl[0])
			fl = collectAll(tab)
			if len(fl) != 1 || fl[0].Deltas[len(fl[0].Deltas)-1] != 2 {
				t.Fatalf("after restore %+v", fl)
			}
			// Remote units age out with their bucket.
			if r := l.AllowN("k", at(12), 1); !r.Allowed {
				t.Fatalf("remote units outlived their window: %+v", r)
			}
		})
	}
}

func TestSharedDroppedWhenBucketEnds(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: FixedWindow, Limit: 10, Window: time.Second})
	l.AllowN("k", at(0), 4)
	l.AllowN("k", at(1), 1) // the first window ended unsent
	dropped, dirty := tab.SyncStats()
	if dropped != 4 || dirty != 1 {
		t.Fatalf("dropped %d dirty %d", dropped, dirty)
	}
}

func TestSharedGCRAIsExactOnly(t *testing.T) {
	_, err := NewSynced(Config{Algorithm: GCRA, Limit: 1, Window: time.Second})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
}

// TestSharedSlidingLogRetryOffGrid: the newest local unit of a shared log
// stops counting W after its rounded-up stamp, and the RetryAfter a peek
// reports with remote units waiting lands on that instant.
func TestSharedSlidingLogRetryOffGrid(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: SlidingLog, Limit: 4, Window: time.Minute, Buckets: 60})
	s := at(0.5).Add(37) // stamped 63 ns later, on the 100 ns grid
	l.AllowN("k", s, 1)
	fl := collectAll(tab)
	totals := make([]int64, len(fl[0].Deltas))
	totals[len(totals)-1] = 6 // 5 remote units in bucket 0 = [0 s, 1 s)
	tab.Apply(&fl[0], totals)
	r := l.Peek("k", at(5), 1)
	if r.Allowed {
		t.Fatalf("%+v", r)
	}
	// Bucket 0's 5 remote units fade over [60 s, 61 s): at the stamp plus
	// W, 60.5 s plus 100 ns, they weigh ceil(5 * 0.4999999) = 3, so 3 + 1
	// fit the limit of 4 once the local unit is gone, and not a nanosecond
	// before.
	want := at(60.5).Add(100).Sub(at(5))
	if r.RetryAfter != want {
		t.Fatalf("retry after %v, want %v", r.RetryAfter, want)
	}
	if p := l.Peek("k", at(5).Add(r.RetryAfter-1), 1); p.Allowed {
		t.Fatalf("admitted before retry-after %v", r.RetryAfter)
	}
	if p := l.Peek("k", at(5).Add(r.RetryAfter), 1); !p.Allowed {
		t.Fatalf("not admitted at retry-after %v", r.RetryAfter)
	}
}

func TestSharedSlidingLogRetryWithRemote(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: SlidingLog, Limit: 4, Window: 10 * time.Second})
	l.AllowN("k", at(0.5), 1)
	fl := collectAll(tab)
	totals := make([]int64, len(fl[0].Deltas))
	totals[len(totals)-1] = 4 // 3 remote units in bucket 0
	tab.Apply(&fl[0], totals)
	r := l.AllowN("k", at(5), 1)
	if r.Allowed || r.Remaining != 0 {
		t.Fatalf("%+v", r)
	}
	// Bucket 0 straddles from t=10 and its 3 remote units fade over
	// [10, 11); the local unit of 0.5 counts until 10.5. One unit fits once
	// 1 + ceil(3*(1-f)) + 1 <= 4, f the elapsed share of the bucket: from
	// f = 1/3, t = 10.333333334 (rounded up to the nanosecond).
	if p := l.Peek("k", at(5).Add(r.RetryAfter), 1); !p.Allowed {
		t.Fatalf("not admitted at retry-after %v", r.RetryAfter)
	}
	if p := l.Peek("k", at(5).Add(r.RetryAfter-1), 1); p.Allowed {
		t.Fatalf("admitted before retry-after %v", r.RetryAfter)
	}
	if r.RetryAfter != 5333333334*time.Nanosecond {
		t.Fatalf("retry after %v, want 5.333333334s", r.RetryAfter)
	}
}

// newest returns the delta and sent of a flush's newest bucket.
func newest(f Flush) (delta, sent uint32) {
	return f.Deltas[len(f.Deltas)-1], f.Sent[len(f.Sent)-1]
}

// applyNewest tells the table that the store holds total units in f's
// newest bucket.
func applyNewest(tab Synced, f Flush, total int64) {
	totals := make([]int64, len(f.Deltas))
	totals[len(totals)-1] = total
	tab.Apply(&f, totals)
}

// TestSharedSeveralRates: a shared key of two rates keeps sync state per
// rate, each with its own buckets; Collect hands one Flush per rate; the
// other nodes' units of one rate count in that rate only; a request either
// rate denies consumes from neither.
func TestSharedSeveralRates(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			l, tab := newSharedT(t, Config{Algorithm: alg, Rates: []Rate{{3, time.Second}, {10, 10 * time.Second}}})
			rates := tab.SyncRates()
			want := []SyncRate{{Window: int64(10 * time.Second), Size: int64(time.Second), Count: 11},
				{Window: int64(time.Second), Size: int64(100 * time.Millisecond), Count: 11}}
			if alg == FixedWindow {
				want[0].Size, want[0].Count = want[0].Window, 1
				want[1].Size, want[1].Count = want[1].Window, 1
			}
			if len(rates) != 2 || rates[0] != want[0] || rates[1] != want[1] {
				t.Fatalf("rates %+v, want %+v", rates, want)
			}
			if r := l.AllowN("k", at(0.05), 2); !r.Allowed {
				t.Fatalf("%+v", r)
			}
			fl := collectAll(tab)
			if len(fl) != 2 || fl[0].Rate != 0 || fl[1].Rate != 1 || fl[0].Key != "k" || fl[1].Key != "k" {
				t.Fatalf("collect %+v", fl)
			}
			for _, f := range fl {
				if d, s := newest(f); d != 2 || s != 2 || len(f.Deltas) != rates[f.Rate].Count {
					t.Fatalf("rate %d: flush %+v", f.Rate, f)
				}
			}
			for k, f := range fl {
				if want := at(0.05).UnixNano() / rates[k].Size; f.Newest != want {
					t.Fatalf("rate %d: newest bucket %d, want %d", k, f.Newest, want)
				}
			}
			// One other unit in the second's bucket: the second is spent,
			// the ten seconds are not.
			applyNewest(tab, fl[1], 3)
			if rem, ok := tab.Remaining("k", at(0.05).UnixNano(), 1); !ok || rem != 0 {
				t.Fatalf("rate 1 remaining %d %v, want 0", rem, ok)
			}
			if rem, _ := tab.Remaining("k", at(0.05).UnixNano(), 0); rem != 8 {
				t.Fatalf("rate 0 remaining %d, want 8", rem)
			}
			if r := l.AllowN("k", at(0.06), 1); r.Allowed || r.Window != time.Second || r.Limit != 3 {
				t.Fatalf("the second's rate did not deny: %+v", r)
			}
			fl = collectAll(tab)
			if len(fl) != 2 {
				t.Fatalf("collect after a denial %+v", fl)
			}
			for _, f := range fl {
				if d, s := newest(f); d != 0 || s != 2 {
					t.Fatalf("a denied request was consumed from rate %d: %+v", f.Rate, f)
				}
			}
			// Eight other units in the ten seconds: in the next second the
			// ten seconds' rate denies, and the second's consumes nothing.
			applyNewest(tab, fl[0], 10)
			if r := l.AllowN("k", at(1.15), 1); r.Allowed || r.Window != 10*time.Second {
				t.Fatalf("the ten seconds' rate did not deny: %+v", r)
			}
			for _, f := range collectAll(tab) {
				if d, _ := newest(f); d != 0 {
					t.Fatalf("a denied request was consumed from rate %d: %+v", f.Rate, f)
				}
			}
			if rem, _ := tab.Remaining("k", at(1.15).UnixNano(), 1); rem != 3 {
				t.Fatalf("rate 1 remaining in the next second %d, want 3", rem)
			}
		})
	}
}

// TestSharedSeveralRatesDropped: units whose bucket of one rate ends unsent
// are counted dropped for that rate, also when a key of several rates
// moves its rings in the first pass of its decision; a peek's copy counts
// nothing; a reset key's unsent units count once per rate.
func TestSharedSeveralRatesDropped(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			l, tab := newSharedT(t, Config{Algorithm: alg, Rates: []Rate{{100, 10 * time.Second}, {50, time.Second}}, Buckets: 1})
			l.AllowN("k", at(0.5), 4)
			l.Peek("k", at(2.5), 1) // the second's bucket has ended: a peek drops nothing
			if dropped, _ := tab.SyncStats(); dropped != 0 {
				t.Fatalf("a peek counted %d units dropped", dropped)
			}
			l.AllowN("k", at(2.5), 1) // it drops the second's 4, not the ten seconds'
			if dropped, _ := tab.SyncStats(); dropped != 4 {
				t.Fatalf("dropped %d, want 4", dropped)
			}
			if err := l.SetLimits("k", 100, 50); err != nil {
				t.Fatal(err)
			}
			if err := l.Reset("k"); err != nil { // 5 unsent in the ten seconds, 1 in the second
				t.Fatal(err)
			}
			if dropped, _ := tab.SyncStats(); dropped != 10 {
				t.Fatalf("dropped %d after a reset, want 10", dropped)
			}
		})
	}
}

// TestSharedSeveralRatesHolds: a key whose only state is the other nodes'
// units of its shorter rate is not idle: the janitor keeps it until that
// rate's bucket ends.
func TestSharedSeveralRatesHolds(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			l, tab := newSharedT(t, Config{Algorithm: alg, Rates: []Rate{{100, 10 * time.Second}, {50, time.Second}}, Buckets: 1})
			l.AllowN("k", at(0.5), 1)
			collectAll(tab)
			// The near-limit read brings the key to 20 s, where it has no
			// unit of its own, and finds other nodes' units in its second.
			if !tab.Touch("k", at(20).UnixNano()) {
				t.Fatal("key not stored")
			}
			fl := collectAll(tab)
			if len(fl) != 2 || fl[1].Rate != 1 || fl[1].Newest != at(20).UnixNano()/int64(time.Second) {
				t.Fatalf("collect %+v", fl)
			}
			applyNewest(tab, fl[1], 7)
			if n := l.Sweep(at(20.5)); n != 0 || l.Len() != 1 {
				t.Fatalf("swept %d: a key whose second's rate holds other nodes' units was evicted", n)
			}
			// Under the sliding algorithms the units count until the
			// second's bucket after theirs ends.
			if n := l.Sweep(at(22)); n != 1 {
				t.Fatalf("swept %d at 22 s, want the key", n)
			}
		})
	}
}

// TestSharedSlidingLogSeveralRatesRetry: the shorter rate of a shared log
// counts the other nodes' units by its own buckets, and its RetryAfter
// lands on the first instant it admits the request.
func TestSharedSlidingLogSeveralRatesRetry(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: SlidingLog, Rates: []Rate{{10, 10 * time.Second}, {3, time.Second}}})
	l.AllowN("k", at(0.05), 1)
	fl := collectAll(tab)
	applyNewest(tab, fl[1], 3) // 2 other units in the second's bucket [0, 100ms)
	r := l.AllowN("k", at(0.5), 1)
	if r.Allowed || r.Window != time.Second || r.Remaining != 0 {
		t.Fatalf("%+v", r)
	}
	if p := l.Peek("k", at(0.5).Add(r.RetryAfter), 1); !p.Allowed {
		t.Fatalf("not admitted at retry-after %v: %+v", r.RetryAfter, p)
	}
	if p := l.Peek("k", at(0.5).Add(r.RetryAfter-1), 1); p.Allowed {
		t.Fatalf("admitted before retry-after %v", r.RetryAfter)
	}
	// The local unit of 0.05 s counts until 1.05 s; bucket 0's two fade
	// over [1 s, 1.1 s): at 1.05 s, ceil(2 * 0.5) = 1 of them and none of
	// the local unit leave room for one.
	if want := at(1.05).Sub(at(0.5)); r.RetryAfter != want {
		t.Fatalf("retry after %v, want %v", r.RetryAfter, want)
	}
	if rem, _ := tab.Remaining("k", at(0.5).UnixNano(), 0); rem != 9 {
		t.Fatalf("rate 0 remaining %d, want 9 (the other units were in the second's rate only)", rem)
	}
}

// TestSharedSeveralRatesRace: goroutines decide keys of two rates while
// another plays the reconciler, collecting, applying and restoring (a
// failed flush) at random. Every unit admitted is, for each rate, sent
// exactly once in the end: the last collect's Sent of the key's bucket is
// what was admitted.
func TestSharedSeveralRatesRace(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			l, tab := newSharedT(t, Config{Algorithm: alg, Rates: []Rate{{1 << 20, time.Minute}, {1 << 20, time.Hour}}, Shards: 4})
			keys := []string{"a", "b", "c", "d", "e"}
			now := at(30)
			var admitted [5]atomic.Int64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for g := range 4 {
				wg.Go(func() {
					for i := range 2000 {
						k := (g + i) % len(keys)
						n := 1 + i%3
						if l.AllowN(keys[k], now, n).Allowed {
							admitted[k].Add(int64(n))
						}
					}
				})
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					for _, f := range collectAll(tab) {
						if i%3 == 0 {
							tab.Restore(&f)
						} else {
							tab.Apply(&f, make([]int64, len(f.Deltas)))
						}
					}
				}
			}()
			wg.Wait()
			close(stop)
			<-done
			for _, key := range keys {
				tab.Touch(key, now.UnixNano()) // queued for the last collect
			}
			sent := map[string][2]int64{}
			for _, f := range collectAll(tab) {
				v := sent[f.Key]
				v[f.Rate] = int64(f.Sent[len(f.Sent)-1])
				sent[f.Key] = v
			}
			for k, key := range keys {
				for rate := range 2 {
					if got, want := sent[key][rate], admitted[k].Load(); got != want {
						t.Errorf("%s, rate %d: %d units sent, %d admitted", key, rate, got, want)
					}
				}
			}
		})
	}
}

// TestSharedSlidingLogFullTakesBack: when the ring of a shared log of two
// rates cannot grow (the shard's ring memory is exhausted), the decision
// fails with ErrTooManyKeys and no rate keeps its units for the store.
func TestSharedSlidingLogFullTakesBack(t *testing.T) {
	l, tab := newSharedT(t, Config{Algorithm: SlidingLog, Rates: []Rate{{100, 10 * time.Second}, {50, time.Second}}, Shards: 1})
	if r := l.AllowN("k", at(0.5), 1); !r.Allowed {
		t.Fatalf("%+v", r)
	}
	// No page may be added: the ring of 4 cannot grow to 8.
	s := &l.(*LogLimiter).tab.shards[0]
	s.mu.Lock()
	s.rings.pages = append(s.rings.pages, make([][]uint32, maxRingPages-len(s.rings.pages))...)
	s.rings.cur = -1
	s.mu.Unlock()
	if r := l.AllowN("k", at(0.5), 5); r.Allowed || !errors.Is(r.Err, ErrTooManyKeys) {
		t.Fatalf("a ring that cannot grow: %+v", r)
	}
	for _, f := range collectAll(tab) {
		if d, _ := newest(f); d != 1 {
			t.Errorf("rate %d: %d units for the store, want the 1 admitted", f.Rate, d)
		}
	}
}

// TestSharedRemoteNeverDropsInALiveBucket: a store that lost a counter
// (evicted, restarted empty) answers a total below what the node read
// before; the node keeps counting the other nodes' units it read for that
// bucket, Apply reports the shortfall of the newest bucket, and a later
// larger total still raises the view. A new bucket starts from nothing.
func TestSharedRemoteNeverDropsInALiveBucket(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			l, tab := newSharedT(t, Config{Algorithm: alg, Limit: 10, Window: 10 * time.Second})
			if r := l.AllowN("k", at(1), 2); !r.Allowed {
				t.Fatalf("%+v", r)
			}
			fl := collectAll(tab)
			totals := make([]int64, len(fl[0].Sent))
			totals[len(totals)-1] = 2 + 6 // 6 of the other nodes
			if lost := tab.Apply(&fl[0], totals); lost != 0 {
				t.Fatalf("first read: lost %d", lost)
			}
			if r := l.Peek("k", at(1), 0); r.Remaining != 2 {
				t.Fatalf("after reading 6 others: %+v", r)
			}
			// The store lost the counter; this node's write restored its
			// own 2: the others' 6 are missing.
			tab.Touch("k", at(1).UnixNano())
			fl = collectAll(tab)
			totals[len(totals)-1] = 2
			if lost := tab.Apply(&fl[0], totals); lost != 6 {
				t.Fatalf("after the loss: lost %d, want 6", lost)
			}
			if r := l.Peek("k", at(1), 0); r.Remaining != 2 {
				t.Fatalf("forgot the others' units: %+v", r)
			}
			tab.Touch("k", at(1).UnixNano())
			fl = collectAll(tab)
			totals[len(totals)-1] = 2 + 7
			if lost := tab.Apply(&fl[0], totals); lost != 0 {
				t.Fatalf("a larger total: lost %d", lost)
			}
			if r := l.Peek("k", at(1), 0); r.Remaining != 1 {
				t.Fatalf("a larger total is not read: %+v", r)
			}
			// The next window owes nothing to the old one.
			if r := l.Peek("k", at(25), 0); r.Remaining != 10 {
				t.Fatalf("next window: %+v", r)
			}
		})
	}
}
