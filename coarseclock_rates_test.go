package shardlimit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Tests of the sliding log admitting at a lagging reading (a CoarseClock,
// here a test clock whose true instant the test sets) with several rates
// and shared keys: the units are stamped at the true instant, the key's
// time moves there, and the Result is measured from it.

// TestCoarseClockSeveralRatesKeepTheLogExact: with three rates, a clock of
// 1 ms resolution that sometimes stalls, and requests mixing the short
// forms (decided at the reading) with AllowAt and AllowN at the true
// instant, no window of true time of any rate holds more than its limit,
// for a local and a shared key.
func TestCoarseClockSeveralRatesKeepTheLogExact(t *testing.T) {
	rates := []Rate{{4, 10 * time.Millisecond}, {7, 50 * time.Millisecond}, {2, 3 * time.Millisecond}}
	for _, shared := range []bool{false, true} {
		admittedAll := 0
		for seed := range uint64(10) {
			rng := rand.New(rand.NewPCG(seed, 7))
			clock := &stalledClock{steppedClock: steppedClock{res: int64(time.Millisecond)}}
			clock.true.Store(at(0).UnixNano())
			cfg := Config{Algorithm: SlidingLog, Rates: rates, Clock: clock, Shards: 1}
			var l Limiter
			if shared {
				l, _ = newSharedT(t, cfg)
			} else {
				l = mustNew(t, cfg)
			}
			var admitted []time.Time
			for range 2000 {
				clock.true.Add(rng.Int64N(int64(2 * time.Millisecond)))
				switch rng.IntN(20) {
				case 0:
					f := clock.steppedClock.unixNano()
					clock.frozen = &f // the ticking goroutine stalls
				case 1:
					clock.frozen = nil
				}
				trueAt := time.Unix(0, clock.true.Load())
				n := 1 + rng.IntN(2)
				var ok bool
				switch rng.IntN(4) {
				case 0:
					n, ok = 1, l.Allow("k")
				case 1:
					ok = l.AllowNow("k", n).Allowed
				case 2:
					n, ok = 1, l.AllowAt("k", trueAt)
				case 3:
					ok = l.AllowN("k", trueAt, n).Allowed
				}
				if ok {
					for range n {
						admitted = append(admitted, trueAt)
					}
				}
			}
			for _, r := range rates {
				if got := maxInAnyWindow(admitted, r.Window); got > r.Limit {
					t.Fatalf("shared=%v seed %d: %d admitted in one window of true time of rate %v", shared, seed, got, r)
				}
			}
			admittedAll += len(admitted)
		}
		if admittedAll < 2000 {
			t.Fatalf("shared=%v: only %d units admitted: the test tests little", shared, admittedAll)
		}
	}
}

// TestCoarseClockSeveralRatesBoolAndResultFormsAgree: Allow and
// AllowNow(key, 1) on a lagging clock leave the same state (the records,
// rings, extra records and sync words of every shard), for keys of three
// rates, local or shared, through stalls of the clock.
func TestCoarseClockSeveralRatesBoolAndResultFormsAgree(t *testing.T) {
	rates := []Rate{{4, 10 * time.Millisecond}, {7, 50 * time.Millisecond}, {2, 3 * time.Millisecond}}
	for _, shared := range []bool{false, true} {
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, 3))
			clock := &stalledClock{steppedClock: steppedClock{res: int64(time.Millisecond)}}
			clock.true.Store(at(0).UnixNano())
			cfg := Config{Algorithm: SlidingLog, Rates: rates, Clock: clock, Shards: 1}
			mk := func() *logLimiter {
				var l Limiter
				if shared {
					l, _ = newSharedT(t, cfg)
				} else {
					l = mustNew(t, cfg)
				}
				ll := l.(*logLimiter)
				setTableSeed(&ll.tab, tableSeed)
				return ll
			}
			a, b := mk(), mk()
			for op := range 1000 {
				clock.true.Add(rng.Int64N(int64(2 * time.Millisecond)))
				if rng.IntN(20) == 0 {
					f := clock.steppedClock.unixNano()
					clock.frozen = &f
				} else if rng.IntN(10) == 0 {
					clock.frozen = nil
				}
				key := string(rune('a' + rng.IntN(3)))
				x, y := a.Allow(key), b.AllowNow(key, 1)
				if x != y.Allowed {
					t.Fatalf("shared=%v seed %d op %d: Allow %v, AllowNow %+v", shared, seed, op, x, y)
				}
				if err := sameTables(&a.tab, &b.tab); err != "" {
					t.Fatalf("shared=%v seed %d op %d: %s", shared, seed, op, err)
				}
			}
		}
	}
}

// sameTables reports how the state of two tables differs ("" if it does
// not): positions, side words, extra records, rings, floors, dropped
// units.
func sameTables[E comparable](a, b *table[E]) string {
	for i := range a.shards {
		x, y := &a.shards[i], &b.shards[i]
		switch {
		case !slices.Equal(x.recs, y.recs):
			return "records differ"
		case !slices.Equal(x.side, y.side):
			return "side words differ"
		case !slices.Equal(x.extra, y.extra):
			return "extra records differ"
		case !slices.EqualFunc(x.rings.pages, y.rings.pages, slices.Equal):
			return "rings differ"
		case x.floor != y.floor:
			return "floors differ"
		case x.syncDropped.Load() != y.syncDropped.Load():
			return "dropped units differ"
		}
	}
	return ""
}

// TestCoarseClockSeveralRatesMeasureFromTheTrueInstant: the sliding log,
// admitting at a lagging reading, stamps the units at the true instant
// and measures the Result from it (CoarseClock's doc), so a key of two
// rates whose binding rate is the shorter one must report what a key of
// that rate alone reports. Here a unit is stamped at 0.2 ms, and the next
// request comes at the true instant 10.5 ms, read as 10 ms: in the 10 ms
// window the first unit has expired, so after the admission one unit
// counts, Remaining 1 and ResetAfter 10 ms, as the key of one rate says.
// The key of two rates decides its second rate at the reading and binds
// its numbers from there: it counts the expired unit (Remaining 0) and
// reports its expiry, ResetAfter 200 µs from the reading, an instant that
// has already passed. Likewise, for a unit at 0.9 ms and a request at
// 1.5 ms (read as 1 ms), it reports 9.9 ms, measured from the reading,
// where the key of one rate reports 9.4 ms from the true instant.
func TestCoarseClockSeveralRatesMeasureFromTheTrueInstant(t *testing.T) {
	for _, c := range []struct {
		first, second time.Duration // true instants of the two requests
	}{
		{200 * time.Microsecond, 10500 * time.Microsecond},
		{900 * time.Microsecond, 1500 * time.Microsecond},
	} {
		clock := &steppedClock{res: int64(time.Millisecond)}
		two := mustNew(t, Config{Algorithm: SlidingLog, Rates: []Rate{{2, 10 * time.Millisecond}, {100, time.Second}}, Clock: clock})
		one := mustNew(t, Config{Algorithm: SlidingLog, Rates: []Rate{{2, 10 * time.Millisecond}}, Clock: clock})
		for i, d := range []time.Duration{c.first, c.second} {
			clock.true.Store(at(0).Add(d).UnixNano())
			got, want := two.AllowNow("k", 1), one.AllowNow("k", 1)
			if got != want {
				t.Errorf("request %d at the true instant %v (read as %v):\ntwo rates %+v\n one rate %+v",
					i, d, d.Truncate(time.Millisecond), got, want)
			}
		}
	}
}

// TestCoarseClockSharedLogSendsTheTrueInstantsBucket: a shared sliding log
// admitting at a lagging reading stamps the units at the true instant, so
// the units it hands the store must be in the bucket of that instant, and
// the flush's newest bucket that of the key's latest instant (the true
// one). Here the clock's goroutine stalled at 99 ms and 5 units are
// admitted at the true instant 100.5 ms: the log counts them until
// 1.1005 s, but the flush puts them in the bucket [0, 100 ms). Another
// node that reads them from the store then stops counting them at 1.1 s
// (policy S2: the bucket has left the window), a whole bucket earlier than
// a unit of bucket [100, 200 ms) would, and admits 5 more units at
// 1.1002 s while this node's 5 still count: 10 in one window of limit 5
// although the store told the other node everything at once. With a stall
// of several buckets the units leave the other nodes' estimates that much
// earlier.
func TestCoarseClockSharedLogSendsTheTrueInstantsBucket(t *testing.T) {
	clock := &stalledClock{steppedClock: steppedClock{res: int64(time.Millisecond)}}
	a, ta := newSharedT(t, Config{Algorithm: SlidingLog, Limit: 5, Window: time.Second, Clock: clock})
	frozen := at(0.099).UnixNano()
	clock.frozen = &frozen // the ticking goroutine's last tick was at 99 ms
	trueAt := at(0.1005)
	clock.true.Store(trueAt.UnixNano())
	if r := a.AllowNow("k", 5); !r.Allowed {
		t.Fatalf("5 units of a fresh key: %+v", r)
	}
	if a.Peek("k", at(1.1004), 1).Allowed {
		t.Fatal("the log forgot units stamped at 100.5 ms before 1.1005 s")
	}
	size := ta.Rates()[0].Size
	fl := collectAll(ta)
	if len(fl) != 1 {
		t.Fatalf("flushes %+v", fl)
	}
	f := fl[0]
	if d, _ := newest(f); f.Newest != trueAt.UnixNano()/size || d != 5 {
		t.Errorf("flush %+v: want the 5 units in bucket %d, the true instant's (the reading's is %d)", f, trueAt.UnixNano()/size, frozen/size)
	}
	// Another node learns of them at once, and must not admit 5 more
	// while they still count.
	b, tb := newSharedT(t, Config{Algorithm: SlidingLog, Limit: 5, Window: time.Second})
	if err := b.SetLimit("k", 5); err != nil { // stores the key
		t.Fatal(err)
	}
	tb.Touch("k", trueAt.UnixNano())
	totals := make([]int64, len(f.Sent))
	for i, s := range f.Sent {
		totals[i] = int64(s)
	}
	tb.Apply(&f, totals)
	if r := b.AllowN("k", at(1.1002), 5); r.Allowed {
		t.Errorf("the other node admitted 5 units at 1.1002 s while the 5 stamped at 100.5 ms still count: %+v", r)
	}
}
