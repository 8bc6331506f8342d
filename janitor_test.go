package shardlimit

import (
	"fmt"
	"runtime"
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

func TestMaxKeysRejectNewKeys(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 64})
		for i := range 64 {
			if r := l.AllowN(fmt.Sprint("k", i), at(0), 1); !r.Allowed {
				t.Fatalf("%v key %d: %+v", alg, i, r)
			}
		}
		r := l.AllowN("new", at(1), 1)
		wantErr(t, r.Err, ErrTooManyKeys)
		if r.Allowed || l.Len() != 64 {
			t.Fatalf("%v: full table admitted a new key: %+v, len %d", alg, r, l.Len())
		}
		l.AllowN("new", at(1), 0) // a peek stores nothing and refuses nothing
		if st := l.Stats(); st.Refused != 1 || st.Allowed != 64 || st.Denied != 0 {
			t.Fatalf("%v: stats %+v, want 1 refused, 64 allowed, 0 denied", alg, st)
		}
		// A known key is still decided.
		if r := l.AllowN("k3", at(1), 1); !r.Allowed {
			t.Fatalf("%v: known key %+v", alg, r)
		}
		// Once keys are idle, a new key finds room by sampling.
		if r := l.AllowN("new", at(200), 1); !r.Allowed || r.Err != nil {
			t.Fatalf("%v: new key after the others went idle: %+v", alg, r)
		}
		if l.Len() > 64 {
			t.Fatalf("%v: len %d above the cap", alg, l.Len())
		}
	}
}

func TestMaxKeysEvictLeastRecent(t *testing.T) {
	l := mustNew(t, Config{Algorithm: SlidingLog, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 32, WhenFull: EvictLeastRecent})
	l.SetLimit("vip", 3)
	for i := range 31 {
		l.AllowN(fmt.Sprint("k", i), at(float64(i)), 1)
	}
	for i := range 1000 {
		if r := l.AllowN(fmt.Sprint("flood", i), at(40), 1); !r.Allowed {
			t.Fatalf("flood key %d: %+v", i, r)
		}
		if l.Len() > 32 {
			t.Fatalf("len %d above the cap", l.Len())
		}
	}
	if r := l.Peek("vip", at(40), 0); r.Limit != 3 {
		t.Fatalf("key with its own limit was evicted: %+v", r)
	}
	if l.Stats().Evicted < 999 {
		t.Fatalf("stats %+v", l.Stats())
	}
}

func TestResetForgetsUsage(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := mustNew(t, cfgFor(alg, 2, time.Minute, time.Second))
		l.AllowN("a", at(0), 2)
		l.SetLimit("b", 1)
		l.AllowN("b", at(0), 1)
		if err := l.Reset("a"); err != nil {
			t.Fatal(err)
		}
		l.Reset("b")
		l.Reset("missing")
		if r := l.AllowN("a", at(1), 2); !r.Allowed {
			t.Fatalf("%v: a after reset: %+v", alg, r)
		}
		if r := l.AllowN("b", at(1), 1); !r.Allowed || r.Limit != 1 {
			t.Fatalf("%v: b after reset kept its own limit: %+v", alg, r)
		}
	}
}
