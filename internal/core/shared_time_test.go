package core

import (
	"testing"
	"time"
)

// The time rule on tables built for package sync: instants behind a key's
// latest keep its remote units and its sync state.

// TestSharedBehindKeepsRemoteUnits: a shared key decides a call behind its
// latest instant at the latest, with the other nodes' units of that
// instant's window or buckets: the limit still counts them, and
// RetryAfter, from the caller's now, is the instant the request fits.
func TestSharedBehindKeepsRemoteUnits(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, SlidingLog} {
		l, tab := newSharedT(t, Config{Algorithm: alg, Limit: 4, Window: 10 * time.Second, Buckets: 10})
		l.AllowN("k", at(100), 1)
		fl := collectAll(tab)
		totals := make([]int64, len(fl[0].Deltas))
		totals[len(totals)-1] = 3 // 2 remote units beside the local one
		tab.Apply(&fl[0], totals)
		if r := l.AllowN("k", at(95), 1); !r.Allowed || r.Remaining != 0 {
			t.Fatalf("%v: %+v, want allowed with remaining 0", alg, r)
		}
		for _, sec := range []float64{97, 97, 95.01, 99} {
			r := l.AllowN("k", at(sec), 1)
			if r.Allowed || r.RetryAfter <= 0 {
				t.Fatalf("%v: admitted a fifth unit with limit 4 from %v s: %+v", alg, sec, r)
			}
			if p := l.Peek("k", at(sec).Add(r.RetryAfter-1), 1); p.Allowed {
				t.Fatalf("%v: admitted before RetryAfter %v", alg, r.RetryAfter)
			}
			if p := l.Peek("k", at(sec).Add(r.RetryAfter), 1); !p.Allowed {
				t.Fatalf("%v: denied RetryAfter %v later: %+v", alg, r.RetryAfter, p)
			}
		}
	}
}

// TestSharedLogEmptyRingBehind: a shared log key whose own ring is empty
// still counts the other nodes' units when a caller behind it decides.
func TestSharedLogEmptyRingBehind(t *testing.T) {
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

// TestSharedCounterBehindFilesUnitsAtTheLatest: a shared sliding counter
// key stands still while its instants are an hour behind: it never admits
// over its limit, and its units go to the buckets of the key's latest
// instant, where the other nodes count them.
func TestSharedCounterBehindFilesUnitsAtTheLatest(t *testing.T) {
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
		var fl []Flush
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
		var fl []Flush
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
